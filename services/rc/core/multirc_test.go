package core

import (
	"testing"
	"time"
)

// twoRCs: rc-1 owns DAP eu, rc-2 owns DAP us; both see every DAP's events.
func twoRCs(t *testing.T) (p, s *harness) {
	p = newHarness(t, Config{Self: "rc-1", Addr: "rc-1:5060"})
	s = newHarness(t, Config{Self: "rc-2", Addr: "rc-2:5060"})
	for _, h := range []*harness{p, s} {
		h.register("eu", lbl("region", "eu"), ownedBy("rc-1"))
		h.register("us", lbl("region", "us"), ownedBy("rc-2"))
	}
	return p, s
}

// relay carries a primary's dispatch through the secondary.
func relay(t *testing.T, p, s *harness, cmds []Command) Dispatch {
	t.Helper()
	var via Dispatch
	for _, d := range dispatches(cmds) {
		if d.ViaRC == "rc-2" {
			via = d
		}
	}
	if via.DAP == "" {
		t.Fatalf("no dispatch via rc-2 in %s", describe(cmds))
	}
	s.now = p.now
	out := s.step(PeerDispatch{At: s.now, Primary: "rc-1", Dispatch: via})
	d := dispatchedTo(t, out, "us")
	if d.ViaRC != "" {
		t.Fatalf("secondary must dispatch directly: %s", describe(out))
	}
	return d
}

func TestMultiRCPrimaryAndSecondary(t *testing.T) {
	p, s := twoRCs(t)
	out := p.request("q1", "trade", nil, t0, t0+hour, time.Minute)
	eu := dispatchedTo(t, out, "eu")
	us := relay(t, p, s, out)
	p.complete(eu, OutcomeOK)
	// The DAP reports to its own RC, which forwards to the primary.
	s.advance(time.Millisecond)
	fwd := only[ForwardCompletion](t, s.complete(us, OutcomeOK))
	if fwd.RC != "rc-1" {
		t.Fatalf("%+v", fwd)
	}
	ae := only[AggExpect](t, p.step(fwd.Completion))
	if len(ae.Portions) != 2 {
		t.Fatalf("%+v", ae)
	}
}

func TestMultiRCTimeoutPendingAggregationAndExecuting(t *testing.T) {
	p, s := twoRCs(t)
	out := p.request("q1", "trade", nil, t0, t0+hour, time.Second)
	eu := dispatchedTo(t, out, "eu")
	relay(t, p, s, out)
	p.complete(eu, OutcomeOK)
	// At the deadline the secondary reports on its own; the primary asks.
	s.now = t0 + int64(time.Second)
	rep := only[ReportPeerStatus](t, s.tick())
	p.now = s.now
	q := only[QueryPeerStatus](t, p.tick())
	if q.RC != "rc-2" {
		t.Fatalf("%+v", q)
	}
	final := only[Reply](t, p.step(PeerStatusReport{At: p.now, RC: "rc-2", Request: "q1", Block: rep.Block}))
	wantText(t, final.Text, `Request timed out, [rc=rc-1:5060;status="pending aggregation";agg=agg-1] [rc=rc-2:5060;status="executing";dap=[us:5080]]`)
}

func TestMultiRCTimeoutCompletedSecondary(t *testing.T) {
	p, s := twoRCs(t)
	out := p.request("q1", "trade", nil, t0, t0+hour, time.Second)
	us := relay(t, p, s, out)
	p.step(only[ForwardCompletion](t, s.complete(us, OutcomeOK)).Completion)
	p.now = t0 + int64(time.Second)
	only[QueryPeerStatus](t, p.tick())
	s.now = p.now
	none[ReportPeerStatus](t, s.tick()) // nothing running: no report of its own
	rep := only[ReportPeerStatus](t, s.step(PeerStatusQuery{At: s.now, Primary: "rc-1", Request: "q1"}))
	final := only[Reply](t, p.step(PeerStatusReport{At: p.now, RC: "rc-2", Request: "q1", Block: rep.Block}))
	wantText(t, final.Text, `Request timed out, [rc=rc-1:5060;status="executing";dap=[eu:5080]] [rc=rc-2:5060;status="completed"]`)
}

func TestMultiRCTimeoutReceivedTooLate(t *testing.T) {
	p, s := twoRCs(t)
	out := p.request("q1", "trade", nil, t0, t0+hour, time.Second)
	var via Dispatch
	for _, d := range dispatches(out) {
		if d.ViaRC == "rc-2" {
			via = d
		}
	}
	s.now = t0 + int64(time.Second)
	rep := only[ReportPeerStatus](t, s.step(PeerDispatch{At: s.now, Primary: "rc-1", Dispatch: via}))
	if rep.Block != `[rc=rc-2:5060;status="received too late";rcvTooLate=[{region:us}]]` {
		t.Fatalf("block %s", rep.Block)
	}
}

func TestMultiRCSilentSecondaryIsUnknown(t *testing.T) {
	p, s := twoRCs(t)
	out := p.request("q1", "trade", nil, t0, t0+hour, time.Second)
	relay(t, p, s, out)
	p.now = t0 + int64(time.Second)
	only[QueryPeerStatus](t, p.tick())
	// The primary waits one RC timer period (default 10 s) for the report.
	at, ok := p.c.NextDeadline()
	if !ok || at != p.now+int64(10*time.Second) {
		t.Fatalf("wait end %d %v", at, ok)
	}
	p.now = at - 1
	none[Reply](t, p.tick())
	p.now = at
	final := only[Reply](t, p.tick())
	wantText(t, final.Text, `Request timed out, [rc=rc-1:5060;status="executing";dap=[eu:5080]] [rc=rc-2;status="unknown"]`)
	if st, _ := p.c.Stats(); st.IncompleteTimeoutMessages != 1 {
		t.Fatalf("stats %+v", st)
	}
}
