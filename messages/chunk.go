package messages

// Chunked transfer of payloads larger than NATS's max payload. DESIGN: "Large
// answers stream in chunks under NATS's max payload; nothing is cut
// silently." Every chunk carries the transfer id, its index, the chunk count,
// the total size and a CRC-32C of the whole payload, so the receiver can
// reject a transfer that is too large before buffering it, ignore
// duplicates, accept any order, and prove at the end that it has every byte.

import (
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"strconv"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nuid"
)

// DefaultChunkLimit is the largest payload a Reassembler accepts unless told
// otherwise.
const DefaultChunkLimit int64 = 256 << 20

// Chunk errors.
var (
	// ErrTooLarge: the payload is above the receiver's limit (answer TOO_LARGE).
	ErrTooLarge = errors.New("payload too large")
	// ErrChunk: a chunk is malformed or inconsistent with the others.
	ErrChunk = errors.New("bad chunk")
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func checksum(b []byte) string { return strconv.FormatUint(uint64(crc32.Checksum(b, castagnoli)), 16) }

// cloneHeader returns a deep copy of h, never nil.
func cloneHeader(h nats.Header) nats.Header {
	c := make(nats.Header, len(h)+5)
	for k, vs := range h {
		c[k] = append([]string(nil), vs...)
	}
	return c
}

// headerSize is the size of h on the wire ("NATS/1.0\r\n", "k: v\r\n"
// per value, "\r\n"), which counts against max payload.
func headerSize(h nats.Header) int {
	n := len("NATS/1.0\r\n") + 2
	for k, vs := range h {
		for _, v := range vs {
			n += len(k) + 2 + len(v) + 2
		}
	}
	return n
}

// Body is a message body in pieces, in order: an envelope around a payload
// it does not copy (Response.EncodeOwn). SendChunkedBody sends it without
// joining it.
type Body [][]byte

// Len is the body's size in bytes.
func (b Body) Len() int {
	n := 0
	for _, p := range b {
		n += len(p)
	}
	return n
}

// Join returns the body in one slice: its only piece itself, else a copy.
func (b Body) Join() []byte {
	switch len(b) {
	case 0:
		return nil
	case 1:
		return b[0]
	}
	out := make([]byte, 0, b.Len())
	for _, p := range b {
		out = append(out, p...)
	}
	return out
}

// slice returns bytes lo..hi of the body: a piece's own memory when they lie
// in one piece, else a copy.
func (b Body) slice(lo, hi int) []byte {
	var out []byte
	off := 0
	for _, p := range b {
		start := off
		off += len(p)
		if off <= lo || start >= hi {
			continue
		}
		plo, phi := max(lo-start, 0), min(hi-start, len(p))
		if start <= lo && off >= hi {
			return p[plo:phi:phi]
		}
		if out == nil {
			out = make([]byte, 0, hi-lo)
		}
		out = append(out, p[plo:phi]...)
	}
	return out
}

// checksum is the CRC-32C of the whole body.
func (b Body) checksum() string {
	var sum uint32
	for _, p := range b {
		sum = crc32.Update(sum, castagnoli, p)
	}
	return strconv.FormatUint(uint64(sum), 16)
}

// SplitChunks cuts payload into messages for subject, each at most
// maxMsgSize bytes including headers. Every message carries a copy of base
// (routing, rc/ac/ai) plus the chunk headers. The messages share payload's
// memory. A payload that fits in one message still gets chunk headers
// (count 1), so the receiver checks size and checksum the same way.
func SplitChunks(subject string, base nats.Header, payload []byte, maxMsgSize int) ([]*nats.Msg, error) {
	return SplitChunksBody(subject, base, Body{payload}, maxMsgSize)
}

// SplitChunksBody is SplitChunks for a body in pieces: the messages share
// the pieces' memory, except a chunk that spans two pieces, which is copied.
func SplitChunksBody(subject string, base nats.Header, body Body, maxMsgSize int) ([]*nats.Msg, error) {
	stream := nuid.Next()
	sum := body.checksum()
	size := body.Len()
	total := strconv.Itoa(size)
	// Worst-case header: index and count at their widest (20 digits).
	probe := cloneHeader(base)
	const wide = "18446744073709551615"
	probe.Set(HdrChunkStream, stream)
	probe.Set(HdrChunkIndex, wide)
	probe.Set(HdrChunkCount, wide)
	probe.Set(HdrChunkTotal, total)
	probe.Set(HdrChunkSum, sum)
	room := maxMsgSize - headerSize(probe)
	if room < 1 {
		return nil, fmt.Errorf("%w: max message size %d leaves no room for data after %d header bytes", ErrChunk, maxMsgSize, headerSize(probe))
	}
	count := max(1, (size+room-1)/room)
	msgs := make([]*nats.Msg, 0, count)
	for i := range count {
		lo, hi := i*room, min((i+1)*room, size)
		h := cloneHeader(base)
		h.Set(HdrChunkStream, stream)
		h.Set(HdrChunkIndex, strconv.Itoa(i))
		h.Set(HdrChunkCount, strconv.Itoa(count))
		h.Set(HdrChunkTotal, total)
		h.Set(HdrChunkSum, sum)
		msgs = append(msgs, &nats.Msg{Subject: subject, Header: h, Data: body.slice(lo, hi)})
	}
	return msgs, nil
}

// SendChunked publishes payload on subject in chunks (SplitChunks), with
// maxMsgSize 0 meaning the connection's max payload, and returns the number
// of chunks. The receiver must allow enough pending bytes on its
// subscription (Subscription.SetPendingLimits) for a whole answer, or it
// becomes a slow consumer and loses chunks; it then reports the transfer as
// incomplete rather than returning a truncated payload.
func SendChunked(nc *nats.Conn, subject string, base nats.Header, payload []byte, maxMsgSize int) (int, error) {
	return SendChunkedBody(nc, subject, base, Body{payload}, maxMsgSize)
}

// SendChunkedBody is SendChunked for a body in pieces (SplitChunksBody).
func SendChunkedBody(nc *nats.Conn, subject string, base nats.Header, body Body, maxMsgSize int) (int, error) {
	if maxMsgSize <= 0 {
		maxMsgSize = int(nc.MaxPayload())
	}
	msgs, err := SplitChunksBody(subject, base, body, maxMsgSize)
	if err != nil {
		return 0, err
	}
	for i, m := range msgs {
		if err := nc.PublishMsg(m); err != nil {
			return i, fmt.Errorf("messages: publish chunk %d/%d to %s: %w", i, len(msgs), subject, err)
		}
	}
	return len(msgs), nil
}

// Reassembler collects the chunks of one transfer, in any order, ignoring
// duplicates, up to a size limit. It is not safe for concurrent use. After
// an error every later Add returns the same error: a broken transfer stays
// broken.
type Reassembler struct {
	limit    int64
	started  bool
	stream   string
	count    int
	total    int64
	sum      string
	header   nats.Header
	parts    map[int][]byte // a map, not a slice: count comes from the network
	received int64
	done     bool
	payload  []byte
	err      error
}

// NewReassembler returns a reassembler that accepts payloads of at most limit
// bytes; limit <= 0 means DefaultChunkLimit.
func NewReassembler(limit int64) *Reassembler {
	if limit <= 0 {
		limit = DefaultChunkLimit
	}
	return &Reassembler{limit: limit, parts: map[int][]byte{}}
}

// Limit returns the size limit.
func (r *Reassembler) Limit() int64 { return r.limit }

// Done reports whether every chunk has arrived and the payload checked out.
func (r *Reassembler) Done() bool { return r.done }

// Missing returns how many chunks have not arrived yet (-1 before the first).
func (r *Reassembler) Missing() int {
	if !r.started {
		return -1
	}
	return r.count - len(r.parts)
}

// Header returns the headers of the first chunk received (routing, rc/ac/ai),
// without the chunk headers.
func (r *Reassembler) Header() nats.Header { return r.header }

// Payload returns the reassembled payload once Done.
func (r *Reassembler) Payload() ([]byte, error) {
	if r.err != nil {
		return nil, r.err
	}
	if !r.done {
		return nil, fmt.Errorf("%w: transfer incomplete: %d of %d chunks missing", ErrChunk, r.Missing(), r.count)
	}
	return r.payload, nil
}

func (r *Reassembler) fail(err error) (bool, error) {
	r.err = err
	r.parts = nil
	return false, err
}

func chunkInt(h nats.Header, key string) (int64, error) {
	v, err := GetInt(h, key)
	if err != nil {
		return 0, fmt.Errorf("%w: %w", ErrChunk, err)
	}
	return v, nil
}

// Add takes one chunk (its headers and data) and reports whether the
// transfer is complete. A message without chunk headers is a whole payload
// of its own. data is kept, not copied: do not reuse it.
func (r *Reassembler) Add(h nats.Header, data []byte) (done bool, err error) {
	if r.err != nil {
		return false, r.err
	}
	if r.done {
		return true, nil // a duplicate after completion
	}
	var (
		stream      = h.Get(HdrChunkStream)
		index       int64
		count       int64 = 1
		total             = int64(len(data))
		sum               = h.Get(HdrChunkSum)
		unchunked         = h.Get(HdrChunkCount) == "" && h.Get(HdrChunkIndex) == ""
		parseErrors error
	)
	if !unchunked {
		if index, err = chunkInt(h, HdrChunkIndex); err == nil {
			if count, err = chunkInt(h, HdrChunkCount); err == nil {
				total, err = chunkInt(h, HdrChunkTotal)
			}
		}
		parseErrors = err
	}
	if parseErrors != nil {
		return r.fail(parseErrors)
	}
	switch {
	case total < 0:
		return r.fail(fmt.Errorf("%w: total size %d is negative", ErrChunk, total))
	case total > r.limit:
		return r.fail(fmt.Errorf("%w: payload of %d bytes is above the limit of %d bytes", ErrTooLarge, total, r.limit))
	case count < 1 || (total > 0 && count > total) || (total == 0 && count != 1):
		return r.fail(fmt.Errorf("%w: chunk count %d does not fit a payload of %d bytes", ErrChunk, count, total))
	case index < 0 || index >= count:
		return r.fail(fmt.Errorf("%w: chunk index %d outside 0..%d", ErrChunk, index, count-1))
	}
	if !r.started {
		r.started, r.stream, r.count, r.total, r.sum = true, stream, int(count), total, sum
		r.header = cloneHeader(h)
		for _, k := range []string{HdrChunkStream, HdrChunkIndex, HdrChunkCount, HdrChunkTotal, HdrChunkSum} {
			r.header.Del(k)
		}
	} else if stream != r.stream || int(count) != r.count || total != r.total || sum != r.sum {
		return r.fail(fmt.Errorf("%w: chunk of transfer %q (count %d, total %d) mixed into transfer %q (count %d, total %d)",
			ErrChunk, stream, count, total, r.stream, r.count, r.total))
	}
	if _, dup := r.parts[int(index)]; dup {
		return false, nil
	}
	if r.received+int64(len(data)) > r.total {
		return r.fail(fmt.Errorf("%w: chunks add up to more than the announced %d bytes", ErrChunk, r.total))
	}
	r.parts[int(index)] = data
	r.received += int64(len(data))
	if len(r.parts) < r.count {
		return false, nil
	}
	if r.received != r.total {
		return r.fail(fmt.Errorf("%w: all %d chunks arrived with %d bytes, announced %d", ErrChunk, r.count, r.received, r.total))
	}
	out := make([]byte, 0, r.total)
	for i := range r.count {
		out = append(out, r.parts[i]...)
	}
	if r.sum != "" && checksum(out) != r.sum {
		return r.fail(fmt.Errorf("%w: checksum mismatch: announced %s, got %s", ErrChunk, r.sum, checksum(out)))
	}
	r.payload, r.parts, r.done = out, nil, true
	return true, nil
}

// ReceiveChunked reads chunks from sub until one transfer is complete, ctx
// ends or a chunk is bad, and returns the payload and the headers of the
// transfer (routing, rc/ac/ai). limit <= 0 means DefaultChunkLimit.
func ReceiveChunked(ctx context.Context, sub *nats.Subscription, limit int64) ([]byte, nats.Header, error) {
	r := NewReassembler(limit)
	for {
		m, err := sub.NextMsgWithContext(ctx)
		if err != nil {
			if r.started {
				return nil, nil, fmt.Errorf("messages: receive chunks on %s: %d of %d missing: %w", sub.Subject, r.Missing(), r.count, err)
			}
			return nil, nil, fmt.Errorf("messages: receive chunks on %s: %w", sub.Subject, err)
		}
		done, err := r.Add(m.Header, m.Data)
		if err != nil {
			return nil, nil, err
		}
		if done {
			p, err := r.Payload()
			return p, r.Header(), err
		}
	}
}
