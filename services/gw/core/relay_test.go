package core

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/sg-project/sg/messages"
	"github.com/sg-project/sg/subjects"
)

// arriveStreaming is arrive for a caller that reads streams (Sg-Accept-Stream).
func (s *story) arriveStreaming(id string, timeout int64) {
	sub := messages.RCSubmission{V: messages.RCVersion, GWID: "gw-1", Header: messages.RequestHeader{API: subjects.APIGetData},
		ReplyTo: subjects.Default().GWAnswer("gw-1", id), Content: messages.ContentMsgpack, Deadline: s.now + timeout, ReceivedAt: s.now, Stream: true}
	s.step(Arrived{At: s.now, Req: Request{ID: id, ClientID: "k", Caller: "_INBOX.a", Reply: "_INBOX.a." + id, API: subjects.APIGetData,
		Content: messages.ContentMsgpack, Sub: sub, Received: s.now, Deadline: s.now + timeout}})
}

// streamBegun arrives a streaming request and answers it with frame 0 of
// stream: the `answered` write landed and the Answer went out.
func (s *story) streamBegun(id, stream string) {
	s.t.Helper()
	s.arriveStreaming(id, 5000*ms)
	s.step(LogWritten{At: s.now, ID: id, Seq: 1})
	s.step(frame(id, stream, 0, false))
	s.step(LogWritten{At: s.now, ID: id, Seq: 2})
	only[Answer](s)
}

func frame(id, stream string, seq int, end bool) AnswerChunk {
	h := nats.Header{}
	h.Set(messages.HdrRequestID, id)
	messages.SetStreamFrame(h, stream, seq, end)
	return AnswerChunk{ID: id, Header: h, Data: fmt.Appendf(nil, "%s/%d", stream, seq)}
}

func relays(s *story) []string {
	var out []string
	for _, c := range s.out {
		if r, ok := c.(Relay); ok {
			out = append(out, string(r.Data)+fmt.Sprint(r.End))
		}
	}
	return out
}

// A streamed answer: frame 0 decides the answer; nothing reaches the caller
// before the `answered` write lands; frames that come meanwhile are held and
// go out right after frame 0, in order; the rest are relayed as they come; a
// second drive's stream is dropped.
func TestStreamAnsweredBeforeFirstFrame(t *testing.T) {
	s := newStory(t, "gw-1", 1)
	s.rc("rc-1", 1)
	s.arriveStreaming("r1", 5000*ms)
	only[WriteLog](s)
	s.step(LogWritten{At: s.now, ID: "r1", Seq: 1})
	s.step(frame("r1", "A", 0, false))
	if w := only[WriteLog](s); w.Entry.State != messages.LogAnswered {
		t.Fatalf("frame 0 wrote %s, want answered", describe(w))
	}
	none[Answer](s)
	s.step(frame("r1", "A", 1, false))
	s.step(frame("r1", "B", 0, false)) // another drive's
	none[Answer](s)
	none[Relay](s)
	s.step(LogWritten{At: s.now, ID: "r1", Seq: 2})
	if an := only[Answer](s); string(an.Data) != "A/0" {
		t.Fatalf("answer %s", describe(an))
	}
	if got := fmt.Sprint(relays(s)); got != "[A/1false]" {
		t.Fatalf("held frames relayed %s", got)
	}
	s.step(frame("r1", "B", 1, false))
	none[Relay](s)
	s.step(frame("r1", "A", 2, true))
	if got := fmt.Sprint(relays(s)); got != "[A/2true]" {
		t.Fatalf("relayed %s", got)
	}
	s.step(frame("r1", "A", 3, true)) // after the end: nothing
	none[Relay](s)
	if s.c.Relaying() != 0 || !s.c.Idle() {
		t.Fatalf("relaying %d, idle %t after the last frame", s.c.Relaying(), s.c.Idle())
	}
}

// A stream that loses frames, or whose Agg falls silent, ends with the GW's
// error frame: the caller never takes a prefix for the whole.
func TestStreamBrokenEndsWithError(t *testing.T) {
	s := newStory(t, "gw-1", 1)
	s.rc("rc-1", 1)
	s.streamBegun("r1", "A")
	s.step(frame("r1", "A", 2, false)) // frame 1 lost
	r := only[Relay](s)
	if r.Status.IsOK() || !r.End || r.Data != nil {
		t.Fatalf("gap relayed %+v, want the GW's error frame", r)
	}

	s.streamBegun("r2", "C")
	s.now += 5000*ms + margin
	s.step(Tick{At: s.now})
	if r := only[Relay](s); r.Status.IsOK() || !r.End || r.Header.Get(messages.HdrStreamSeq) != "1" {
		t.Fatalf("silent stream ended with %+v", r)
	}
	if s.c.Relaying() != 0 {
		t.Fatal("still relaying")
	}
}

// A relay's deadline is in NextDeadline: the shell steps the core then, and
// the stream ends at its deadline, not at the next periodic Tick (up to an
// announcement period later); a Tick just before it ends nothing.
func TestRelayExpiresAtItsDeadline(t *testing.T) {
	s := newStory(t, "gw-1", 1)
	s.rc("rc-1", 1)
	begun := s.now
	s.streamBegun("r1", "A")
	deadline := begun + 5000*ms + margin
	if at, ok := s.c.NextDeadline(); !ok || at != deadline {
		t.Fatalf("NextDeadline %d %t, want the relay's deadline %d", at-begun, ok, deadline-begun)
	}
	s.now = deadline - 1
	s.step(Tick{At: s.now})
	none[Relay](s)
	s.now = deadline
	s.step(Tick{At: s.now})
	if r := only[Relay](s); r.Status.IsOK() || !r.End {
		t.Fatalf("at its deadline the stream ended with %+v, want the GW's error frame", r)
	}
	if _, ok := s.c.NextDeadline(); ok || !s.c.Idle() {
		t.Fatalf("after the relay ended: NextDeadline %t, idle %t", ok, s.c.Idle())
	}

	// A relay that ends first leaves no deadline behind.
	s = newStory(t, "gw-1", 1)
	s.rc("rc-1", 1)
	s.streamBegun("r2", "B")
	s.step(frame("r2", "B", 1, true))
	if _, ok := s.c.NextDeadline(); ok {
		t.Fatal("a finished relay's deadline is still in NextDeadline")
	}
}

