package core

import (
	"testing"

	"github.com/sg-project/sg/messages"
	"github.com/sg-project/sg/subjects"
)

// readyStory is a GW without a request log that waits StartupWait for a
// first RC, and with hold until one is warm when hold is set.
func readyStory(t *testing.T, hold bool) *story {
	s := subjects.Default()
	return &story{t: t, now: t0, c: New(Config{Self: "gw-1", Incarnation: t0, Start: t0, TimeoutMargin: margin,
		StartupWait: 300 * ms, HoldUntilReady: hold, AnnounceEvery: announce, DeadAfter: deadAfter,
		LogSubject: s.RequestLogEntry, AnswerSubject: s.GWAnswer})}
}

func (s *story) at(d int64) { s.now = t0 + d; s.step(Tick{At: s.now}) }

// Until some RC is warm, a request waits for one up to its deadline, past
// StartupWait; a warming RC gets nothing; the warm announcement sends it.
func TestHoldUntilReady(t *testing.T) {
	s := readyStory(t, true)
	s.arrive("r1", 10_000*ms)
	none[Answer](s)
	s.at(2000 * ms) // well past StartupWait
	none[Answer](s)
	s.step(RCAnnounced{At: s.now, RC: RCInfo{ID: "rc-1", StartedAt: 1, Period: announce, Warming: true}})
	none[Submit](s)
	none[Answer](s)
	s.step(RCAnnounced{At: s.now, RC: RCInfo{ID: "rc-1", StartedAt: 1, Period: announce}})
	if sub := only[Submit](s); sub.RCID != "rc-1" || sub.Info.ID != "r1" {
		t.Fatalf("submit %+v", sub)
	}
	// Ready once: a request no RC can take fails after StartupWait as before
	// (here a scope with no RC, hard affinity), not at its deadline.
	sub := messages.RCSubmission{V: messages.RCVersion, GWID: "gw-1", Header: messages.RequestHeader{API: subjects.APIGetData,
		Scope: messages.Scope{Assembly: "eu"}}, ReplyTo: subjects.Default().GWAnswer("gw-1", "r2"), Content: messages.ContentMsgpack,
		Deadline: s.now + 10_000*ms, ReceivedAt: s.now}
	s.step(Arrived{At: s.now, Req: Request{ID: "r2", Caller: "_INBOX.b", Reply: "_INBOX.b.r2", API: subjects.APIGetData,
		Content: messages.ContentMsgpack, Sub: sub, Received: s.now, Deadline: s.now + 10_000*ms}})
	if a := only[Answer](s); a.Status.RC != messages.CodeNoResources {
		t.Fatalf("scoped request after ready: %+v", a.Status)
	}
}

// Without the hold, a request with no RC fails "No resources connected"
// once StartupWait has passed; and a request still waiting at its deadline
// fails then even with the hold.
func TestNoHoldFailsAfterStartupWait(t *testing.T) {
	s := readyStory(t, false)
	s.arrive("r1", 10_000*ms)
	none[Answer](s)
	s.at(300 * ms)
	if a := only[Answer](s); a.Status.RC != messages.CodeNoResources {
		t.Fatalf("got %+v", a.Status)
	}
	s = readyStory(t, true)
	s.arrive("r1", 1000*ms)
	s.at(999 * ms)
	none[Answer](s)
	s.at(1000 * ms)
	if a := only[Answer](s); a.Status.RC != messages.CodeNoResources {
		t.Fatalf("at the deadline: %+v", a.Status)
	}
}
