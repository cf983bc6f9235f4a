package core

import (
	"testing"
	"time"
)

// TestArrivedAfterDeadline: a request that reaches the RC already past its
// deadline gets a precise status (received too late, by how much), never
// "unknown" (issue: status "unknown" from a primary 317 ms after a 5 s timeout).
func TestArrivedAfterDeadline(t *testing.T) {
	h := newHarness(t, Config{})
	h.register("rdb-eu", lbl("region", "eu"))
	h.now = t0 + int64(5*time.Second)
	out := h.step(RequestArrived{At: h.now, Request: Request{ID: "late", API: "getData", Table: "trade",
		Range: TimeRange{Start: t0, End: t0 + hour}, Deadline: h.now - int64(317*time.Millisecond)}})
	rep := only[Reply](t, out)
	none[*Dispatch](t, out)
	if rep.Kind != ReplyTimeout {
		t.Fatalf("reply %+v", rep)
	}
	wantText(t, rep.Text, `Request timed out, [rc=rc-1;status="received too late";afterDeadline="317ms"]`)
	if st, _ := h.c.Stats(); st.ArrivedLate != 1 {
		t.Fatalf("stats %+v", st)
	}
}

// TestDAPTimeoutBeforeRCDeadlineIsExecuting: a DAP whose clock leads reports
// the timeout before the RC's deadline; the RC times out at once and says
// the DAP was executing (the simulation found "unknown" here).
func TestDAPTimeoutBeforeRCDeadlineIsExecuting(t *testing.T) {
	h := newHarness(t, Config{})
	h.register("rdb-eu", lbl("region", "eu"))
	d := dispatchedTo(t, h.request("q1", "trade", nil, t0, t0+hour, time.Second), "rdb-eu")
	h.advance(900 * time.Millisecond)
	rep := only[Reply](t, h.complete(d, OutcomeTimeout))
	wantText(t, rep.Text, `Request timed out, [rc=rc-1;status="executing";dap=[rdb-eu:5080]]`)
}

// TestAggTimedOutTimesOutNow: the Agg reports its own execution timed out
// (its clock leads): the RC answers the timeout at once, "aggregating".
func TestAggTimedOutTimesOutNow(t *testing.T) {
	h := newHarness(t, Config{})
	h.register("rdb-eu", lbl("region", "eu"))
	d := dispatchedTo(t, h.request("q1", "trade", nil, t0, t0+hour, time.Second), "rdb-eu")
	h.advance(100 * time.Millisecond)
	only[AggExpect](t, h.complete(d, OutcomeOK))
	h.advance(800 * time.Millisecond)
	// A timeout from another Agg than the request's changes nothing.
	none[Reply](t, h.step(AggTimedOut{At: h.now, Request: "q1", Agg: "agg-other"}))
	rep := only[Reply](t, h.step(AggTimedOut{At: h.now, Request: "q1", Agg: "agg-1"}))
	wantText(t, rep.Text, `Request timed out, [rc=rc-1;status="aggregating";agg=agg-1]`)
	// Once answered, a second notice is ignored.
	none[Reply](t, h.step(AggTimedOut{At: h.now, Request: "q1", Agg: "agg-1"}))
}
