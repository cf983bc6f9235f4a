package messages

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/sg-project/sg/services/defaults"
	"github.com/sg-project/sg/test/natstest"
)

func randomPayload(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, seed))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

func TestChunkedOverNATS(t *testing.T) {
	nc := natstest.Connect(t, natstest.Start(t))

	const subject = "sg.gw.gw-1.answer.req-1"
	sub, err := nc.SubscribeSync(subject)
	if err != nil {
		t.Fatal(err)
	}
	if err := sub.SetPendingLimits(-1, -1); err != nil { // a whole answer may be pending
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	payload := randomPayload(5<<20+12345, 1) // 5 MiB and change: several chunks at the default 1 MiB max payload
	base := nats.Header{}
	Routing{RequestID: "req-1", API: "getData"}.Write(base)
	StatusOK.Write(base)
	n, err := SendChunked(nc, subject, base, payload, 0)
	if err != nil {
		t.Fatal(err)
	}
	if n < 6 {
		t.Errorf("%d chunks for %d bytes at max payload %d", n, len(payload), nc.MaxPayload())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	got, hdr, err := ReceiveChunked(ctx, sub, 0)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, payload) {
		t.Fatalf("payload differs: got %d bytes, want %d", len(got), len(payload))
	}
	if hdr.Get(HdrRequestID) != "req-1" || hdr.Get(HdrChunkIndex) != "" {
		t.Errorf("transfer header %v", hdr)
	}
	if st, err := ReadStatus(hdr); err != nil || !st.IsOK() {
		t.Errorf("status %+v %v", st, err)
	}

	// A receiver with a smaller limit refuses at the first chunk, before buffering.
	if _, err := SendChunked(nc, subject, base, payload, 0); err != nil {
		t.Fatal(err)
	}
	if _, _, err := ReceiveChunked(ctx, sub, 1<<20); !errors.Is(err, ErrTooLarge) {
		t.Errorf("limit: %v", err)
	}
}

func TestSplitChunksSizes(t *testing.T) {
	payload := randomPayload(100_000, 2)
	base := nats.Header{HdrRequestID: []string{"r"}}
	const max = 4096
	msgs, err := SplitChunksBody("s", base, Body{payload}, max)
	if err != nil {
		t.Fatal(err)
	}
	var joined []byte
	for i, m := range msgs {
		if size := len(m.Data) + HeaderSize(m.Header); size > max {
			t.Errorf("chunk %d is %d bytes, max %d", i, size, max)
		}
		if m.Header.Get(HdrChunkIndex) != strconv.Itoa(i) || m.Header.Get(HdrRequestID) != "r" {
			t.Errorf("chunk %d headers %v", i, m.Header)
		}
		joined = append(joined, m.Data...)
	}
	if !bytes.Equal(joined, payload) {
		t.Error("chunks do not join to the payload")
	}
	if len(base) != 1 {
		t.Error("SplitChunksBody modified the base header")
	}
	if _, err := SplitChunksBody("s", base, Body{payload}, 50); !errors.Is(err, ErrChunk) {
		t.Errorf("tiny max size: %v", err)
	}
	// Empty payload: one chunk, reassembles to empty.
	msgs, err = SplitChunksBody("s", nil, nil, max)
	if err != nil || len(msgs) != 1 {
		t.Fatalf("empty payload: %d msgs, %v", len(msgs), err)
	}
	r := NewReassembler(0)
	if done, err := r.Add(msgs[0].Header, msgs[0].Data); !done || err != nil {
		t.Errorf("empty payload: %v %v", done, err)
	}
}

func split(t *testing.T, payload []byte, max int) []*nats.Msg {
	t.Helper()
	msgs, err := SplitChunksBody("s", nats.Header{HdrAPI: []string{"getData"}}, Body{payload}, max)
	if err != nil {
		t.Fatal(err)
	}
	return msgs
}

func TestReassemblerAnyOrderAndDuplicates(t *testing.T) {
	payload := randomPayload(50_000, 3)
	msgs := split(t, payload, 1000)
	order := rand.New(rand.NewPCG(4, 4)).Perm(len(msgs))
	r := NewReassembler(0)
	if r.Missing() != -1 {
		t.Error("Missing before first chunk")
	}
	for k, i := range order {
		done, err := r.Add(msgs[i].Header, msgs[i].Data)
		if err != nil {
			t.Fatal(err)
		}
		if k%3 == 0 { // duplicates are ignored
			if _, err := r.Add(msgs[i].Header, msgs[i].Data); err != nil {
				t.Fatal(err)
			}
		}
		if done != (k == len(order)-1) {
			t.Fatalf("done=%v after %d of %d chunks", done, k+1, len(msgs))
		}
		if k == 0 {
			if _, err := r.Payload(); !errors.Is(err, ErrChunk) {
				t.Errorf("Payload before done: %v", err)
			}
		}
	}
	got, err := r.Payload()
	if err != nil || !bytes.Equal(got, payload) || r.Header().Get(HdrAPI) != "getData" {
		t.Fatalf("reassembled %d bytes, %v", len(got), err)
	}
	if done, err := r.Add(msgs[0].Header, msgs[0].Data); !done || err != nil {
		t.Errorf("duplicate after completion: %v %v", done, err)
	}
}

// A payload in one message is kept as it came, not copied; a transfer of
// one chunk loses its chunk headers and is checked as any transfer.
func TestReassemblerOneMessage(t *testing.T) {
	data := []byte("a whole answer")
	h := nats.Header{HdrAPI: []string{"getData"}}
	r := NewReassembler(0)
	if done, err := r.Add(h, data); !done || err != nil {
		t.Fatalf("whole message: %v %v", done, err)
	}
	got, err := r.Payload()
	if err != nil || &got[0] != &data[0] || len(got) != len(data) || r.Header().Get(HdrAPI) != "getData" || r.Missing() != 0 {
		t.Fatalf("whole message: %q %v, header %v, missing %d", got, err, r.Header(), r.Missing())
	}
	if done, err := r.Add(h, data); !done || err != nil {
		t.Errorf("duplicate after completion: %v %v", done, err)
	}

	one := split(t, data, 1<<10)
	if len(one) != 1 {
		t.Fatalf("%d chunks, want 1", len(one))
	}
	r = NewReassembler(0)
	if done, err := r.Add(one[0].Header, one[0].Data); !done || err != nil {
		t.Fatalf("one chunk: %v %v", done, err)
	}
	if got, _ := r.Payload(); !bytes.Equal(got, data) || r.Header().Get(HdrChunkStream) != "" || r.Header().Get(HdrAPI) != "getData" {
		t.Fatalf("one chunk: %q, header %v", got, r.Header())
	}
	if one[0].Header.Get(HdrChunkStream) == "" {
		t.Error("the chunk's own header lost its chunk headers")
	}

	for _, tc := range []struct {
		name string
		data []byte
		set  func(nats.Header)
	}{
		{"bad checksum", data, func(h nats.Header) { h.Set(HdrChunkSum, "0") }},
		{"fewer bytes than announced", data[1:], func(nats.Header) {}},
		{"more bytes than announced", append(slices.Clone(data), 'x'), func(nats.Header) {}},
	} {
		h := cloneHeader(one[0].Header)
		tc.set(h)
		r := NewReassembler(0)
		if done, err := r.Add(h, tc.data); done || !errors.Is(err, ErrChunk) {
			t.Errorf("%s: %v %v", tc.name, done, err)
		}
	}
}

func TestReassemblerRejects(t *testing.T) {
	payload := randomPayload(10_000, 5)
	t.Run("limit", func(t *testing.T) {
		msgs := split(t, payload, 2000)
		r := NewReassembler(9_999)
		_, err := r.Add(msgs[0].Header, msgs[0].Data)
		if !errors.Is(err, ErrTooLarge) {
			t.Fatalf("got %v", err)
		}
		if _, err2 := r.Add(msgs[1].Header, msgs[1].Data); !errors.Is(err2, ErrTooLarge) {
			t.Errorf("error not sticky: %v", err2)
		}
	})
	t.Run("unchunked above limit", func(t *testing.T) {
		if _, err := NewReassembler(10).Add(nil, payload); !errors.Is(err, ErrTooLarge) {
			t.Errorf("got %v", err)
		}
	})
	t.Run("unchunked", func(t *testing.T) {
		r := NewReassembler(0)
		done, err := r.Add(nil, payload)
		got, _ := r.Payload()
		if !done || err != nil || !bytes.Equal(got, payload) {
			t.Errorf("got %v %v", done, err)
		}
	})
	t.Run("corrupted", func(t *testing.T) {
		msgs := split(t, payload, 2000)
		msgs[1].Data = append([]byte{}, msgs[1].Data...)
		msgs[1].Data[0] ^= 0xff
		r := NewReassembler(0)
		var err error
		for _, m := range msgs {
			if _, err = r.Add(m.Header, m.Data); err != nil {
				break
			}
		}
		if !errors.Is(err, ErrChunk) {
			t.Errorf("checksum not checked: %v", err)
		}
	})
	t.Run("mixed transfers", func(t *testing.T) {
		a, b := split(t, payload, 2000), split(t, payload, 2000)
		r := NewReassembler(0)
		if _, err := r.Add(a[0].Header, a[0].Data); err != nil {
			t.Fatal(err)
		}
		if _, err := r.Add(b[1].Header, b[1].Data); !errors.Is(err, ErrChunk) {
			t.Errorf("mixed transfer accepted: %v", err)
		}
	})
	t.Run("bad headers", func(t *testing.T) {
		mk := func(idx, count, total string) nats.Header {
			return nats.Header{HdrChunkIndex: {idx}, HdrChunkCount: {count}, HdrChunkTotal: {total}}
		}
		for name, h := range map[string]nats.Header{
			"index not a number": mk("x", "2", "10"),
			"index out of range": mk("2", "2", "10"),
			"negative index":     mk("-1", "2", "10"),
			"zero count":         mk("0", "0", "10"),
			"count above total":  mk("0", "11", "10"),
			"negative total":     mk("0", "1", "-1"),
			"missing total":      {HdrChunkIndex: {"0"}, HdrChunkCount: {"1"}},
		} {
			if _, err := NewReassembler(0).Add(h, []byte("x")); !errors.Is(err, ErrChunk) {
				t.Errorf("%s: %v", name, err)
			}
		}
	})
	t.Run("more bytes than announced", func(t *testing.T) {
		h := nats.Header{HdrChunkIndex: {"0"}, HdrChunkCount: {"2"}, HdrChunkTotal: {"3"}}
		if _, err := NewReassembler(0).Add(h, []byte("abcd")); !errors.Is(err, ErrChunk) {
			t.Errorf("got %v", err)
		}
	})
	t.Run("fewer bytes than announced", func(t *testing.T) {
		h := nats.Header{HdrChunkIndex: {"0"}, HdrChunkCount: {"1"}, HdrChunkTotal: {"3"}}
		if _, err := NewReassembler(0).Add(h, []byte("ab")); !errors.Is(err, ErrChunk) {
			t.Errorf("truncated transfer accepted: %v", err)
		}
	})
}

// A body in pieces is chunked as its joined bytes are: the same data in
// every chunk (pieces shared where a chunk lies in one, joined where it
// spans several, empty pieces skipped) and the same checksum and total.
func TestSplitChunksBody(t *testing.T) {
	payload := randomPayload(30_000, 7)
	body := Body{payload[:10], nil, payload[10:5000], payload[5000:5001], payload[5001:]}
	const max = 4096
	whole := split(t, payload, max)
	msgs, err := SplitChunksBody("s", nats.Header{HdrAPI: []string{"getData"}}, body, max)
	if err != nil {
		t.Fatal(err)
	}
	if len(msgs) != len(whole) {
		t.Fatalf("%d chunks, %d for the joined body", len(msgs), len(whole))
	}
	shared := 0
	for i, m := range msgs {
		if !bytes.Equal(m.Data, whole[i].Data) {
			t.Fatalf("chunk %d differs", i)
		}
		for _, k := range []string{HdrChunkIndex, HdrChunkCount, HdrChunkTotal, HdrChunkSum} {
			if m.Header.Get(k) != whole[i].Header.Get(k) {
				t.Errorf("chunk %d %s %q, want %q", i, k, m.Header.Get(k), whole[i].Header.Get(k))
			}
		}
		if &m.Data[0] == &payload[i*len(whole[0].Data)] {
			shared++
		}
	}
	if shared < len(msgs)-2 {
		t.Errorf("%d of %d chunks share the body's memory", shared, len(msgs))
	}
	r := NewReassembler(0)
	for _, m := range msgs {
		if _, err := r.Add(m.Header, m.Data); err != nil {
			t.Fatal(err)
		}
	}
	if got, err := r.Payload(); err != nil || !bytes.Equal(got, payload) || !bytes.Equal(body.Join(), payload) {
		t.Fatalf("reassembled %d bytes, %v", len(got), err)
	}
}

// A transfer the relaying hop ended (IsChunkEnd) fails at the receiver with
// the hop's status; an end message of another transfer, or an OK status, is
// no end.
func TestReassemblerChunkEnd(t *testing.T) {
	msgs := split(t, randomPayload(10_000, 8), 1000)
	end := nats.Header{}
	end.Set(HdrChunkStream, msgs[0].Header.Get(HdrChunkStream))
	Errorf(CodeErr, CodeErr, "Answer broken after 2 of 9 chunks: lost").Write(end)
	if !IsChunkEnd(end) || IsChunkEnd(msgs[0].Header) {
		t.Fatal("IsChunkEnd")
	}
	ok := nats.Header{HdrChunkStream: end[HdrChunkStream]}
	StatusOK.Write(ok)
	if IsChunkEnd(ok) {
		t.Fatal("an OK status ends a transfer")
	}
	r := NewReassembler(0)
	for _, m := range msgs[:2] {
		if _, err := r.Add(m.Header, m.Data); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := r.Add(end, nil); !errors.Is(err, ErrChunk) || !strings.Contains(err.Error(), "lost") {
		t.Fatalf("end message: %v", err)
	}
	if _, err := r.Payload(); err == nil {
		t.Fatal("payload after the end")
	}
}

// ChunkRelay passes a transfer as SplitChunksBody cuts it, chunk by chunk, the
// last only once the whole checks out; it refuses transfers of another shape
// (empty chunks, chunks of other sizes: a sender could make their count as
// large as the bytes), a gap, and a corrupt byte.
func TestChunkRelay(t *testing.T) {
	payload := randomPayload(10_000, 9)
	msgs, err := SplitChunksBody("x", nats.Header{}, Body{payload}, 3_000)
	if err != nil || len(msgs) < 4 {
		t.Fatalf("%d chunks, %v", len(msgs), err)
	}
	run := func(msgs []*nats.Msg) (passed []byte, last bool, err error) {
		r := NewChunkRelay(0)
		for _, m := range msgs {
			pass, l, err := r.Add(m.Header, m.Data)
			if err != nil {
				return passed, false, err
			}
			if pass {
				passed = append(passed, m.Data...)
			}
			last = l
		}
		return passed, last, nil
	}
	if got, last, err := run(msgs); err != nil || !last || !bytes.Equal(got, payload) {
		t.Fatalf("whole transfer: last %v, %v, equal %v", last, err, bytes.Equal(got, payload))
	}
	with := func(i int, data []byte, set map[string]string) []*nats.Msg {
		out := make([]*nats.Msg, len(msgs))
		for j, m := range msgs {
			out[j] = &nats.Msg{Header: cloneHeader(m.Header), Data: m.Data}
		}
		out[i].Data = data
		for k, v := range set {
			out[i].Header.Set(k, v)
		}
		return out
	}
	// The same bytes in the same order, chunk 1 empty and chunk 2 carrying
	// its bytes too: size and checksum add up, the shape does not.
	emptyMiddle := with(1, nil, nil)
	emptyMiddle[2].Data = append(bytes.Clone(msgs[1].Data), msgs[2].Data...)
	corrupt := bytes.Clone(msgs[1].Data)
	corrupt[0] ^= 1
	for name, bad := range map[string][]*nats.Msg{
		"gap":            append(append([]*nats.Msg{}, msgs[:1]...), msgs[2:]...),
		"corrupt":        with(1, corrupt, nil),
		"empty middle":   emptyMiddle,
		"empty chunk 0":  with(0, nil, map[string]string{HdrChunkCount: "10000", HdrChunkTotal: "10000"}),
		"count too high": with(0, msgs[0].Data, map[string]string{HdrChunkCount: "10000"}),
	} {
		if _, last, err := run(bad); err == nil || last || !errors.Is(err, ErrChunk) {
			t.Errorf("%s: last %v, err %v; want ErrChunk and never the last", name, last, err)
		}
	}
}

// Chunks are gathered and checksummed as they come: in index order at once
// (the last then costs its own bytes, not the whole payload's), after a gap
// once the chunks before them came; either way a forged chunk fails the
// transfer at its end.
func TestReassemblerGathersAsChunksCome(t *testing.T) {
	payload := randomPayload(50_000, 9)
	msgs := split(t, payload, 1000)
	t.Run("in order", func(t *testing.T) {
		r := NewReassembler(0)
		n := 0
		rooms := map[*byte]bool{}
		for i, m := range msgs[:len(msgs)-1] {
			if done, err := r.Add(m.Header, m.Data); done || err != nil {
				t.Fatalf("chunk %d: %v %v", i, done, err)
			}
			n += len(m.Data)
			gathered := append(slices.Clone(r.out), bytes.Join(r.inOrder, nil)...)
			if r.next != i+1 || len(r.parts) != 0 || !bytes.Equal(gathered, payload[:n]) {
				t.Fatalf("after chunk %d: %d gathered (%d bytes), %d held", i, r.next, len(gathered), len(r.parts))
			}
			if len(r.out) > 0 {
				rooms[&r.out[0]] = true
			}
		}
		// The first chunk's room, then the whole payload's: not a room for
		// each step of its growth, each a copy of the bytes before.
		if len(rooms) != 2 || cap(r.out) != len(payload) {
			t.Fatalf("%d rooms made, the last %d bytes for %d", len(rooms), cap(r.out), len(payload))
		}
		last := msgs[len(msgs)-1]
		if done, err := r.Add(last.Header, last.Data); !done || err != nil {
			t.Fatalf("last chunk: %v %v", done, err)
		}
		if got, err := r.Payload(); err != nil || !bytes.Equal(got, payload) {
			t.Fatalf("reassembled %d bytes, %v", len(got), err)
		}
	})
	t.Run("after a gap", func(t *testing.T) {
		r := NewReassembler(0)
		for i := len(msgs) - 1; i >= 1; i-- {
			if done, err := r.Add(msgs[i].Header, msgs[i].Data); done || err != nil {
				t.Fatalf("chunk %d: %v %v", i, done, err)
			}
		}
		if r.next != 0 || len(r.parts) != len(msgs)-1 || r.Missing() != 1 {
			t.Fatalf("%d gathered, %d held, %d missing", r.next, len(r.parts), r.Missing())
		}
		if done, err := r.Add(msgs[0].Header, msgs[0].Data); !done || err != nil {
			t.Fatalf("chunk 0: %v %v", done, err)
		}
		if got, err := r.Payload(); err != nil || !bytes.Equal(got, payload) || len(r.parts) != 0 {
			t.Fatalf("reassembled %d bytes, %v", len(got), err)
		}
	})
	forged := func(i int) []*nats.Msg {
		f := slices.Clone(msgs)
		f[i] = &nats.Msg{Header: msgs[i].Header, Data: slices.Clone(msgs[i].Data)}
		f[i].Data[len(f[i].Data)/2] ^= 0x01
		return f
	}
	for name, order := range map[string][]int{
		"forged chunk in order":       nil,
		"forged chunk after a gap":    {0, 3, 2, 1},
		"forged chunk come before 0":  {3, 2, 1, 0},
		"forged chunk held then sent": {0, 2, 3, 1},
	} {
		t.Run(name, func(t *testing.T) {
			f := forged(2)
			seq := slices.Collect(func(yield func(int) bool) {
				for _, i := range order {
					yield(i)
				}
				for i := len(order); i < len(f); i++ {
					yield(i)
				}
			})
			r := NewReassembler(0)
			var err error
			for k, i := range seq {
				var done bool
				if done, err = r.Add(f[i].Header, f[i].Data); err != nil {
					if k != len(seq)-1 {
						t.Fatalf("failed at chunk %d of %d: %v", k+1, len(seq), err)
					}
					break
				}
				if done {
					t.Fatal("a forged transfer completed")
				}
			}
			if !errors.Is(err, ErrChunk) || !strings.Contains(err.Error(), "checksum") {
				t.Fatalf("forged chunk: %v", err)
			}
			if got, err := r.Payload(); got != nil || !errors.Is(err, ErrChunk) {
				t.Errorf("payload after a forged chunk: %d bytes, %v", len(got), err)
			}
		})
	}
}

// The room a transfer is given ahead of its bytes is bounded by the bytes
// that came: a small chunk announcing a payload as large as the limit does
// not reserve it.
func TestReassemblerRoomFollowsTheBytes(t *testing.T) {
	h := nats.Header{HdrChunkStream: {"s"}, HdrChunkIndex: {"0"}, HdrChunkCount: {"2"},
		HdrChunkTotal: {strconv.FormatInt(DefaultChunkLimit, 10)}, HdrChunkSum: {"1"}}
	r := NewReassembler(0)
	if done, err := r.Add(h, []byte("0123456789")); done || err != nil {
		t.Fatalf("%v %v", done, err)
	}
	if cap(r.out) > gatherAhead*10 {
		t.Errorf("%d bytes of room for 10 bytes that came", cap(r.out))
	}

	// A transfer of a few chunks gets its room at its first: no copy as it grows.
	room := len(split(t, randomPayload(10_000, 10), 1000)[0].Data)
	msgs := split(t, randomPayload(gatherAhead*room, 10), 1000)
	if len(msgs) != gatherAhead {
		t.Fatalf("%d chunks", len(msgs))
	}
	r = NewReassembler(0)
	r.Add(msgs[0].Header, msgs[0].Data)
	first := &r.out[0]
	for _, m := range msgs[1:] {
		r.Add(m.Header, m.Data)
	}
	if got, err := r.Payload(); err != nil || &got[0] != first {
		t.Errorf("payload moved as it was gathered: %v", err)
	}
}

// A whole msgpack answer of the demo's trade table (2.47 MB) reassembled
// from its three chunks of the max payload, and from the Agg's: all of it
// (CPU), and the last chunk's Add alone, the time from the last chunk in
// to the payload at the caller.
func BenchmarkReassembleAnswer(b *testing.B) {
	payload := randomPayload(2_470_000, 12)
	msgs, err := SplitChunksBody("s", nats.Header{}, Body{payload}, 1<<20-RelayRoom)
	if err != nil {
		b.Fatal(err)
	}
	add := func(r *Reassembler, m *nats.Msg) {
		if _, err := r.Add(m.Header, m.Data); err != nil {
			b.Fatal(err)
		}
	}
	// The same answer in the Agg's chunks (defaults.AggAnswerChunk, headers
	// included), which a NATS server parses where it read them.
	small, err := SplitChunksBody("s", nats.Header{}, Body{payload}, defaults.AggAnswerChunk)
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		name string
		msgs []*nats.Msg
	}{{"whole", msgs}, {"whole, 62 KiB chunks", small}} {
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(len(payload)))
			for b.Loop() {
				r := NewReassembler(0)
				for _, m := range c.msgs {
					add(r, m)
				}
			}
		})
	}
	b.Run("last chunk", func(b *testing.B) {
		for b.Loop() {
			b.StopTimer()
			r := NewReassembler(0)
			for _, m := range msgs[:len(msgs)-1] {
				add(r, m)
			}
			b.StartTimer()
			add(r, msgs[len(msgs)-1])
		}
	})
}

