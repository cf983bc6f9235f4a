package core

import (
	"fmt"
	"strings"
	"testing"

	"github.com/sg-project/sg/messages"
)

// aggFrame is frame seq of stream as Agg agg sends it for drive drive of
// request id: its routing headers name both.
func aggFrame(id, drive, agg, stream string, seq int, end bool) AnswerChunk {
	e := frame(id, stream, seq, end)
	e.Header.Set(messages.HdrRequestID, drive)
	e.Header.Set(messages.HdrAggID, agg)
	return e
}

// seqEnd is a frame's place in its stream.
type seqEnd struct {
	seq int
	end bool
}

// heldThenAnswered: request id's Agg (agg-1, drive id~1) sends frames of
// stream while `answered` is written; then it lands and the Answer goes.
func (s *story) heldThenAnswered(id, stream string, frames ...seqEnd) {
	s.t.Helper()
	s.arriveStreaming(id, 5000*ms)
	s.step(LogWritten{At: s.now, ID: id, Seq: 1})
	for _, f := range frames {
		s.step(aggFrame(id, id+"~1", "agg-1", stream, f.seq, f.end))
	}
	s.step(LogWritten{At: s.now, ID: id, Seq: 2})
	only[Answer](s)
}

// starts is the StartStream commands of the last step, checked to come
// after its Answer when it has one.
func starts(s *story) []StartStream {
	s.t.Helper()
	var out []StartStream
	answered := false
	for _, c := range s.out {
		switch x := c.(type) {
		case Answer:
			answered = true
		case StartStream:
			if !answered {
				s.t.Fatalf("StartStream before the Answer: %s", describeAll(s.out))
			}
			out = append(out, x)
		}
	}
	return out
}

// The GW tells the Agg to send the rest of a stream (StartStream) with the
// stream's Answer (frame 0), after `answered` landed, never before; once;
// only when the stream's last frame has not come (a stream that ended while
// `answered` was written, or has one frame, costs no signal); addressed to
// the Agg and drive frame 0 names.
func TestStreamStartSignalAfterAnswer(t *testing.T) {
	s := newStory(t, "gw-1", 1)
	s.rc("rc-1", 1)
	s.arriveStreaming("r1", 5000*ms)
	s.step(LogWritten{At: s.now, ID: "r1", Seq: 1})
	s.step(aggFrame("r1", "r1~1", "agg-1", "A", 0, false))
	if w := only[WriteLog](s); w.Entry.State != messages.LogAnswered {
		t.Fatalf("frame 0 wrote %s, want answered", describe(w))
	}
	none[StartStream](s)
	for seq := 1; seq < messages.StreamStartFrames; seq++ {
		s.step(aggFrame("r1", "r1~1", "agg-1", "A", seq, false))
		none[StartStream](s)
	}
	s.step(LogWritten{At: s.now, ID: "r1", Seq: 2})
	only[Answer](s)
	if st := starts(s); len(st) != 1 || st[0].AggID != "agg-1" || st[0].DriveID != "r1~1" || st[0].StreamID != "A" || st[0].Info.ID != "r1" {
		t.Fatalf("with the Answer: %+v, want one StartStream for agg-1, r1~1, A", st)
	}
	if got := len(relays(s)); got != messages.StreamStartFrames-1 {
		t.Fatalf("%d held frames relayed, want %d", got, messages.StreamStartFrames-1)
	}
	for seq := messages.StreamStartFrames; seq < messages.StreamStartFrames+3; seq++ {
		s.step(aggFrame("r1", "r1~1", "agg-1", "A", seq, seq == messages.StreamStartFrames+2))
		none[StartStream](s)
		only[Relay](s)
	}

	// Its last frame came while `answered` was written: the Agg waits for nothing.
	s.heldThenAnswered("r2", "B", seqEnd{0, false}, seqEnd{1, true})
	none[StartStream](s)
	// One frame: nothing.
	s.heldThenAnswered("r3", "C", seqEnd{0, true})
	none[StartStream](s)
	// Frames lost while held: the stream ends with the GW's error frame,
	// and its Agg is not left waiting until the deadline.
	s.heldThenAnswered("r4", "D", seqEnd{0, false}, seqEnd{2, false})
	if st := starts(s); len(st) != 1 || st[0].StreamID != "D" {
		t.Fatalf("broken stream: %+v, want one StartStream", st)
	}
	if r := only[Relay](s); r.Status.IsOK() || !r.End {
		t.Fatalf("broken stream relayed %+v", r)
	}
	if !s.c.Idle() {
		t.Fatal("not idle")
	}
}

