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

	"github.com/sg-project/sg/services/defaults"
)

// DefaultChunkLimit is the largest payload a Reassembler accepts unless told
// otherwise: the largest answer (defaults.MaxAnswerBytes, its one home), as
// every chunked transfer is an answer. (defaults imports nothing of sg's, so
// messages may import it.)
const DefaultChunkLimit int64 = defaults.MaxAnswerBytes

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

// HeaderSize is the size of h on the wire ("NATS/1.0\r\n", "k: v\r\n"
// per value, "\r\n"), which counts against max payload.
func HeaderSize(h nats.Header) int {
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
// in one piece, else a copy, into room when it holds them.
func (b Body) slice(lo, hi int, room []byte) []byte {
	var out []byte
	if cap(room) >= hi-lo {
		out = room[:0]
	}
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

// RelayRoom is the room a sender of chunks that a hop passes on as they come
// leaves below the max payload, for the headers that hop changes (the GW
// puts the caller's request id and its own trace id in every chunk).
const RelayRoom = 1 << 10

// SplitChunksBody cuts body into messages for subject, each at most
// maxMsgSize bytes including headers. Every message carries a copy of base
// (routing, rc/ac/ai) plus the chunk headers. The messages share the body
// pieces' memory, except a chunk that spans two pieces, which is copied. A
// body that fits in one message still gets chunk headers (count 1), so the
// receiver checks size and checksum the same way.
func SplitChunksBody(subject string, base nats.Header, body Body, maxMsgSize int) ([]*nats.Msg, error) {
	t, err := cutChunks(base, body, maxMsgSize)
	if err != nil {
		return nil, err
	}
	msgs := make([]*nats.Msg, 0, t.count)
	for i := range t.count {
		lo, hi := t.span(i)
		msgs = append(msgs, &nats.Msg{Subject: subject, Header: t.header(i), Data: body.slice(lo, hi, nil)})
	}
	return msgs, nil
}

// chunkCut is how a body is cut into chunks (SplitChunksBody).
type chunkCut struct {
	base               nats.Header
	stream, sum, total string
	size, room, count  int
}

func cutChunks(base nats.Header, body Body, maxMsgSize int) (chunkCut, error) {
	t := chunkCut{base: base, stream: nuid.Next(), sum: body.checksum(), size: body.Len()}
	t.total = strconv.Itoa(t.size)
	// Worst-case header: index and count at their widest (20 digits).
	probe := cloneHeader(base)
	const wide = "18446744073709551615"
	probe.Set(HdrChunkStream, t.stream)
	probe.Set(HdrChunkIndex, wide)
	probe.Set(HdrChunkCount, wide)
	probe.Set(HdrChunkTotal, t.total)
	probe.Set(HdrChunkSum, t.sum)
	t.room = maxMsgSize - HeaderSize(probe)
	if t.room < 1 {
		return t, fmt.Errorf("%w: max message size %d leaves no room for data after %d header bytes", ErrChunk, maxMsgSize, HeaderSize(probe))
	}
	t.count = max(1, (t.size+t.room-1)/t.room)
	return t, nil
}

// span is chunk i's bytes of the body, lo..hi.
func (t chunkCut) span(i int) (lo, hi int) { return i * t.room, min((i+1)*t.room, t.size) }

// header is chunk i's headers: base's and the chunk's.
func (t chunkCut) header(i int) nats.Header {
	h := cloneHeader(t.base)
	h.Set(HdrChunkStream, t.stream)
	h.Set(HdrChunkIndex, strconv.Itoa(i))
	h.Set(HdrChunkCount, strconv.Itoa(t.count))
	h.Set(HdrChunkTotal, t.total)
	h.Set(HdrChunkSum, t.sum)
	return h
}

// SendChunked publishes payload on subject in chunks (SplitChunksBody), with
// maxMsgSize 0 meaning the connection's max payload, and returns the number
// of chunks. The receiver must allow enough pending bytes on its
// subscription (Subscription.SetPendingLimits) for a whole answer, or it
// becomes a slow consumer and loses chunks; it then reports the transfer as
// incomplete rather than returning a truncated payload.
func SendChunked(nc *nats.Conn, subject string, base nats.Header, payload []byte, maxMsgSize int) (int, error) {
	return SendChunkedBody(nc, subject, base, Body{payload}, maxMsgSize)
}

// SendChunkedBody is SendChunked for a body in pieces (SplitChunksBody),
// sent a chunk at a time: a chunk that spans pieces (the first: the
// envelope's head and its payload) is joined in a buffer of the large
// answers' (freeBuffers), used again for the next and given back once they
// are sent (NATS copies what it publishes), not in a new one for each.
func SendChunkedBody(nc *nats.Conn, subject string, base nats.Header, body Body, maxMsgSize int) (int, error) {
	if maxMsgSize <= 0 {
		maxMsgSize = int(nc.MaxPayload())
	}
	t, err := cutChunks(base, body, maxMsgSize)
	if err != nil {
		return 0, err
	}
	var joined []byte
	defer func() { freeBuffers.put(joined) }()
	for i := range t.count {
		lo, hi := t.span(i)
		if joined == nil && len(body) > 1 {
			joined = freeBuffers.get(t.room)
		}
		if err := nc.PublishMsg(&nats.Msg{Subject: subject, Header: t.header(i), Data: body.slice(lo, hi, joined)}); err != nil {
			return i, fmt.Errorf("messages: publish chunk %d/%d to %s: %w", i, t.count, subject, err)
		}
	}
	return t.count, nil
}

// Reassembler collects the chunks of one transfer, in any order, ignoring
// duplicates, up to a size limit. It is not safe for concurrent use. After
// an error every later Add returns the same error: a broken transfer stays
// broken.
//
// Chunks are gathered and checksummed as they come: the ones in index order
// at once (most transfers: NATS keeps one sender's order), the others once
// the chunks before them came. The last chunk then costs its own copy and
// checksum, not the whole payload's.
type Reassembler struct {
	limit   int64
	started bool
	first   chunkHeader // what the first chunk said of the transfer
	header  nats.Header
	parts   map[int][]byte // chunks after a gap; a map, not a slice: count comes from the network
	next    int            // chunks 0..next-1 are in out and inOrder, and in crc
	out     []byte
	// inOrder: the chunks in order after out's room, until the bytes allow
	// the whole payload's (gather)
	inOrder      [][]byte
	inOrderBytes int64
	crc          uint32
	received     int64
	done         bool
	payload      []byte
	err          error
}

// NewReassembler returns a reassembler that accepts payloads of at most limit
// bytes; limit <= 0 means DefaultChunkLimit.
func NewReassembler(limit int64) *Reassembler {
	if limit <= 0 {
		limit = DefaultChunkLimit
	}
	return &Reassembler{limit: limit}
}

// Limit returns the size limit.
func (r *Reassembler) Limit() int64 { return r.limit }

// Held returns the bytes it holds: the payload's room and the chunks that
// wait for the ones before them (the payload's once done; 0 after a
// failure, which lets them go).
func (r *Reassembler) Held() int64 {
	switch {
	case r.err != nil:
		return 0
	case r.done:
		return int64(cap(r.payload))
	}
	return int64(cap(r.out)) + r.received - int64(len(r.out)) + partCost*int64(len(r.parts))
}

// partCost is what a chunk waiting for the ones before it is counted at
// beyond its bytes (its entry in the map): a forged transfer of a great many
// tiny chunks out of order is bounded by its entries, not by its bytes.
const partCost = 64

// Done reports whether every chunk has arrived and the payload checked out.
func (r *Reassembler) Done() bool { return r.done }

// Missing returns how many chunks have not arrived yet (-1 before the first).
func (r *Reassembler) Missing() int {
	if !r.started {
		return -1
	}
	if r.done {
		return 0
	}
	return int(r.first.count) - r.next - len(r.parts)
}

// Header returns the headers of the first chunk received (routing, rc/ac/ai),
// without the chunk headers: a copy when it had any, else the first
// message's own map.
func (r *Reassembler) Header() nats.Header { return r.header }

// Payload returns the reassembled payload once Done.
func (r *Reassembler) Payload() ([]byte, error) {
	if r.err != nil {
		return nil, r.err
	}
	if !r.done {
		return nil, fmt.Errorf("%w: transfer incomplete: %d of %d chunks missing", ErrChunk, r.Missing(), r.first.count)
	}
	return r.payload, nil
}

func (r *Reassembler) fail(err error) (bool, error) {
	r.err = err
	r.parts, r.out, r.inOrder = nil, nil, nil
	return false, err
}

func chunkInt(h nats.Header, key string) (int64, error) {
	v, err := GetInt(h, key)
	if err != nil {
		return 0, fmt.Errorf("%w: %w", ErrChunk, err)
	}
	return v, nil
}

// chunkHeader is what a chunk's headers say of it and of its transfer.
type chunkHeader struct {
	stream       string
	index, count int64
	total        int64
	sum          string
}

// readChunk reads and checks the chunk headers of h (data is the chunk's
// bytes) within limit: a message without chunk headers is a whole payload
// of its own (index 0 of 1).
func readChunk(h nats.Header, data []byte, limit int64) (chunkHeader, error) {
	c := chunkHeader{stream: h.Get(HdrChunkStream), count: 1, total: int64(len(data)), sum: h.Get(HdrChunkSum)}
	if !IsChunkEnd(h) && (h.Get(HdrChunkCount) != "" || h.Get(HdrChunkIndex) != "") {
		var err error
		if c.index, err = chunkInt(h, HdrChunkIndex); err == nil {
			if c.count, err = chunkInt(h, HdrChunkCount); err == nil {
				c.total, err = chunkInt(h, HdrChunkTotal)
			}
		}
		if err != nil {
			return c, err
		}
	}
	switch {
	case c.total < 0:
		return c, fmt.Errorf("%w: total size %d is negative", ErrChunk, c.total)
	case c.total > limit:
		return c, fmt.Errorf("%w: payload of %d bytes is above the limit of %d bytes", ErrTooLarge, c.total, limit)
	case c.count < 1 || (c.total > 0 && c.count > c.total) || (c.total == 0 && c.count != 1):
		return c, fmt.Errorf("%w: chunk count %d does not fit a payload of %d bytes", ErrChunk, c.count, c.total)
	case c.index < 0 || c.index >= c.count:
		return c, fmt.Errorf("%w: chunk index %d outside 0..%d", ErrChunk, c.index, c.count-1)
	}
	return c, nil
}

// sameTransfer reports whether c is of the transfer that o began.
func (c chunkHeader) sameTransfer(o chunkHeader) bool {
	return c.stream == o.stream && c.count == o.count && c.total == o.total && c.sum == o.sum
}

// IsChunkEnd reports whether h ends a chunked transfer that broke after it
// began: the transfer's Sg-Chunk-Stream, a status that is not OK, and no
// chunk index, count nor data (the GW sends it when an answer it passes on
// chunk by chunk cannot complete).
func IsChunkEnd(h nats.Header) bool {
	if h.Get(HdrChunkStream) == "" || h.Get(HdrChunkIndex) != "" || h.Get(HdrChunkCount) != "" {
		return false
	}
	st, err := ReadStatus(h)
	return err == nil && !st.IsOK()
}

// chunkHeaders are the headers of a chunk transfer, not of the payload.
var chunkHeaders = []string{HdrChunkStream, HdrChunkIndex, HdrChunkCount, HdrChunkTotal, HdrChunkSum}

func hasChunkHeader(h nats.Header) bool {
	for _, k := range chunkHeaders {
		if _, ok := h[k]; ok {
			return true
		}
	}
	return false
}

// Add takes one chunk (its headers and data) and reports whether the
// transfer is complete. A message without chunk headers is a whole payload
// of its own; one that ends the transfer (IsChunkEnd) fails it with its
// status. data is kept, not copied: do not reuse it.
func (r *Reassembler) Add(h nats.Header, data []byte) (done bool, err error) {
	if r.err != nil {
		return false, r.err
	}
	if r.done {
		return true, nil // a duplicate after completion
	}
	if IsChunkEnd(h) && (!r.started || h.Get(HdrChunkStream) == r.first.stream) {
		st, _ := ReadStatus(h)
		return r.fail(fmt.Errorf("%w: the transfer broke after it began: %s %s", ErrChunk, st.RC, st.AI))
	}
	c, err := readChunk(h, data, r.limit)
	if err != nil {
		return r.fail(err)
	}
	if !r.started {
		r.started, r.first = true, c
		r.header = h
		if hasChunkHeader(h) {
			r.header = cloneHeader(h)
			for _, k := range chunkHeaders {
				r.header.Del(k)
			}
		}
	} else if !c.sameTransfer(r.first) {
		return r.fail(fmt.Errorf("%w: chunk of transfer %q (count %d, total %d) mixed into transfer %q (count %d, total %d)",
			ErrChunk, c.stream, c.count, c.total, r.first.stream, r.first.count, r.first.total))
	}
	if _, dup := r.parts[int(c.index)]; dup || int(c.index) < r.next {
		return false, nil
	}
	if r.received+int64(len(data)) > r.first.total {
		return r.fail(fmt.Errorf("%w: chunks add up to more than the announced %d bytes", ErrChunk, r.first.total))
	}
	if len(data) == 0 && r.first.count > 1 {
		// Every sender cuts chunks of bytes; empty ones would cost an entry
		// each and count for nothing.
		return r.fail(fmt.Errorf("%w: empty chunk %d of %d", ErrChunk, c.index, r.first.count))
	}
	if r.first.count == 1 {
		// A payload in one message (most answers): kept as it is, with
		// nothing to gather or copy.
		if int64(len(data)) != r.first.total {
			return r.fail(fmt.Errorf("%w: all %d chunks arrived with %d bytes, announced %d", ErrChunk, r.first.count, len(data), r.first.total))
		}
		if r.first.sum != "" && checksum(data) != r.first.sum {
			return r.fail(fmt.Errorf("%w: checksum mismatch: announced %s, got %s", ErrChunk, r.first.sum, checksum(data)))
		}
		r.received, r.payload, r.done = int64(len(data)), data, true
		return true, nil
	}
	r.received += int64(len(data))
	if int(c.index) != r.next {
		if r.parts == nil {
			r.parts = map[int][]byte{}
		}
		r.parts[int(c.index)] = data
		return false, nil
	}
	r.gather(data)
	for {
		p, ok := r.parts[r.next]
		if !ok {
			break
		}
		delete(r.parts, r.next)
		r.gather(p)
	}
	if r.next < int(r.first.count) {
		return false, nil
	}
	if r.received != r.first.total {
		return r.fail(fmt.Errorf("%w: all %d chunks arrived with %d bytes, announced %d", ErrChunk, r.first.count, r.received, r.first.total))
	}
	if got := strconv.FormatUint(uint64(r.crc), 16); r.first.sum != "" && got != r.first.sum {
		return r.fail(fmt.Errorf("%w: checksum mismatch: announced %s, got %s", ErrChunk, r.first.sum, got))
	}
	r.payload, r.out, r.parts, r.done = r.out, nil, nil, true
	return true, nil
}

// gatherAhead bounds the room the payload is given ahead of the bytes that
// came, as a multiple of them: the total comes from the network, and a
// small forged chunk must not reserve a whole limit's worth. A transfer of
// a few chunks (a large answer in chunks of the max payload) gets its room
// at its first. One of many smaller chunks gets room for gatherAhead times
// its first; the chunks in order past that room are held as they came, not
// copied, until the bytes allow the whole payload's room, which is then
// made once: the room does not grow step by step, each step a new buffer
// and a copy of every byte before it.
const gatherAhead = 4

// gather appends chunk r.next, data, to the payload and its checksum.
func (r *Reassembler) gather(data []byte) {
	r.crc = crc32.Update(r.crc, castagnoli, data)
	r.next++
	need := int64(len(r.out)+len(data)) + r.inOrderBytes
	switch {
	case r.out == nil:
		r.out = make([]byte, 0, min(r.first.total, int64(gatherAhead)*need))
	case r.inOrder == nil && int(need) <= cap(r.out):
	case r.first.total > int64(gatherAhead)*need:
		r.inOrder = append(r.inOrder, data)
		r.inOrderBytes += int64(len(data))
		return
	default:
		out := make([]byte, len(r.out), r.first.total)
		copy(out, r.out)
		for _, p := range r.inOrder {
			out = append(out, p...)
		}
		r.out, r.inOrder, r.inOrderBytes = out, nil, 0
	}
	r.out = append(r.out, data...)
}

// ChunkRelay checks a transfer that is passed on chunk by chunk as it comes,
// in order, without being held (the GW relays an Agg's chunked answer so):
// what a Reassembler checks (one transfer, sizes, the limit, the checksum),
// as far as it can be known before the last chunk. The checksum is known at
// the last: the relay holds that chunk back until Add has accepted it, so a
// transfer that does not check out never completes at the receiver (end it
// with a message IsChunkEnd reports). It is not safe for concurrent use.
type ChunkRelay struct {
	limit    int64
	first    chunkHeader
	size0    int64 // chunk 0's bytes: every chunk but the last has as many
	next     int64
	received int64
	crc      uint32
	err      error
}

// NewChunkRelay returns a relay for transfers of at most limit bytes
// (<= 0: DefaultChunkLimit).
func NewChunkRelay(limit int64) *ChunkRelay {
	if limit <= 0 {
		limit = DefaultChunkLimit
	}
	return &ChunkRelay{limit: limit}
}

// Stream is the transfer's id ("" before its first chunk).
func (r *ChunkRelay) Stream() string { return r.first.stream }

// Next is the number of chunks accepted so far; Count the transfer's.
func (r *ChunkRelay) Next() int  { return int(r.next) }
func (r *ChunkRelay) Count() int { return int(r.first.count) }

// Add takes a chunk. pass: it is the next chunk of the transfer, to be
// passed on; last: it is the last, and the transfer checked out whole. A
// repeat of a chunk already passed is neither (and no error). err: the
// transfer cannot complete (its first chunk is not index 0 of a chunked
// transfer, a chunk was skipped, a chunk of another shape, the sizes or the
// checksum do not add up); a relay that failed stays failed.
func (r *ChunkRelay) Add(h nats.Header, data []byte) (pass, last bool, err error) {
	if r.err != nil {
		return false, false, r.err
	}
	fail := func(err error) (bool, bool, error) {
		r.err = err
		return false, false, err
	}
	if h.Get(HdrChunkIndex) == "" {
		return fail(fmt.Errorf("%w: a message without chunk headers in a chunked transfer", ErrChunk))
	}
	c, err := readChunk(h, data, r.limit)
	if err != nil {
		return fail(err)
	}
	if r.next == 0 {
		if c.index != 0 || c.stream == "" || c.sum == "" {
			return fail(fmt.Errorf("%w: a relayed transfer begins with chunk 0 and names its stream and sum (chunk %d)", ErrChunk, c.index))
		}
		// SplitChunksBody's shape: every chunk but the last as large as chunk 0,
		// so the count follows from the sizes (no transfer of empty chunks).
		if c.count > 1 && (len(data) == 0 || (c.total+int64(len(data))-1)/int64(len(data)) != c.count) {
			return fail(fmt.Errorf("%w: %d chunks of %d bytes for %d bytes: chunks are cut at chunk 0's size", ErrChunk, c.count, len(data), c.total))
		}
		r.first, r.size0 = c, int64(len(data))
	} else if !c.sameTransfer(r.first) {
		return fail(fmt.Errorf("%w: chunk of transfer %q (count %d, total %d) mixed into transfer %q (count %d, total %d)",
			ErrChunk, c.stream, c.count, c.total, r.first.stream, r.first.count, r.first.total))
	}
	switch {
	case c.index < r.next:
		return false, false, nil // a repeat
	case c.index > r.next:
		return fail(fmt.Errorf("%w: chunk %d came, %d expected: chunks were lost", ErrChunk, c.index, r.next))
	case r.received+int64(len(data)) > r.first.total:
		return fail(fmt.Errorf("%w: chunks add up to more than the announced %d bytes", ErrChunk, r.first.total))
	case c.index+1 < r.first.count && int64(len(data)) != r.size0:
		return fail(fmt.Errorf("%w: chunk %d of %d bytes, chunk 0 had %d: chunks are cut at chunk 0's size", ErrChunk, c.index, len(data), r.size0))
	}
	r.received += int64(len(data))
	r.crc = crc32.Update(r.crc, castagnoli, data)
	r.next++
	if r.next < r.first.count {
		return true, false, nil
	}
	if r.received != r.first.total {
		return fail(fmt.Errorf("%w: all %d chunks arrived with %d bytes, announced %d", ErrChunk, r.first.count, r.received, r.first.total))
	}
	if got := strconv.FormatUint(uint64(r.crc), 16); got != r.first.sum {
		return fail(fmt.Errorf("%w: checksum mismatch: announced %s, got %s", ErrChunk, r.first.sum, got))
	}
	return true, true, nil
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
				return nil, nil, fmt.Errorf("messages: receive chunks on %s: %d of %d missing: %w", sub.Subject, r.Missing(), r.first.count, err)
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
