package core

import (
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
	s.arriveStreaming("r1", 5000*ms)
	only[WriteLog](s)
	s.step(LogWritten{At: s.now, ID: "r1", Seq: 1})
	s.step(frame("r1", "A", 0, false))
	only[WriteLog](s)
	s.step(LogWritten{At: s.now, ID: "r1", Seq: 2})
	only[Answer](s)

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
