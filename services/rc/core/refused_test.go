package core

import (
	"strings"
	"testing"
	"time"
)

// A DAP refuses the dispatch it was sent: the request ends at once with
// BAD_REQUEST naming the DAP; its slot is free for the next request.
func TestRefusedByDAPEndsTheRequest(t *testing.T) {
	h := newHarness(t, Config{})
	h.register("dap-1", lbl("region", "eu"))
	d := dispatchedTo(t, h.request("q1", "trade", nil, t0, t0+hour, time.Minute), "dap-1")
	h.request("q2", "trade", nil, t0, t0+hour, time.Minute) // queued behind q1
	h.advance(time.Millisecond)
	out := h.step(Refused{At: h.now, Request: "q1", DAP: "dap-1", Portion: d.Portion.ID, Attempt: d.Portion.Attempt, Reason: "portion dispatch: msgpack: invalid code"})
	r := only[Reply](t, out)
	if r.Request != "q1" || r.Kind != ReplyBadRequest || !strings.Contains(r.Text, "DAP dap-1") || !strings.Contains(r.Text, "msgpack: invalid code") {
		t.Fatalf("reply %+v", r)
	}
	if n := only[RefusalNoted](t, out); !n.Accepted {
		t.Fatalf("note %+v", n)
	}
	if d2 := dispatchedTo(t, out, "dap-1"); d2.Portion.Request != "q2" {
		t.Fatalf("the refused portion's slot was not given to q2: %s", describe(out))
	}
	none[CancelDAP](t, out) // the DAP runs nothing of q1 to stop
}

// An Agg's refusal (INTERNAL: it was sent garbage) ends the request when it
// comes from the request's Agg.
func TestRefusedByAggEndsTheRequest(t *testing.T) {
	h := newHarness(t, Config{})
	h.register("dap-1", lbl("region", "eu"))
	h.request("q1", "trade", nil, t0, t0+hour, time.Minute)
	out := h.step(Refused{At: h.now, Request: "q1", Agg: "agg-1", Internal: true, Reason: "expectation: msgpack: invalid code"})
	if r := only[Reply](t, out); r.Kind != ReplyInternal || !strings.HasPrefix(r.Text, "Request refused by Agg agg-1: ") {
		t.Fatalf("reply %+v", r)
	}
	only[CancelAgg](t, out)
	only[CancelDAP](t, out) // dap-1 still runs q1's portion
}

// A refusal that names what the core did not send (another Agg, another
// DAP, an attempt never dispatched, an unknown request) changes nothing but
// the count of dropped refusals.
func TestForgedRefusalsChangeNothing(t *testing.T) {
	h := newHarness(t, Config{})
	h.register("dap-1", lbl("region", "eu"))
	h.register("dap-2", lbl("region", "us"))
	d := dispatchedTo(t, h.request("q1", "trade", Selector{"region": {"eu"}}, t0, t0+hour, time.Minute), "dap-1")
	forged := []Refused{
		{Request: "q1", Agg: "agg-2", Reason: "wrong Agg"},
		{Request: "q1", Agg: "", Reason: "no Agg"},
		{Request: "q-unknown", Agg: "agg-1", Reason: "unknown request"},
		{Request: "q1", DAP: "dap-2", Portion: d.Portion.ID, Attempt: d.Portion.Attempt, Reason: "wrong DAP"},
		{Request: "q1", DAP: "dap-1", Portion: d.Portion.ID, Attempt: d.Portion.Attempt + 1, Reason: "stale attempt"},
		{Request: "q1", DAP: "dap-1", Portion: d.Portion.ID + 100, Reason: "no such portion"},
		{Request: "q-unknown", DAP: "dap-1", Portion: d.Portion.ID, Attempt: d.Portion.Attempt, Reason: "another request's portion"},
	}
	for i, e := range forged {
		before, _ := h.c.Stats()
		e.At = h.now
		out := h.step(e)
		if n := only[RefusalNoted](t, out); n.Accepted || n.Why == "" {
			t.Fatalf("forged %d (%s): %+v", i, e.Reason, n)
		}
		after, _ := h.c.Stats()
		before.RefusalsDropped++
		before.Events++
		if after != before {
			t.Fatalf("forged %d (%s) changed the core: %+v, want %+v", i, e.Reason, after, before)
		}
	}
	if !dapRuns(h, "dap-1", d.Portion.ID) {
		t.Fatal("a forged refusal freed dap-1's slot")
	}
	// The request goes on: the genuine DAP's answer still makes it.
	if e := only[AggExpect](t, h.complete(d, OutcomeOK)); e.Request != "q1" {
		t.Fatalf("expect %+v", e)
	}
}

