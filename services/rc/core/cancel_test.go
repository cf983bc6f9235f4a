package core

import (
	"strings"
	"testing"
	"time"
)

// A cancelled request: its answer, its queued items dropped, every DAP that
// runs one of its portions told to stop, the Agg told to drop it; the DAP's
// answer then frees the slot and the next queued request runs there.
func TestCancelStopsRunningPortionsAndFreesTheSlot(t *testing.T) {
	h := newHarness(t, Config{})
	h.register("hdb", lbl("region", "eu"), tier(TierHDB), purview(MinTS, t0))
	h.register("rdb", lbl("region", "eu"), tier(TierRDB), purview(t0, MaxTS))
	out := h.request("q1", "trade", nil, t0-hour, t0+hour, time.Minute)
	hdb, rdb := dispatchedTo(t, out, "hdb"), dispatchedTo(t, out, "rdb")
	// q2 waits for the hdb.
	none[*Dispatch](t, h.request("q2", "trade", nil, t0-2*hour, t0-hour, time.Minute))

	h.advance(time.Millisecond)
	out = h.step(RequestCancelled{At: h.now, Request: "q1", Reason: "client went away"})
	rep := only[Reply](t, out)
	if rep.Kind != ReplyCancelled || rep.Text != "Request cancelled: client went away" {
		t.Fatalf("%+v", rep)
	}
	stopped := map[string]bool{}
	for _, c := range out {
		if cd, ok := c.(CancelDAP); ok && cd.Request == "q1" {
			stopped[cd.DAP] = true
		}
	}
	if !stopped["hdb"] || !stopped["rdb"] || len(stopped) != 2 {
		t.Fatalf("want hdb and rdb told to stop, got %s", describe(out))
	}
	if ca := only[CancelAgg](t, out); ca.Request != "q1" || ca.Agg != "agg-1" {
		t.Fatalf("%+v", ca)
	}
	// The slots stay taken until the DAPs answer: the DAP may still be running.
	if h.c.Running("hdb") != 1 {
		t.Fatalf("hdb running %d, want 1 until it answers", h.c.Running("hdb"))
	}
	h.advance(time.Millisecond)
	d := dispatchedTo(t, h.complete(hdb, OutcomeError), "hdb")
	if d.Portion.Request != "q2" {
		t.Fatalf("next queued request: got %s", describe([]Command{&d}))
	}
	none[Reply](t, h.complete(rdb, OutcomeError))
	// A second cancel, or one for an unknown request, does nothing.
	if out := h.step(RequestCancelled{At: h.now, Request: "q1"}); len(out) != 0 {
		t.Fatalf("second cancel: %s", describe(out))
	}
	if out := h.step(RequestCancelled{At: h.now, Request: "nope"}); len(out) != 0 {
		t.Fatalf("unknown request: %s", describe(out))
	}
}

// A request queued only (nothing dispatched): answered, dequeued, and no Agg
// or DAP is bothered.
func TestCancelQueuedOnly(t *testing.T) {
	h := newHarness(t, Config{})
	h.register("a", lbl("region", "eu"), unavailable())
	h.request("q1", "trade", nil, t0, t0+hour, time.Minute)
	out := h.step(RequestCancelled{At: h.now, Request: "q1", Reason: "x"})
	only[Reply](t, out)
	none[CancelAgg](t, out)
	none[CancelDAP](t, out)
	if st, _ := h.c.Stats(); st.QueueLength != 0 {
		t.Fatalf("queue length %d", st.QueueLength)
	}
}

// The RC's own deadline stops the running portions too, and the timeout
// message is still the seed's (the DAPs are reported as executing).
func TestTimeoutStopsRunningPortions(t *testing.T) {
	h := newHarness(t, Config{})
	h.register("a", lbl("region", "eu"))
	d := dispatchedTo(t, h.request("q1", "trade", nil, t0, t0+hour, 5*time.Second), "a")
	h.request("q2", "trade", nil, t0, t0+hour, time.Minute)
	h.advance(5 * time.Second)
	out := h.tick()
	rep := only[Reply](t, out)
	if rep.Kind != ReplyTimeout || rep.Text != `Request timed out, [rc=rc-1;status="executing";dap=[a:5080]]` {
		t.Fatalf("%+v", rep)
	}
	if cd := only[CancelDAP](t, out); cd.DAP != "a" || cd.Request != "q1" {
		t.Fatalf("%+v", cd)
	}
	only[CancelAgg](t, out)
	// The DAP stops and answers at once: q2 runs.
	h.advance(10 * time.Millisecond)
	if next := dispatchedTo(t, h.complete(d, OutcomeError), "a"); next.Portion.Request != "q2" {
		t.Fatalf("%+v", next)
	}
}

// A cancel that arrives at the deadline (the GW gives up then too) yields
// the seed's timeout message, not a cancellation.
func TestCancelAtTheDeadlineIsATimeout(t *testing.T) {
	h := newHarness(t, Config{})
	h.register("a", lbl("region", "eu"), unavailable())
	h.request("q1", "trade", nil, t0, t0+hour, 5*time.Second)
	h.advance(5 * time.Second)
	rep := only[Reply](t, h.step(RequestCancelled{At: h.now, Request: "q1", Reason: "deadline"}))
	if rep.Kind != ReplyTimeout || !strings.HasPrefix(rep.Text, "Request timed out, [rc=rc-1;status=\"allocating\"") {
		t.Fatalf("%+v", rep)
	}
}

// Multi-RC: the primary tells the secondary, which tells its DAP; the DAP's
// answer is forwarded and found stale at the primary.
func TestCancelReachesTheSecondarysDAPs(t *testing.T) {
	p, s := twoRCs(t)
	out := p.request("q1", "trade", nil, t0, t0+hour, time.Minute)
	eu := dispatchedTo(t, out, "eu")
	us := relay(t, p, s, out)
	p.advance(time.Millisecond)
	out = p.step(RequestCancelled{At: p.now, Request: "q1", Reason: "x"})
	if cp := only[CancelPeer](t, out); cp.RC != "rc-2" || cp.Request != "q1" {
		t.Fatalf("%+v", cp)
	}
	if cd := only[CancelDAP](t, out); cd.DAP != "eu" {
		t.Fatalf("%+v", cd)
	}
	s.now = p.now
	if cd := only[CancelDAP](t, s.step(RequestCancelled{At: s.now, Request: "q1"})); cd.DAP != "us" {
		t.Fatalf("%+v", cd)
	}
	only[Reply](t, out)
	fwd := only[ForwardCompletion](t, s.complete(us, OutcomeError))
	before, _ := p.c.Stats()
	none[Reply](t, p.step(fwd.Completion))
	none[AggFail](t, p.complete(eu, OutcomeError))
	if after, _ := p.c.Stats(); after.Stale != before.Stale+2 {
		t.Fatalf("stale %d -> %d", before.Stale, after.Stale)
	}
}