// A caller that does not read streams never gets a frame.
func TestStreamFrameForWholeCallerDropped(t *testing.T) {
	s := newStory(t, "gw-1", 1)
	s.rc("rc-1", 1)
	s.arrive("r1", 5000*ms)
	s.step(LogWritten{At: s.now, ID: "r1", Seq: 1})
	s.step(frame("r1", "A", 0, true))
	only[Dropped](s)
	none[WriteLog](s)
}

// A GW that stops while it relays a stream keeps relaying it through its
// grace (Stop: not idle), and at the end of the grace (Abort) ends it with
// its own error frame: the caller is told, never left waiting for frames.
func TestStreamEndsWithErrorWhenTheGatewayStops(t *testing.T) {
	s := newStory(t, "gw-1", 1)
	s.rc("rc-1", 1)
	s.streamBegun("r1", "A")
	s.step(Stop{At: s.now})
	if s.c.Idle() {
		t.Fatal("idle while a stream is being relayed")
	}
	s.step(frame("r1", "A", 1, false))
	if got := fmt.Sprint(relays(s)); got != "[A/1false]" {
		t.Fatalf("relayed %s while stopping", got)
	}
	s.step(Abort{At: s.now})
	r := only[Relay](s)
	if r.Status.IsOK() || !r.End || r.Data != nil || r.Header.Get(messages.HdrStreamSeq) != "2" || !strings.Contains(r.Status.AI, "stopping") {
		t.Fatalf("aborted stream ended with %+v", r)
	}
	if !s.c.Idle() || s.c.Relaying() != 0 {
		t.Fatalf("idle %t, relaying %d after the abort", s.c.Idle(), s.c.Relaying())
	}
}

// The deadline passes while a stream is being relayed: the Agg ends its
// stream with a TIMEOUT frame and the RC answers TIMEOUT itself. The caller
// gets exactly one answer: the stream, ended by the Agg's frame; the RC's
// whole answer, coming after the stream began, is dropped.
func TestRCTimeoutDuringStreamIsNotASecondAnswer(t *testing.T) {
	s := newStory(t, "gw-1", 1)
	s.rc("rc-1", 1)
	s.streamBegun("r1", "A")

	h := nats.Header{}
	h.Set(messages.HdrRequestID, "r1")
	messages.Status{RC: messages.CodeTimeout, AC: messages.CodeTimeout, AI: "Request timed out"}.Write(h)
	s.step(AnswerChunk{ID: "r1", Header: h})
	none[Answer](s)
	none[Relay](s)
	if d := only[Dropped](s); !strings.Contains(d.Why, "already answered") {
		t.Fatalf("the RC's answer: %s, want it dropped as already answered", describe(d))
	}
	s.step(frame("r1", "A", 1, true)) // the Agg's TIMEOUT frame ends the stream
	if got := fmt.Sprint(relays(s)); got != "[A/1true]" {
		t.Fatalf("relayed %s", got)
	}
	none[Answer](s)
	if s.c.Relaying() != 0 || !s.c.Idle() {
		t.Fatalf("relaying %d, idle %t after the last frame", s.c.Relaying(), s.c.Idle())
	}
}

// chunkStory is a story with request r1 logged, its caller reassembling
// chunks or not, and an Agg's chunked answer to it naming answerID.
func chunkStory(t *testing.T, chunks bool, answerID string) (*story, []AnswerChunk, []byte) {
	s := newStory(t, "gw-1", 1)
	s.c.cfg.MaxPayload = 8 << 10
	s.rc("rc-1", 1)
	s.arrive("r1", 5000*ms)
	s.c.reqs["r1"].Chunks = chunks
	s.step(LogWritten{At: s.now, ID: "r1", Seq: 1})
	c, body := chunkedAnswer(t, "r1", answerID, 8<<10-messages.RelayRoom)
	return s, c, body
}

// chunkedAnswer is an Agg's answer naming request id answerID, in chunks of
// at most max bytes, and its body.
func chunkedAnswer(t *testing.T, id, answerID string, max int) ([]AnswerChunk, []byte) {
	t.Helper()
	return chunkedAnswerOf(t, id, answerID, max, 50_000)
}

// chunkedAnswerOf is chunkedAnswer with a payload of n bytes.
func chunkedAnswerOf(t *testing.T, id, answerID string, max, n int) ([]AnswerChunk, []byte) {
	t.Helper()
	payload := make([]byte, n)
	for i := range payload {
		payload[i] = byte(i * 7)
	}
	payload, _ = messages.EncodeSized(payload, 0) // a msgpack bin: a valid payload
	body, err := messages.Response{Header: messages.ResponseHeader{RequestID: answerID, API: subjects.APIGetData},
		Payload: payload, Content: messages.ContentMsgpack}.Encode()
	if err != nil {
		t.Fatal(err)
	}
	h := nats.Header{}
	messages.Routing{RequestID: id + "~0", API: subjects.APIGetData}.Write(h)
	messages.StatusOK.Write(h)
	msgs, err := messages.SplitChunksBody("x", h, messages.Body{body}, max)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]AnswerChunk, len(msgs))
	for i, m := range msgs {
		out[i] = AnswerChunk{ID: id, Header: m.Header, Data: m.Data}
	}
	return out, body
}

// reassemble is what the caller makes of what the GW sent it.
func reassemble(msgs [][2]any) ([]byte, error) {
	r := messages.NewReassembler(0)
	for _, m := range msgs {
		if done, err := r.Add(m[0].(nats.Header), m[1].([]byte)); err != nil || done {
			if err != nil {
				return nil, err
			}
			return r.Payload()
		}
	}
	return nil, fmt.Errorf("incomplete")
}

