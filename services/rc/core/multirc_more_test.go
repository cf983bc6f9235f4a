package core

import (
	"slices"
	"testing"
	"time"
)

// TestMultiRCSecondaryInactive: a DAP of the secondary failed its portion
// (the Agg answers with the error); at the timeout the secondary reports
// "inactive" (seed), not "completed".
func TestMultiRCSecondaryInactive(t *testing.T) {
	p, s := twoRCs(t)
	out := p.request("q1", "trade", nil, t0, t0+hour, time.Second)
	us := relay(t, p, s, out)
	fwd := only[ForwardCompletion](t, s.complete(us, OutcomeError))
	p.step(fwd.Completion)
	s.now = t0 + int64(time.Second)
	rep := only[ReportPeerStatus](t, s.step(PeerStatusQuery{At: s.now, Primary: "rc-1", Request: "q1"}))
	if rep.Block != `[rc=rc-2:5060;status="inactive"]` {
		t.Fatalf("secondary block %s", rep.Block)
	}
}

// TestMultiRCExhaustedWaitIsLogged: when a secondary stays silent the
// primary composes an incomplete message and emits TimeoutIncomplete, whose
// text is the seed's log line.
func TestMultiRCExhaustedWaitIsLogged(t *testing.T) {
	p, s := twoRCs(t)
	out := p.request("q1", "trade", nil, t0, t0+hour, time.Second)
	relay(t, p, s, out)
	p.now = t0 + int64(time.Second)
	only[QueryPeerStatus](t, p.tick())
	none[TimeoutIncomplete](t, p.tick())
	at, _ := p.c.NextDeadline()
	p.now = at
	end := p.tick()
	ti := only[TimeoutIncomplete](t, end)
	only[Reply](t, end)
	if ti.Request != "q1" || ti.Max != 1 || !slices.Equal(ti.Unreported, []string{"rc-2"}) {
		t.Fatalf("%+v", ti)
	}
	if got := TimeoutIncompleteText(ti.Max); got != "Exhausted number of retries waiting for other RCs to report timeout (max=1), composing incomplete timeout message" {
		t.Fatalf("log line %q", got)
	}
}
