package core

import (
	"testing"
	"time"
)

func twoAggs(t *testing.T) *harness {
	h := newHarness(t, Config{Aggs: []string{"agg-1", "agg-2"}})
	h.register("a", lbl("region", "eu"), concurrency(10))
	return h
}

func (h *harness) requestAnyAgg(id string) []Command {
	h.t.Helper()
	return h.step(RequestArrived{At: h.now, Request: Request{ID: id, API: "getData", Table: "trade",
		Range: TimeRange{Start: t0, End: t0 + hour}, Deadline: h.now + int64(time.Minute)}})
}

// Requests go to the alive Aggs in turn; a lost Agg gets no new work.
func TestAggsInTurnAndNoWorkForALostOne(t *testing.T) {
	h := twoAggs(t)
	if d := dispatchedTo(t, h.requestAnyAgg("q1"), "a"); d.Agg != "agg-1" {
		t.Fatalf("%+v", d)
	}
	if d := dispatchedTo(t, h.requestAnyAgg("q2"), "a"); d.Agg != "agg-2" {
		t.Fatalf("%+v", d)
	}
	h.step(AggLost{At: h.now, Agg: "agg-1"})
	for _, id := range []string{"q3", "q4"} {
		if d := dispatchedTo(t, h.requestAnyAgg(id), "a"); d.Agg != "agg-2" {
			t.Fatalf("%s: %+v", id, d)
		}
	}
	h.step(AggUp{At: h.now, Agg: "agg-1"})
	seen := map[string]bool{}
	for _, id := range []string{"q5", "q6"} {
		seen[dispatchedTo(t, h.requestAnyAgg(id), "a").Agg] = true
	}
	if !seen["agg-1"] || !seen["agg-2"] {
		t.Fatalf("after agg-1 came back: %v", seen)
	}
}

// A request whose Agg dies is driven again on the other: every label set
// restarts, its new portions name the new Agg, and the new Agg is told what
// to merge. Even a request already aggregating: its partials died too.
func TestLostAggRequestsDrivenAgain(t *testing.T) {
	h := twoAggs(t)
	d1 := dispatchedTo(t, h.requestAnyAgg("q1"), "a")
	if ae := only[AggExpect](t, h.complete(d1, OutcomeOK)); ae.Agg != "agg-1" {
		t.Fatalf("%+v", ae)
	}
	out := h.step(AggLost{At: h.now, Agg: "agg-1"})
	if ch := only[AggChanged](t, out); ch.Request != "q1" || ch.From != "agg-1" || ch.To != "agg-2" {
		t.Fatalf("%+v", ch)
	}
	none[Reply](t, out)
	none[RetryNoted](t, out) // not a retry: it does not count against SG_MAX_RETRY
	d2 := dispatchedTo(t, out, "a")
	if d2.Agg != "agg-2" || d2.Portion.Attempt != d1.Portion.Attempt+1 || d2.Retries != 0 {
		t.Fatalf("%+v", d2)
	}
	ae := only[AggExpect](t, h.complete(d2, OutcomeOK))
	if ae.Agg != "agg-2" || len(ae.Portions) != 1 || ae.Portions[0].PortionID != d2.Portion.ID {
		t.Fatalf("%+v", ae)
	}
}

// With no Agg left the request is answered at once, not left to time out;
// so is a new one.
func TestNoAggLeftAnswersAtOnce(t *testing.T) {
	h := newHarness(t, Config{Aggs: []string{"agg-1"}})
	h.register("a", lbl("region", "eu"))
	d := dispatchedTo(t, h.requestAnyAgg("q1"), "a")
	out := h.step(AggLost{At: h.now, Agg: "agg-1"})
	rep := only[Reply](t, out)
	if rep.Kind != ReplyNoResources || rep.Text != "Agg agg-1 was lost and no other Agg is connected" {
		t.Fatalf("%+v", rep)
	}
	if cd := only[CancelDAP](t, out); cd.DAP != "a" {
		t.Fatalf("%+v", cd)
	}
	none[CancelAgg](t, out) // it is dead
	h.complete(d, OutcomeError)
	rep = only[Reply](t, h.requestAnyAgg("q2"))
	if rep.Kind != ReplyNoResources || rep.Text != errNoAgg {
		t.Fatalf("%+v", rep)
	}
}

// A portion still running for the lost Agg is stopped (that portion only),
// so that the new attempt need not wait for it to finish on its own.
func TestLostAggStopsItsRunningPortions(t *testing.T) {
	h := newHarness(t, Config{Aggs: []string{"agg-1", "agg-2"}})
	h.register("a", lbl("region", "eu"))
	d1 := dispatchedTo(t, h.requestAnyAgg("q1"), "a")
	out := h.step(AggLost{At: h.now, Agg: "agg-1"})
	cd := only[CancelDAP](t, out)
	if cd.DAP != "a" || cd.Request != "q1" || cd.Portion != d1.Portion.ID {
		t.Fatalf("%+v", cd)
	}
	none[*Dispatch](t, out) // a is busy with the previous version until it answers
	h.advance(10 * time.Millisecond)
	d2 := dispatchedTo(t, h.complete(d1, OutcomeError), "a")
	if d2.Agg != "agg-2" || d2.Portion.Attempt != d1.Portion.Attempt+1 {
		t.Fatalf("%+v", d2)
	}
	if ae := only[AggExpect](t, h.complete(d2, OutcomeOK)); ae.Agg != "agg-2" {
		t.Fatalf("%+v", ae)
	}
}