// sent collects what the last step sent the caller (Answer, Relay).
func sent(s *story, to *[][2]any) {
	for _, c := range s.out {
		switch c := c.(type) {
		case Answer:
			*to = append(*to, [2]any{c.Header, c.Data})
		case Relay:
			h := c.Header
			if !c.Status.IsOK() {
				h = nats.Header{messages.HdrChunkStream: c.Header[messages.HdrChunkStream]}
				c.Status.Write(h)
			}
			*to = append(*to, [2]any{h, c.Data})
		}
	}
}

// A chunked answer that names the caller's id goes out chunk by chunk as it
// comes: chunk 0 decides it and waits for `answered`, the chunks that come
// meanwhile follow it, then each as it comes; a second answer's chunks and
// repeats are dropped; the caller reassembles the very body.
func TestChunkedAnswerRelayedAsItComes(t *testing.T) {
	s, chunks, body := chunkStory(t, true, "k")
	other, _ := chunkedAnswer(t, "r1", "k", 8<<10-messages.RelayRoom)
	s.step(chunks[0])
	if w := only[WriteLog](s); w.Entry.State != messages.LogAnswered {
		t.Fatalf("chunk 0 wrote %s, want answered", describe(w))
	}
	s.step(chunks[1])
	s.step(other[0])
	none[Relay](s)
	var got [][2]any
	s.step(LogWritten{At: s.now, ID: "r1", Seq: 2})
	if an := only[Answer](s); !an.Chunk || !an.Forward {
		t.Fatalf("answer %s, want chunk 0 forwarded as it is", describe(an))
	}
	sent(s, &got)
	if len(got) != 2 {
		t.Fatalf("%d messages after `answered`, want chunk 0 and the held chunk 1", len(got))
	}
	s.step(chunks[1]) // a repeat
	only[Dropped](s)
	s.step(other[1])
	only[Dropped](s)
	s.step(frame("r1", chunks[0].Header.Get(messages.HdrChunkStream), 2, false)) // a stream frame naming the transfer
	only[Dropped](s)
	for i, c := range chunks[2:] {
		s.step(c)
		r := only[Relay](s)
		if r.End != (i == len(chunks)-3) {
			t.Fatalf("chunk %d: end %t", i+2, r.End)
		}
		sent(s, &got)
	}
	if out, err := reassemble(got); err != nil || !bytes.Equal(out, body) {
		t.Fatalf("caller reassembled %d bytes, %v", len(out), err)
	}
	if !s.c.Idle() {
		t.Fatal("not idle after the last chunk")
	}
}

// A chunked answer that does not check out never completes at the caller:
// a forged or corrupt chunk (the checksum fails: the last chunk is held back)
// or a lost one ends it with the GW's end message; so does the deadline.
func TestChunkedAnswerBrokenNeverCompletes(t *testing.T) {
	for _, tc := range []struct {
		name  string
		spoil func(c []AnswerChunk) []AnswerChunk
	}{
		{"corrupt", func(c []AnswerChunk) []AnswerChunk {
			d := bytes.Clone(c[2].Data)
			d[10] ^= 1
			c[2].Data = d
			return c
		}},
		{"lost", func(c []AnswerChunk) []AnswerChunk { return append(c[:2:2], c[3:]...) }},
		{"silent", func(c []AnswerChunk) []AnswerChunk { return c[:len(c)-1] }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, chunks, _ := chunkStory(t, true, "k")
			chunks = tc.spoil(chunks)
			var got [][2]any
			s.step(chunks[0])
			s.step(LogWritten{At: s.now, ID: "r1", Seq: 2})
			sent(s, &got)
			for _, c := range chunks[1:] {
				s.step(c)
				sent(s, &got)
			}
			s.now += 5000*ms + margin
			s.step(Tick{At: s.now})
			sent(s, &got)
			last := got[len(got)-1][0].(nats.Header)
			if !messages.IsChunkEnd(last) {
				t.Fatalf("last message %v, want the GW's end of the transfer", last)
			}
			if out, err := reassemble(got); err == nil {
				t.Fatalf("caller reassembled %d bytes from a broken transfer", len(out))
			}
			if !s.c.Idle() {
				t.Fatal("not idle")
			}
		})
	}
}

// Reassembled first, as before: an answer that names another id (an older
// Agg's, the drive's), and any answer to a caller that does not reassemble
// chunks.
func TestChunkedAnswerReassembledWhenNotRelayable(t *testing.T) {
	for _, tc := range []struct {
		name     string
		answerID string
		chunks   bool
	}{{"drive id", "r1~0", true}, {"whole caller", "k", false}} {
		t.Run(tc.name, func(t *testing.T) {
			s, chunks, body := chunkStory(t, tc.chunks, tc.answerID)
			for _, c := range chunks[:len(chunks)-1] {
				s.step(c)
				none[WriteLog](s)
			}
			s.step(chunks[len(chunks)-1])
			only[WriteLog](s)
			s.step(LogWritten{At: s.now, ID: "r1", Seq: 2})
			if an := only[Answer](s); an.Chunk || !bytes.Equal(an.Data, body) {
				t.Fatalf("answer chunk=%t with %d bytes, want the whole %d", an.Chunk, len(an.Data), len(body))
			}
			none[Relay](s)
		})
	}
}