// Without a request log the Answer goes with frame 0, and so does StartStream.
func TestStreamStartSignalWithoutRequestLog(t *testing.T) {
	s := newStory(t, "gw-1", 1)
	s.c.cfg.Logged = false
	s.rc("rc-1", 1)
	s.arriveStreaming("r1", 5000*ms)
	s.step(aggFrame("r1", "r1~1", "agg-1", "A", 0, false))
	only[Answer](s)
	if st := starts(s); len(st) != 1 || st[0].StreamID != "A" {
		t.Fatalf("with frame 0: %+v, want one StartStream", st)
	}
	s.step(aggFrame("r1", "r1~1", "agg-1", "A", 1, true))
	none[StartStream](s)
}

// Frame 0's routing headers come from the network: an Agg id or drive id
// that is not a subject token (a wildcard, a dot, a space, too long,
// missing), a drive id of another request, or a stream id that is not a
// token addresses no signal.
func TestStreamStartSignalHostileIDs(t *testing.T) {
	long := strings.Repeat("x", 200)
	for i, c := range [][3]string{{"a.b", "d", "S"}, {"*", "d", "S"}, {">", "d", "S"}, {"a b", "d", "S"}, {long, "d", "S"}, {"", "d", "S"},
		{"agg-1", "d.e", "S"}, {"agg-1", "", "S"}, {"agg-1", "d", "S.T"}, {"agg-1", "d", "S*"},
		{"agg-1", "r2", "S"}, {"agg-1", "r2~1", "S"}, {"agg-1", "r1x~1", "S"}, {"agg-1", "r1x", "S"}} {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			s := newStory(t, "gw-1", 1)
			s.c.cfg.Logged = false
			s.rc("rc-1", 1)
			s.arriveStreaming("r1", 5000*ms)
			s.step(aggFrame("r1", c[1], c[0], c[2], 0, false))
			only[Answer](s)
			if st := starts(s); len(st) != 0 {
				t.Fatalf("Agg %q, drive %q, stream %q: %+v", c[0], c[1], c[2], st)
			}
			if s.c.Relaying() != 1 {
				t.Fatal("the stream is not relayed")
			}
		})
	}
}

// A StartStream may be lost (NATS core delivers at most once): until frame
// messages.StreamStartFrames comes, the frame the Agg sends only once it
// has the signal, the GW sends it again every StartResend, in NextDeadline;
// once that frame came, never.
func TestStreamStartSignalSentAgain(t *testing.T) {
	s := newStory(t, "gw-1", 1)
	s.rc("rc-1", 1)
	var frames []seqEnd
	for seq := range messages.StreamStartFrames {
		frames = append(frames, seqEnd{seq, false})
	}
	s.heldThenAnswered("r1", "A", frames...)
	first := starts(s)
	if len(first) != 1 || first[0].Again {
		t.Fatalf("with the Answer: %+v, want one StartStream", first)
	}
	answered := s.now
	if at, ok := s.c.NextDeadline(); !ok || at != answered+StartResend {
		t.Fatalf("NextDeadline %d %t, want %d after the Answer", at-answered, ok, StartResend)
	}
	for i := int64(1); i <= 2; i++ {
		s.now = answered + i*StartResend - 1
		s.step(Tick{At: s.now})
		none[StartStream](s)
		s.now++
		s.step(Tick{At: s.now})
		again := only[StartStream](s)
		if want := first[0]; !again.Again || again.AggID != want.AggID || again.DriveID != want.DriveID || again.StreamID != want.StreamID {
			t.Fatalf("again: %+v, want %+v again", again, want)
		}
	}
	s.step(aggFrame("r1", "r1~1", "agg-1", "A", messages.StreamStartFrames, false))
	only[Relay](s)
	s.now += 3 * StartResend
	s.step(Tick{At: s.now})
	none[StartStream](s)
	if s.c.Relaying() != 1 {
		t.Fatal("the stream is not relayed")
	}
}