// SendChunkedBody joins a chunk that spans pieces in a buffer of
// freeBuffers, given back once it is sent: published before it is given
// back (poisoned at once then), the receiver gets the body's bytes.
func TestSendChunkedBodyJoinsInAFreeBuffer(t *testing.T) {
	nc := natstest.Connect(t, natstest.Start(t))
	const subject = "sg.gw.gw-1.answer.req-2"
	sub, err := nc.SubscribeSync(subject)
	if err != nil {
		t.Fatal(err)
	}
	if err := sub.SetPendingLimits(-1, -1); err != nil {
		t.Fatal(err)
	}
	payload := randomPayload(1<<20, 11)
	// An envelope's head, then its payload: chunk 0 and two more span pieces.
	body := Body{payload[:100], payload[100 : 300<<10], payload[300<<10:]}
	const max = 128 << 10
	cut, err := cutChunks(nats.Header{}, body, max)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	send := func() {
		t.Helper()
		if n, err := SendChunkedBody(nc, subject, nats.Header{}, body, max); err != nil || n != cut.count {
			t.Fatalf("%d chunks, %v", n, err)
		}
		if got, _, err := ReceiveChunked(ctx, sub, 0); err != nil || !bytes.Equal(got, payload) {
			t.Fatalf("received %d bytes, %v", len(got), err)
		}
	}
	free := make([]byte, cut.room)
	ReleaseBuffer(free)
	send()
	// The last chunk that spanned pieces was joined in it.
	lo, hi := cut.span(300 << 10 / cut.room)
	if !bytes.Equal(free[:hi-lo], payload[lo:hi]) {
		t.Error("the joins were not in the free buffer")
	}

	was := PoisonReleased(true)
	t.Cleanup(func() { PoisonReleased(was) })
	send()
}