// The chunks held while `answered` is written are bounded in number, not
// only in bytes (a transfer of tiny chunks): past maxHeldChunks the answer
// is ended with a chunk end once it goes out, and never completes.
func TestChunkedAnswerHeldChunksBounded(t *testing.T) {
	s, _, _ := chunkStory(t, true, "k")
	h := nats.Header{}
	messages.Routing{RequestID: "r1~0", API: subjects.APIGetData}.Write(h)
	messages.StatusOK.Write(h)
	// The smallest message size SplitChunksBody accepts leaves one byte a chunk;
	// 100 more make chunk 0 hold the envelope's header (it names the
	// caller's id: relayable), and 150 bytes a held chunk more than
	// maxHeldChunks.
	size := 64
	for ; ; size++ {
		if _, err := messages.SplitChunksBody("x", h, messages.Body{[]byte("xx")}, size); err == nil {
			break
		}
	}
	chunks, _ := chunkedAnswerOf(t, "r1", "k", size+100, 150*maxHeldChunks)
	if len(chunks) <= maxHeldChunks+1 {
		t.Fatalf("%d chunks, want more than %d", len(chunks), maxHeldChunks+1)
	}
	var got [][2]any
	for _, c := range chunks { // all before `answered` is written: held
		s.step(c)
	}
	s.step(LogWritten{At: s.now, ID: "r1", Seq: 2})
	sent(s, &got)
	if n := len(got); n > maxHeldChunks+2 {
		t.Fatalf("%d messages sent, want at most %d held chunks, chunk 0 and an end", n, maxHeldChunks)
	}
	if last := got[len(got)-1][0].(nats.Header); !messages.IsChunkEnd(last) {
		t.Fatalf("last message %v, want the GW's end of the transfer", last)
	}
	if out, err := reassemble(got); err == nil {
		t.Fatalf("caller reassembled %d bytes from a transfer past the bound", len(out))
	}
}

// A chunked answer whose `answered` write is acknowledged after Abort goes
// out with chunk 0 and ends at once with a chunk end: the GW stops before it
// could pass on the rest (Abort ended the relays it had; this one began after).
func TestChunkedAnswerBegunAfterAbortEnds(t *testing.T) {
	s, chunks, _ := chunkStory(t, true, "k")
	s.step(chunks[0])
	s.step(Abort{At: s.now})
	s.step(LogWritten{At: s.now, ID: "r1", Seq: 2})
	var got [][2]any
	sent(s, &got)
	if len(got) == 0 {
		t.Fatal("nothing sent")
	}
	if last := got[len(got)-1][0].(nats.Header); len(got) > 1 && !messages.IsChunkEnd(last) {
		t.Fatalf("last of %d messages %v, want the GW's end of the transfer", len(got), last)
	}
	if s.c.Relaying() != 0 {
		t.Fatalf("relaying %d after the abort", s.c.Relaying())
	}
}

// A message of an answer passed on as it comes that the shell could not
// publish (RelayFailed) ends the transfer: the relay under way with its
// end, or, when the one that failed was the last, an end built from its
// place in the transfer; the caller is told at once, never left to its
// timeout, and later chunks are dropped. Answer.Relayed marks the first.
func TestRelayFailedEndsTheTransfer(t *testing.T) {
	chunkEnd := func(t *testing.T, s *story) Relay {
		t.Helper()
		r := only[Relay](s)
		var got [][2]any
		sent(s, &got)
		if !r.End || !messages.IsChunkEnd(got[0][0].(nats.Header)) {
			t.Fatalf("after a failed publish %+v, want the GW's chunk end", r)
		}
		if s.c.Relaying() != 0 || !s.c.Idle() {
			t.Fatalf("relaying %d after the transfer was ended", s.c.Relaying())
		}
		return r
	}
	t.Run("chunk under way", func(t *testing.T) {
		s, chunks, _ := chunkStory(t, true, "k")
		s.step(chunks[0])
		s.step(LogWritten{At: s.now, ID: "r1", Seq: 2})
		an := only[Answer](s)
		if !an.Relayed {
			t.Fatal("chunk 0 of a relayed answer: Answer.Relayed false")
		}
		s.step(chunks[1])
		r := only[Relay](s)
		s.step(RelayFailed{At: s.now, Info: r.Info, Header: r.Header, Err: errors.New("nats: connection closed")})
		// The caller got chunk 0 only: chunk 1 was the one that failed.
		if end := chunkEnd(t, s); !strings.Contains(end.Status.AI, "after 1 of ") || !strings.Contains(end.Status.AI, "connection closed") {
			t.Fatalf("chunk end says %q", end.Status.AI)
		}
		s.step(chunks[2])
		none[Relay](s)
	})
	t.Run("chunk 0", func(t *testing.T) {
		s, chunks, _ := chunkStory(t, true, "k")
		s.step(chunks[0])
		s.step(LogWritten{At: s.now, ID: "r1", Seq: 2})
		an := only[Answer](s)
		s.step(RelayFailed{At: s.now, Info: an.Info, Header: an.Header, Err: errors.New("nats: maximum payload exceeded")})
		if end := chunkEnd(t, s); !strings.Contains(end.Status.AI, "after 0 of ") {
			t.Fatalf("chunk end says %q", end.Status.AI)
		}
	})
	t.Run("last chunk", func(t *testing.T) {
		s, chunks, _ := chunkStory(t, true, "k")
		s.step(chunks[0])
		s.step(LogWritten{At: s.now, ID: "r1", Seq: 2})
		var last Relay
		for _, c := range chunks[1:] {
			s.step(c)
			last = only[Relay](s)
		}
		if !last.End || s.c.Relaying() != 0 {
			t.Fatal("the last chunk did not end the relay")
		}
		s.step(RelayFailed{At: s.now, Info: last.Info, Header: last.Header, Err: errors.New("nats: connection closed")})
		if end := chunkEnd(t, s); end.Header.Get(messages.HdrChunkStream) != chunks[0].Header.Get(messages.HdrChunkStream) {
			t.Fatalf("chunk end of transfer %q", end.Header.Get(messages.HdrChunkStream))
		}
	})
	t.Run("answered instead", func(t *testing.T) {
		s, chunks, _ := chunkStory(t, true, "k")
		s.step(chunks[0])
		s.step(LogWritten{At: s.now, ID: "r1", Seq: 2})
		an := only[Answer](s)
		s.step(RelayFailed{At: s.now, Info: an.Info, Header: an.Header, Answered: true})
		none[Relay](s)
		only[Dropped](s)
		if !s.c.Idle() {
			t.Fatal("still relaying to a caller answered otherwise")
		}
	})
	t.Run("stream frame", func(t *testing.T) {
		s := newStory(t, "gw-1", 1)
		s.rc("rc-1", 1)
		s.streamBegun("r1", "A")
		s.step(frame("r1", "A", 1, false))
		r := only[Relay](s)
		s.step(RelayFailed{At: s.now, Info: r.Info, Header: r.Header, Err: errors.New("nats: connection closed")})
		end := only[Relay](s)
		// In the failed frame's place: the caller got frame 0 and reads
		// the error frame next, not a gap.
		if f, err := messages.ReadStreamFrame(end.Header); err != nil || !f.End || f.Seq != 1 || end.Status.IsOK() {
			t.Fatalf("after a failed frame %+v (%v), want the GW's error frame 1", end, err)
		}
		s.step(frame("r1", "A", 2, true))
		none[Relay](s)
		// The error frame that failed in turn is not sent again.
		s.step(RelayFailed{At: s.now, Info: end.Info, Header: withStatus(end), Err: errors.New("nats: connection closed")})
		none[Relay](s)
	})
	t.Run("whole answers are not relayed", func(t *testing.T) {
		s := newStory(t, "gw-1", 1)
		s.rc("rc-1", 1)
		s.arriveStreaming("r1", 5000*ms)
		s.step(LogWritten{At: s.now, ID: "r1", Seq: 1})
		s.step(frame("r1", "A", 0, true)) // a stream of one frame is whole
		s.step(LogWritten{At: s.now, ID: "r1", Seq: 2})
		if an := only[Answer](s); an.Relayed {
			t.Fatal("a stream of one frame: Answer.Relayed true")
		}
	})
}