func dapRuns(h *harness, dap string, id PortionID) bool {
	d := h.c.fleet.byID[dap]
	return d != nil && d.runs(id)
}

// Once a DAP's error went to the Agg (AggFail), the Agg answers with it: a
// refusal that comes after, from another DAP or from the Agg, answers
// nothing more and cancels nothing (review4: it answered a second time and
// its CancelAgg could cut the error answer short). The refusing DAP's slot
// is free all the same.
func TestRefusalAfterAggFailAnswersNothing(t *testing.T) {
	h := newHarness(t, Config{})
	h.register("dap-1", lbl("region", "eu"))
	h.register("dap-2", lbl("region", "us"))
	out := h.request("q1", "trade", nil, t0, t0+hour, time.Minute)
	d1, d2 := dispatchedTo(t, out, "dap-1"), dispatchedTo(t, out, "dap-2")
	only[AggFail](t, h.complete(d1, OutcomeError))
	for _, e := range []Refused{
		{Request: "q1", DAP: "dap-2", Portion: d2.Portion.ID, Attempt: d2.Portion.Attempt, Reason: "portion dispatch: bad"},
		{Request: "q1", Agg: "agg-1", Internal: true, Reason: "partial: bad"},
	} {
		e.At = h.now
		out := h.step(e)
		none[Reply](t, out)
		none[CancelAgg](t, out)
		none[CancelDAP](t, out)
		if n := only[RefusalNoted](t, out); n.Accepted || n.Why != refusedErrored {
			t.Fatalf("%s: note %+v", e.Reason, n)
		}
	}
	if dapRuns(h, "dap-2", d2.Portion.ID) {
		t.Fatal("the refusing DAP's slot was not freed")
	}
}

// A DAP's refusal of a portion a secondary RC relays for a primary: the DAP
// runs nothing of it, so the secondary frees its slot at once (review4: it
// stayed taken until the relay ended), and forwards the refusal to the
// primary (as it forwards completions), which ends the request at once with
// BAD_REQUEST naming the DAP, exactly once (it waited for its deadline).
func TestRefusedRelayedPortionEndsThePrimaryRequest(t *testing.T) {
	p, s := twoRCs(t)
	out := p.request("q1", "trade", nil, t0, t0+hour, time.Minute)
	eu := dispatchedTo(t, out, "eu")
	us := relay(t, p, s, out)
	s.advance(time.Millisecond)
	refusal := Refused{At: s.now, Request: "q1", DAP: "us", Portion: us.Portion.ID, Attempt: us.Portion.Attempt, Reason: "portion dispatch: bad"}
	out = s.step(refusal)
	if n := only[RefusalNoted](t, out); !n.Forwarded || n.Accepted {
		t.Fatalf("note at the secondary %+v", n)
	}
	fwd := only[ForwardRefusal](t, out)
	if fwd.RC != "rc-1" || fwd.Refused.Via != "rc-2" || fwd.Refused.DAP != "us" || fwd.Refused.Portion != us.Portion.ID || fwd.Refused.Attempt != us.Portion.Attempt {
		t.Fatalf("forwarded %+v", fwd)
	}
	none[Reply](t, out)
	if dapRuns(s, "us", us.Portion.ID) {
		t.Fatal("the relayed portion's slot is still taken at the secondary")
	}
	// The DAP's refusal again (a duplicate): nothing more goes to the primary.
	out = s.step(refusal)
	none[ForwardRefusal](t, out)
	if n := only[RefusalNoted](t, out); n.Forwarded || n.Why != refusedRelayed {
		t.Fatalf("duplicate at the secondary: note %+v", n)
	}

	p.now = s.now
	fwd.Refused.At = p.now
	out = p.step(fwd.Refused)
	r := only[Reply](t, out)
	if r.Request != "q1" || r.Kind != ReplyBadRequest || !strings.Contains(r.Text, "Request refused by DAP us: portion dispatch: bad") {
		t.Fatalf("reply %+v", r)
	}
	if n := only[RefusalNoted](t, out); !n.Accepted {
		t.Fatalf("note at the primary %+v", n)
	}
	if dapRuns(p, "us", us.Portion.ID) {
		t.Fatal("the refused portion's slot is still taken in the primary's view")
	}
	if c := only[CancelDAP](t, out); c.DAP != "eu" || c.Request != "q1" {
		t.Fatalf("cancel %+v, want eu's portion of q1 stopped", c)
	}
	// Forwarded twice: answered once.
	out = p.step(fwd.Refused)
	none[Reply](t, out)
	if n := only[RefusalNoted](t, out); n.Accepted {
		t.Fatalf("a second forwarded refusal accepted: %+v", n)
	}
	p.complete(eu, OutcomeOK)
}