// The Agg's send of a whole msgpack answer of the demo's trade table (2.47
// MB: the envelope's head and its payload) in three chunks, to a subject
// nobody reads.
func BenchmarkSendChunkedAnswer(b *testing.B) {
	nc := natstest.Connect(b, natstest.Start(b))
	payload := randomPayload(2_470_000, 13)
	body := Body{payload[:120], payload[120:]}
	b.SetBytes(int64(len(payload)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := SendChunkedBody(nc, "sg.bench.answer", nats.Header{}, body, 1<<20-RelayRoom); err != nil {
			b.Fatal(err)
		}
	}
}

// Held counts what a transfer holds as it comes, in any order: never less
// than the bytes that came, at most the payload's room plus the chunks
// waiting for a gap; the payload's once done; nothing after a failure.
func TestReassemblerHeld(t *testing.T) {
	payload := randomPayload(50_000, 5)
	msgs := split(t, payload, 1000)
	order := rand.New(rand.NewPCG(6, 6)).Perm(len(msgs))
	r := NewReassembler(0)
	var came int64
	for _, i := range order {
		if _, err := r.Add(msgs[i].Header, msgs[i].Data); err != nil {
			t.Fatal(err)
		}
		came += int64(len(msgs[i].Data))
		if h := r.Held(); h < came || h > came+int64(gatherAhead)*came {
			t.Fatalf("held %d after %d bytes came", h, came)
		}
	}
	if got, _ := r.Payload(); r.Held() != int64(cap(got)) || r.Held() < int64(len(payload)) {
		t.Fatalf("held %d when done, payload %d (cap %d)", r.Held(), len(got), cap(got))
	}
	bad := NewReassembler(0)
	if _, err := bad.Add(msgs[1].Header, msgs[1].Data); err != nil || bad.Held() == 0 {
		t.Fatalf("held %d after a chunk after a gap (%v)", bad.Held(), err)
	}
	h := cloneHeader(msgs[0].Header)
	h.Set(HdrChunkTotal, "1")
	if _, err := bad.Add(h, msgs[0].Data); err == nil || bad.Held() != 0 {
		t.Fatalf("held %d after a failure (%v)", bad.Held(), err)
	}
}

// An empty chunk of a transfer of several is refused (a sender cuts bytes;
// empty ones would each cost an entry and count for nothing), and a chunk
// waiting for a gap counts its entry in Held, not its bytes alone.
func TestReassemblerEmptyChunksAndEntries(t *testing.T) {
	msgs := split(t, randomPayload(5000, 7), 1000)
	r := NewReassembler(0)
	if _, err := r.Add(msgs[1].Header, nil); !errors.Is(err, ErrChunk) {
		t.Fatalf("empty chunk: %v, want ErrChunk", err)
	}
	r = NewReassembler(0)
	if _, err := r.Add(msgs[2].Header, msgs[2].Data); err != nil {
		t.Fatal(err)
	}
	if got, want := r.Held(), int64(len(msgs[2].Data))+partCost; got != want {
		t.Fatalf("held %d for one chunk after a gap, want its bytes and its entry, %d", got, want)
	}
}