// withStatus is a Relay's header as the shell publishes it.
func withStatus(r Relay) nats.Header {
	h := nats.Header{}
	for k, v := range r.Header {
		h[k] = v
	}
	r.Status.Write(h)
	return h
}

// An adopted request keeps its caller's Sg-Accept-Chunks (the log entry
// records it): the adopter passes its chunked answer on chunk by chunk, as
// the owner would have, rather than answer TOO_LARGE or the object store.
func TestAdoptedRequestKeepsChunks(t *testing.T) {
	owner := newStory(t, "gw-1", 1)
	owner.rc("rc-1", 1)
	req := Request{ID: "r1", ClientID: "k", Caller: "_INBOX.a", Reply: "_INBOX.a.r1", API: subjects.APIGetData,
		Content: messages.ContentMsgpack, Chunks: true, Received: owner.now, Deadline: owner.now + 5000*ms,
		Sub: messages.RCSubmission{V: messages.RCVersion, GWID: "gw-1", Header: messages.RequestHeader{API: subjects.APIGetData},
			ReplyTo: subjects.Default().GWAnswer("gw-1", "r1"), Content: messages.ContentMsgpack, Deadline: owner.now + 5000*ms, ReceivedAt: owner.now}}
	owner.step(Arrived{At: owner.now, Req: req})
	entry := only[WriteLog](owner).Entry
	if !entry.Chunks {
		t.Fatal("the log entry does not record that the caller reassembles chunks")
	}
	// The wire stays compatible: an older GW decodes the entry (its decoder
	// skips the field), and an entry without Chunks is an older GW's entry,
	// byte for byte (the field is omitted), which decodes as false.
	b, err := messages.Encode(&entry)
	if err != nil {
		t.Fatal(err)
	}
	var older struct {
		V         uint8  `msgpack:"v"`
		RequestID string `msgpack:"req"`
		Drive     uint32 `msgpack:"drive"`
	}
	if err := messages.Decode(b, &older); err != nil || older.RequestID != "r1" {
		t.Fatalf("an older GW reads the entry as %+v, %v", older, err)
	}
	plain := entry
	plain.Chunks = false
	if b, err = messages.Encode(&plain); err != nil || bytes.Contains(b, []byte("chunks")) {
		t.Fatalf("an entry without Chunks names the field (%v): older GWs' entries would differ", err)
	}
	if e, err := messages.DecodeValid[messages.LogEntry](b); err != nil || e.Chunks {
		t.Fatalf("an older GW's entry decodes as Chunks %t, %v", e.Chunks, err)
	}

	peer := newStory(t, "gw-2", 2)
	peer.c.cfg.MaxPayload = 8 << 10
	peer.rc("rc-1", 1)
	peer.step(Adopt{At: peer.now, Subject: subjects.Default().RequestLogEntry("gw-1", "r1"), Seq: 1, Entry: entry})
	if w := only[WriteLog](peer); !w.Entry.Chunks {
		t.Fatal("the adopter's entry dropped Chunks")
	}
	peer.step(LogWritten{At: peer.now, ID: "r1", Seq: 2})
	if a := only[Adopted](peer); !a.Info.Chunks {
		t.Fatal("adopted without Chunks")
	}
	chunks, body := chunkedAnswer(t, "r1", "k", 8<<10-messages.RelayRoom)
	peer.step(chunks[0])
	only[WriteLog](peer)
	var got [][2]any
	peer.step(LogWritten{At: peer.now, ID: "r1", Seq: 3})
	if an := only[Answer](peer); !an.Chunk || !an.Relayed {
		t.Fatalf("adopter answered %s, want chunk 0 passed on", describe(an))
	}
	sent(peer, &got)
	for _, c := range chunks[1:] {
		peer.step(c)
		sent(peer, &got)
	}
	if out, err := reassemble(got); err != nil || !bytes.Equal(out, body) {
		t.Fatalf("caller reassembled %d bytes, %v", len(out), err)
	}
}

// A relay that ends before its deadline leaves its entry in relayTimers; once
// ended ones outnumber those under way they are dropped, so that behind one
// long relay the heap does not keep every relay that ended meanwhile
// (relays/s x (timeout + margin) of them). The long relay still ends at its
// deadline.
func TestRelayTimersOfEndedRelaysAreDropped(t *testing.T) {
	s := newStory(t, "gw-1", 1)
	s.rc("rc-1", 1)
	begun := s.now
	s.streamBegun("r0", "A")
	const n = 2000
	most := 0
	for i := range n {
		s.now += ms
		id := fmt.Sprint("r", i+1)
		s.streamBegun(id, "B")
		s.step(frame(id, "B", 1, true))
		most = max(most, len(s.c.relayTimers))
	}
	if s.c.Relaying() != 1 || most > 2*1+64+1 {
		t.Fatalf("after %d relays ended behind one under way: %d relaying, relayTimers held up to %d", n, s.c.Relaying(), most)
	}
	deadline := begun + 5000*ms + margin
	if at, ok := s.c.NextDeadline(); !ok || at != deadline {
		t.Fatalf("NextDeadline %d %t, want r0's deadline %d", at-begun, ok, deadline-begun)
	}
	s.now = deadline
	s.step(Tick{At: s.now})
	if r := only[Relay](s); r.Info.ID != "r0" || r.Status.IsOK() || !r.End {
		t.Fatalf("at its deadline r0 ended with %+v, want the GW's error frame", r)
	}
}