// Refusals of a relayed portion that name what was not sent, or not by that
// route, change nothing but the count of dropped refusals: at the secondary
// (the slot stays taken, nothing is forwarded) and at the primary (the
// request goes on, and the DAP's genuine answer still makes it).
func TestForgedRelayedRefusalsChangeNothing(t *testing.T) {
	p, s := twoRCs(t)
	out := p.request("q1", "trade", nil, t0, t0+hour, time.Minute)
	eu := dispatchedTo(t, out, "eu")
	us := relay(t, p, s, out)
	refusal := func(dap string, d Dispatch, attempt uint32, via string) Refused {
		return Refused{Request: "q1", DAP: dap, Portion: d.Portion.ID, Attempt: attempt, Via: via, Reason: "forged"}
	}
	for _, c := range []struct {
		at   *harness
		what string
		e    Refused
	}{
		{s, "at the secondary, a stale attempt", refusal("us", us, us.Portion.Attempt+1, "")},
		{s, "at the secondary, another DAP", refusal("eu", us, us.Portion.Attempt, "")},
		{s, "at the secondary, claiming to be forwarded", refusal("us", us, us.Portion.Attempt, "rc-1")},
		{p, "at the primary, from the DAP directly", refusal("us", us, us.Portion.Attempt, "")},
		{p, "at the primary, through another RC", refusal("us", us, us.Portion.Attempt, "rc-3")},
		{p, "at the primary, a stale attempt", refusal("us", us, us.Portion.Attempt+1, "rc-2")},
		{p, "at the primary, its own DAP's portion forwarded", refusal("eu", eu, eu.Portion.Attempt, "rc-2")},
	} {
		before, _ := c.at.c.Stats()
		c.e.At = c.at.now
		out := c.at.step(c.e)
		if n := only[RefusalNoted](t, out); n.Accepted || n.Forwarded || n.Why == "" {
			t.Fatalf("%s: %+v", c.what, n)
		}
		after, _ := c.at.c.Stats()
		before.RefusalsDropped++
		before.Events++
		if after != before {
			t.Fatalf("%s changed the core: %+v, want %+v", c.what, after, before)
		}
	}
	if !dapRuns(s, "us", us.Portion.ID) || !dapRuns(p, "us", us.Portion.ID) || !dapRuns(p, "eu", eu.Portion.ID) {
		t.Fatal("a forged refusal freed a slot")
	}
	p.complete(eu, OutcomeOK)
	fwd := only[ForwardCompletion](t, s.complete(us, OutcomeOK))
	p.now = s.now
	if e := only[AggExpect](t, p.step(fwd.Completion)); e.Request != "q1" || len(e.Portions) != 2 {
		t.Fatalf("expect %+v", e)
	}
}