// A relay's entry in relayTimers names its relay by seq, not only by id: r1's
// relay ends early, r1 is relayed again (the same id, a later deadline), and
// the first relay's deadline ends nothing; the second ends at its own.
func TestRelayDeadlineOfAnEarlierRelayOfTheSameIDEndsNothing(t *testing.T) {
	s := newStory(t, "gw-1", 1)
	s.rc("rc-1", 1)
	first := s.now + 5000*ms + margin
	s.streamBegun("r1", "A")
	s.step(frame("r1", "A", 1, true))
	if s.c.Relaying() != 0 {
		t.Fatal("r1's first relay did not end with its last frame")
	}
	s.now += 1000 * ms
	second := s.now + 5000*ms + margin
	s.streamBegun("r1", "B")
	s.now = first
	s.step(Tick{At: s.now})
	none[Relay](s)
	if s.c.Relaying() != 1 {
		t.Fatal("the first relay's deadline ended r1's second relay")
	}
	if at, ok := s.c.NextDeadline(); !ok || at != second {
		t.Fatalf("NextDeadline %d %t, want the second relay's deadline %d", at-first, ok, second-first)
	}
	s.now = second
	s.step(Tick{At: s.now})
	if r := only[Relay](s); r.Info.ID != "r1" || r.Status.IsOK() || !r.End {
		t.Fatalf("at its deadline the second relay ended with %+v, want the GW's error frame", r)
	}
}

// A request id whose answer is still being relayed is not taken up again
// while the relay lasts: an Adopt of it (a log read from before this GW's
// `answered` write landed) is ignored, and an arrival of it (a shell bug:
// its ids are unique) is refused; either one held would have its frames
// taken by the relay and, once answered, replaced the relay in c.relays,
// leaving the first caller's stream without an end. The relay goes on.
func TestRequestIDBeingRelayedIsNotHeldAgain(t *testing.T) {
	s := newStory(t, "gw-1", 1)
	s.rc("rc-1", 1)
	s.streamBegun("r1", "A")
	entry := messages.LogEntry{RequestID: "r1", ClientRequestID: "k", GWID: "gw-9", State: messages.LogOpen, Drive: 1,
		Caller: "_INBOX.b", ClientReply: "_INBOX.b.r1", API: subjects.APIGetData, Content: messages.ContentMsgpack,
		Submission: messages.RCSubmission{V: messages.RCVersion, GWID: "gw-9", Header: messages.RequestHeader{API: subjects.APIGetData},
			Content: messages.ContentMsgpack, Deadline: s.now + 5000*ms, ReceivedAt: s.now, Stream: true}}
	s.step(Adopt{At: s.now, Subject: subjects.Default().RequestLogEntry("gw-9", "r1"), Seq: 7, Entry: entry})
	none[WriteLog](s)
	if d := only[Dropped](s); d.ID != "r1" || !strings.Contains(d.Why, "relaying") {
		t.Fatalf("the ignored adoption of r1 was reported %+v, want Dropped of r1 as being relayed", d)
	}
	if s.c.Holds("r1") {
		t.Fatal("adopted r1 while its answer is being relayed")
	}
	s.arriveStreaming("r1", 5000*ms)
	if a := only[Answer](s); a.Status.IsOK() || a.Info.ID != "r1" {
		t.Fatalf("a second arrival of r1 while its answer is relayed was answered %s, want refused", describe(a))
	}
	none[WriteLog](s)
	if s.c.Holds("r1") {
		t.Fatal("held a second r1 while its answer is being relayed")
	}
	s.step(frame("r1", "A", 1, true))
	if got := fmt.Sprint(relays(s)); got != "[A/1true]" {
		t.Fatalf("the relay under way relayed %s", got)
	}
	if !s.c.Idle() {
		t.Fatal("not idle after the relay's last frame")
	}
}

// badFrame is a frame on id's answer subject whose stream headers do not
// read: a sequence number that is not one, or (seq >= 0) no stream id.
func badFrame(id, stream string, seq int) AnswerChunk {
	h := nats.Header{}
	h.Set(messages.HdrRequestID, id)
	if seq < 0 {
		h.Set(messages.HdrStreamID, stream)
		h.Set(messages.HdrStreamSeq, "x")
	} else {
		h.Set(messages.HdrStreamSeq, itoa(seq))
	}
	return AnswerChunk{ID: id, Header: h, Data: []byte("?")}
}

// A frame that does not read ends its stream with the GW's error frame at
// once, naming it, and is reported (Malformed): the caller neither waits for
// the next frame's gap or the deadline, nor takes a prefix for the whole.
// So at every point of the stream: relayed, frame 0 held while `answered`
// is written, and before frame 0 (then it is the answer: an error). A
// frame of another stream, or for a request not held here, is reported and
// ends nothing.
func TestUnreadableFrameEndsTheAnswerAtOnce(t *testing.T) {
	s := newStory(t, "gw-1", 1)
	s.rc("rc-1", 1)
	isEnd := func(what string, r Relay) {
		t.Helper()
		if r.Status.IsOK() || !r.End || r.Data != nil || !strings.Contains(r.Status.AI, "does not read") {
			t.Fatalf("%s: relayed %+v, want the GW's error frame naming the unreadable frame", what, r)
		}
	}
	reported := func(what string, ends bool) {
		t.Helper()
		if m := only[Malformed](s); m.Kind != MalformedStreamFrame || m.Err == nil || m.Ends != ends {
			t.Fatalf("%s: reported %+v, want a stream frame that ends the answer: %t", what, m, ends)
		}
	}

	// Relayed: a bad sequence number.
	for i, bad := range []AnswerChunk{badFrame("r1", "A", -1)} {
		id := bad.ID
		s.streamBegun(id, "A")
		s.step(frame(id, "A", 1, false))
		relays(s)
		s.step(badFrame(id, "B", -1)) // another stream's: nothing ends
		reported("another stream's", false)
		none[Relay](s)
		s.step(badFrame(id, "", 1)) // no stream named: not the Agg's, nothing ends
		reported("no stream named", false)
		none[Relay](s)
		s.step(bad)
		isEnd(fmt.Sprint("relayed ", i), only[Relay](s))
		reported("relayed", true)
		if s.c.Relaying() != 0 {
			t.Fatalf("relayed %d: still relaying", i)
		}
		s.step(frame(id, "A", 2, true)) // the rest: nothing more
		none[Relay](s)
	}

	// Frame 0 held while `answered` is written: the error end follows it.
	s.arriveStreaming("r3", 5000*ms)
	s.step(LogWritten{At: s.now, ID: "r3", Seq: 1})
	s.step(frame("r3", "A", 0, false))
	s.step(badFrame("r3", "A", -1))
	reported("held", true)
	none[Relay](s)
	s.step(LogWritten{At: s.now, ID: "r3", Seq: 2})
	only[Answer](s)
	isEnd("held", only[Relay](s))
	if s.c.Relaying() != 0 {
		t.Fatal("held: still relaying")
	}

	// Before frame 0: the answer is the GW's error, and its Agg, which may
	// wait for the signal, gets its StartStream with it.
	s.arriveStreaming("r4", 5000*ms)
	s.step(LogWritten{At: s.now, ID: "r4", Seq: 1})
	s.step(badFrame("r4", "", 0)) // no stream named: not the Agg's, nothing ends
	reported("before frame 0, no stream named", false)
	none[WriteLog](s)
	none[StartStream](s)
	bad := badFrame("r4", "A", -1)
	bad.Header.Set(messages.HdrAggID, "agg-1")
	s.step(bad)
	reported("before frame 0", true)
	if w := only[WriteLog](s); w.Entry.State != messages.LogAnswered {
		t.Fatalf("before frame 0: wrote %s, want answered", describe(w))
	}
	s.step(frame("r4", "A", 1, false)) // the rest meanwhile: nothing
	if len(s.out) != 0 {
		t.Fatalf("before frame 0, the next frame: %s", describeAll(s.out))
	}
	s.step(LogWritten{At: s.now, ID: "r4", Seq: 2})
	if an := only[Answer](s); an.Forward || an.Status.IsOK() || !strings.Contains(an.Status.AI, "does not read") {
		t.Fatalf("before frame 0: answered %s, want the GW's error naming the unreadable frame", describe(an))
	}
	if st := only[StartStream](s); st.AggID != "agg-1" || st.DriveID != "r4" || st.StreamID != "A" {
		t.Fatalf("before frame 0: %+v, want the signal to the frame's Agg", st)
	}
	none[Relay](s)

	// For a request not held here: reported, nothing else.
	s.step(badFrame("nobody", "A", -1))
	reported("not held", false)
	if len(s.out) != 1 {
		t.Fatalf("not held: %s", describeAll(s.out))
	}
}

// The chunks held for reassembly are bounded for all requests together
// (MaxHeldBytes): the chunk that would pass the bound ends its answer
// RATE_LIMITED at once, its bytes let go, while the answers within
// the bound complete; every byte is let go when an answer completes or its
// request ends (here, at its deadline), so the GW holds nothing after.
func TestHeldBoundedAcrossRequests(t *testing.T) {
	s := newStory(t, "gw-1", 1)
	s.c.cfg.MaxPayload = 8 << 10
	s.c.cfg.MaxHeldBytes = 60_000
	s.rc("rc-1", 1)
	var answers [3][]AnswerChunk
	var bodies [3][]byte
	for i, id := range []string{"r1", "r2", "r3"} {
		s.arrive(id, 5000*ms)
		s.c.reqs[id].Chunks = false // a caller that does not reassemble: the GW does
		s.step(LogWritten{At: s.now, ID: id, Seq: uint64(i + 1)})
		answers[i], bodies[i] = chunkedAnswerOf(t, id, "k", 8<<10-messages.RelayRoom, 30_000)
	}
	held := func() int64 {
		var sum int64
		for _, r := range s.c.reqs {
			sum += r.streamBytes
		}
		if sum != s.c.heldBytes {
			t.Fatalf("the requests hold %d bytes, the core counts %d", sum, s.c.heldBytes)
		}
		return sum
	}
	// r1 and r2 in part: within the bound.
	for _, c := range answers[0][:len(answers[0])-1] {
		s.step(c)
	}
	for _, c := range answers[1][:2] {
		s.step(c)
	}
	before := held()
	if before == 0 || before > 60_000 {
		t.Fatalf("held %d bytes, want some within the bound", before)
	}
	// r3 until its chunk would pass the bound: r3 ends at once, its bytes
	// let go, r1's and r2's kept.
	ended := false
	for _, c := range answers[2] {
		s.step(c)
		for _, cmd := range s.out {
			if w, ok := cmd.(WriteLog); ok && w.Entry.RequestID == "r3" {
				ended = true
			}
		}
		if ended {
			break
		}
	}
	if !ended {
		t.Fatal("r3's chunks passed the bound and its answer did not end")
	}
	if s.c.heldBytes != before {
		t.Fatalf("after r3 ended the core holds %d bytes, want r1's and r2's %d", s.c.heldBytes, before)
	}
	s.step(LogWritten{At: s.now, ID: "r3", Seq: 4})
	if an := only[Answer](s); !heldFullAnswer(an, messages.HdrAcceptChunks) {
		t.Fatalf("r3 answered %s, want RATE_LIMITED over %s naming chunks", describe(an), LimitHeldBytes)
	}
	if s.c.Stats().HeldFull != 1 {
		t.Fatalf("HeldFull %d, want 1", s.c.Stats().HeldFull)
	}
	// r1 completes within the bound, whole; its bytes are let go.
	s.step(answers[0][len(answers[0])-1])
	s.step(LogWritten{At: s.now, ID: "r1", Seq: 5})
	if an := only[Answer](s); an.Err != nil || !bytes.Equal(an.Data, bodies[0]) {
		t.Fatalf("r1 answered %s, want its whole body", describe(an))
	}
	if got := held(); got >= before {
		t.Fatalf("after r1 completed the core holds %d bytes, want less than %d", got, before)
	}
	// r2 never completes: its deadline lets its bytes go.
	s.now += 5000*ms + margin
	s.step(Tick{At: s.now})
	for _, cmd := range s.out {
		if w, ok := cmd.(WriteLog); ok {
			s.step(LogWritten{At: s.now, ID: w.Entry.RequestID, Seq: 6})
		}
	}
	if s.c.heldBytes != 0 {
		t.Fatalf("the core holds %d bytes after every request ended", s.c.heldBytes)
	}
}

// What waits for `answered` counts against MaxHeldBytes too: a frame held
// past the bound breaks its stream (the caller gets frame 0, the held ones
// and the GW's error frame, never a cut answer taken for whole), a frame 0
// past it is answered RATE_LIMITED with the Agg's start signal, and every
// byte is let go once the requests end.
func TestHeldWhileAnsweredIsWrittenBounded(t *testing.T) {
	s := newStory(t, "gw-1", 1)
	s.c.cfg.MaxHeldBytes = 8 // "A/0" and "A/1" (3 bytes each) fit, "A/2" does not
	s.rc("rc-1", 1)
	s.arriveStreaming("r1", 5000*ms)
	s.step(LogWritten{At: s.now, ID: "r1", Seq: 1})
	s.step(frame("r1", "A", 0, false))
	s.step(frame("r1", "A", 1, false))
	s.step(frame("r1", "A", 2, false)) // past the bound
	if s.c.heldBytes != 6 {
		t.Fatalf("held %d bytes, want frames 0 and 1's 6", s.c.heldBytes)
	}
	// r2's frame 0 finds no room.
	s.arriveStreaming("r2", 5000*ms)
	s.step(LogWritten{At: s.now, ID: "r2", Seq: 3})
	b0 := frame("r2", "B", 0, false)
	b0.Header.Set(messages.HdrAggID, "agg-1")
	s.step(b0)
	s.step(LogWritten{At: s.now, ID: "r2", Seq: 4})
	if an := only[Answer](s); an.Forward || an.Status.RC != messages.CodeRateLimited || an.Limit != LimitHeldBytes || an.RetryAfter < 1 {
		t.Fatalf("r2 answered %s (limit %q, retry after %d), want RATE_LIMITED over %s", describe(an), an.Limit, an.RetryAfter, LimitHeldBytes)
	}
	if st := only[StartStream](s); st.StreamID != "B" {
		t.Fatalf("r2's Agg got %+v, want the start signal of stream B", st)
	}
	if s.c.Stats().HeldFull != 2 {
		t.Fatalf("HeldFull %d, want 2", s.c.Stats().HeldFull)
	}
	// r1 is answered: frame 0, frame 1, then the GW's end of the stream.
	s.step(LogWritten{At: s.now, ID: "r1", Seq: 2})
	if an := only[Answer](s); string(an.Data) != "A/0" {
		t.Fatalf("r1 answered %s", describe(an))
	}
	got := relays(s)
	if len(got) != 2 || got[0] != "A/1false" {
		t.Fatalf("r1 relayed %v, want frame 1 then the GW's end", got)
	}
	if s.c.heldBytes != 0 {
		t.Fatalf("held %d bytes after both answers went out", s.c.heldBytes)
	}
}

// A chunk 0 of an answer passed on as it comes that finds no room ends its
// answer at once (RATE_LIMITED, counted once); an answer whose chunks alone
// pass the bound is too large, not to come back with.
func TestHeldChunk0AndAlone(t *testing.T) {
	s, chunks, _ := chunkStory(t, true, "k")
	s.c.cfg.MaxHeldBytes = int64(len(chunks[0].Data)) - 1
	s.step(chunks[0])
	if h := only[HeldFull](s); h.ID != "r1" { // the shell counts and logs it
		t.Fatalf("held full %+v, want r1", h)
	}
	s.step(LogWritten{At: s.now, ID: "r1", Seq: 2})
	if an := only[Answer](s); !heldFullAnswer(an, messages.HdrAcceptStream) || strings.Contains(an.Status.AI, messages.HdrAcceptChunks) {
		t.Fatalf("answer %s, want RATE_LIMITED over %s naming a stream, not chunks", describe(an), LimitHeldBytes)
	}
	if s.c.Stats().HeldFull != 1 || s.c.heldBytes != 0 {
		t.Fatalf("HeldFull %d, held %d bytes: want 1 and 0", s.c.Stats().HeldFull, s.c.heldBytes)
	}

	s, chunks, _ = chunkStory(t, false, "k") // reassembled here
	s.c.cfg.MaxHeldBytes = int64(len(chunks[0].Data)) + 1
	for _, c := range chunks {
		s.step(c)
		if len(s.out) > 0 {
			break
		}
	}
	s.step(LogWritten{At: s.now, ID: "r1", Seq: 2})
	if an := only[Answer](s); !errors.Is(an.Err, messages.ErrTooLarge) {
		t.Fatalf("answer %s, want too large", describe(an))
	}
	if s.c.heldBytes != 0 {
		t.Fatalf("held %d bytes after the answer", s.c.heldBytes)
	}
}

// heldFullAnswer: an is the core's answer at the held bound, RATE_LIMITED
// over LimitHeldBytes with a Retry-After, its text naming way.
func heldFullAnswer(an Answer, way string) bool {
	return !an.Forward && an.Status.RC == messages.CodeRateLimited && an.Limit == LimitHeldBytes && an.RetryAfter >= 1 &&
		strings.Contains(an.Status.AI, way)
}
