package core

import (
	"strings"
	"testing"
	"time"
)

const hour = int64(time.Hour)

// A fleet of two regions with three tiers each: hdb [-inf, t0), idb
// [t0, t0+12h), rdb [t0+12h, +inf).
func tiered(h *harness, regions ...string) {
	for _, r := range regions {
		h.register("hdb-"+r, lbl("region", r), tier(TierHDB), purview(MinTS, t0))
		h.register("idb-"+r, lbl("region", r), tier(TierIDB), purview(t0, t0+12*hour))
		h.register("rdb-"+r, lbl("region", r), tier(TierRDB), purview(t0+12*hour, MaxTS))
	}
}

func TestSplitByLabelSetAndTime(t *testing.T) {
	h := newHarness(t, Config{})
	tiered(h, "eu", "us")
	out := h.request("q1", "trade", nil, t0-hour, t0+13*hour, time.Minute)
	if n := len(dispatches(out)); n != 6 {
		t.Fatalf("want 6 dispatches (2 label sets x 3 tiers), got %s", describe(out))
	}
	for _, r := range []string{"eu", "us"} {
		if d := dispatchedTo(t, out, "hdb-"+r); d.Portion.Range.Start != t0-hour || d.Portion.Range.End != t0 {
			t.Errorf("hdb-%s: %s", r, describe(out))
		}
		if d := dispatchedTo(t, out, "idb-"+r); d.Portion.Range.Start != t0 || d.Portion.Range.End != t0+12*hour {
			t.Errorf("idb-%s: %s", r, describe(out))
		}
		if d := dispatchedTo(t, out, "rdb-"+r); d.Portion.Range.Start != t0+12*hour || d.Portion.Range.End != t0+13*hour {
			t.Errorf("rdb-%s: %s", r, describe(out))
		}
	}
	// A range inside one tier goes to that tier alone.
	h2 := newHarness(t, Config{})
	tiered(h2, "eu")
	out = h2.request("q2", "trade", Selector{"region": {"eu"}}, t0+hour, t0+2*hour, time.Minute)
	if d := dispatchedTo(t, out, "idb-eu"); d.Portion.Range.Start != t0+hour || d.Portion.Range.End != t0+2*hour || len(dispatches(out)) != 1 {
		t.Fatalf("got %s", describe(out))
	}
}

func TestSelectorCrossProductAndOmittedKeys(t *testing.T) {
	h := newHarness(t, Config{})
	for _, r := range []string{"eu", "us"} {
		for _, d := range []string{"a", "b"} {
			h.register("dap-"+r+d, lbl("region", r, "desk", d), concurrency(4))
		}
	}
	// Omitted desk: every known desk of region eu.
	out := h.request("q1", "trade", Selector{"region": {"eu"}}, t0, t0+hour, time.Minute)
	if len(dispatches(out)) != 2 {
		t.Fatalf("want eu/a and eu/b, got %s", describe(out))
	}
	// Lists give the cross product.
	out = h.request("q2", "trade", Selector{"region": {"eu", "us"}, "desk": {"b"}}, t0, t0+hour, time.Minute)
	dispatchedTo(t, out, "dap-eub")
	dispatchedTo(t, out, "dap-usb")
	if len(dispatches(out)) != 2 {
		t.Fatalf("got %s", describe(out))
	}
}

func TestUnknownLabelSetFailsAtOnce(t *testing.T) {
	h := newHarness(t, Config{})
	tiered(h, "eu")
	out := h.request("q1", "trade", Selector{"region": {"eu", "mars"}}, t0, t0+hour, time.Minute)
	rep := only[Reply](t, out)
	if rep.Kind != ReplyNoResources || rep.Text != `No DAP has label set {region:mars} for table "trade"` {
		t.Fatalf("reply %+v", rep)
	}
	none[*Dispatch](t, out)
	// Nothing of the failed request stays queued.
	if st, _ := h.c.Stats(); st.QueueLength != 0 {
		t.Fatalf("queue %d", st.QueueLength)
	}
}

func TestBadRequests(t *testing.T) {
	h := newHarness(t, Config{})
	tiered(h, "eu")
	cases := []struct {
		name string
		req  Request
		kind ReplyKind
		text string
	}{
		{"unknown table", Request{ID: "a", Table: "nope", Range: TimeRange{Start: t0, End: t0 + 1}, Deadline: t0 + hour}, ReplyNoResources, `No DAP serves table "nope"`},
		{"empty range", Request{ID: "b", Table: "trade", Range: TimeRange{Start: t0, End: t0}, Deadline: t0 + hour}, ReplyBadRequest, "Invalid time range: startTS 2022-12-05T00:00:00.000000000Z is not before endTS 2022-12-05T00:00:00.000000000Z"},
		{"no id", Request{Table: "trade", Range: TimeRange{Start: t0, End: t0 + 1}, Deadline: t0 + hour}, ReplyBadRequest, "Request has no id"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rep := only[Reply](t, h.step(RequestArrived{At: h.now, Request: tc.req}))
			if rep.Kind != tc.kind || rep.Text != tc.text {
				t.Fatalf("got %+v", rep)
			}
		})
	}
}

func TestUncoveredRangeWaitsAndRegistrationDequeues(t *testing.T) {
	h := newHarness(t, Config{})
	h.register("idb-eu", lbl("region", "eu"), purview(t0, t0+12*hour))
	// [t0-2h, t0+1h): idb covers [t0, t0+1h); [t0-2h, t0) waits.
	out := h.request("q1", "trade", nil, t0-2*hour, t0+hour, time.Minute)
	dispatchedTo(t, out, "idb-eu")
	none[Reply](t, out)
	// An hdb covering only [t0-1h, t0) registers: it takes the intersection,
	// the leftover [t0-2h, t0-1h) stays queued.
	h.advance(time.Second)
	out = h.register("hdb-eu", lbl("region", "eu"), purview(t0-hour, t0))
	d := dispatchedTo(t, out, "hdb-eu")
	if d.Portion.Range.Start != t0-hour || d.Portion.Range.End != t0 {
		t.Fatalf("got %s", describe(out))
	}
	// The leftover keeps its age: it is still the request's arrival.
	h.advance(time.Second)
	out = h.register("hdb2-eu", lbl("region", "eu"), purview(MinTS, t0-hour))
	if d := dispatchedTo(t, out, "hdb2-eu"); d.QueuedAt != t0 || d.Portion.Range.Start != t0-2*hour || d.Portion.Range.End != t0-hour {
		t.Fatalf("got %s", describe(out))
	}
}

func TestBusyDAPQueuesAndCompletionDequeuesOldestFirst(t *testing.T) {
	h := newHarness(t, Config{})
	h.register("rdb-eu", lbl("region", "eu"))
	first := dispatchedTo(t, h.request("q1", "trade", nil, t0, t0+hour, time.Minute), "rdb-eu")
	h.advance(time.Second)
	none[*Dispatch](t, h.request("q2", "trade", nil, t0, t0+hour, time.Minute))
	h.advance(time.Second)
	none[*Dispatch](t, h.request("q3", "trade", nil, t0, t0+hour, time.Minute))
	h.advance(time.Second)
	out := h.complete(first, OutcomeOK)
	if ae := only[AggExpect](t, out); ae.Request != "q1" || len(ae.Portions) != 1 || ae.Portions[0].PortionID != first.Portion.ID {
		t.Fatalf("agg expect %+v", ae)
	}
	if d := dispatchedTo(t, out, "rdb-eu"); d.Portion.Request != "q2" {
		t.Fatalf("oldest first: want q2, got %s", describe(out))
	}
}

func TestStatusUpdateDequeues(t *testing.T) {
	h := newHarness(t, Config{})
	h.register("rdb-eu", lbl("region", "eu"), unavailable())
	none[*Dispatch](t, h.request("q1", "trade", nil, t0, t0+hour, time.Minute))
	h.advance(time.Second)
	dispatchedTo(t, h.status(dapInfo("rdb-eu", lbl("region", "eu"))), "rdb-eu")
}

func TestUpToDateAndLockedVintage(t *testing.T) {
	h := newHarness(t, Config{})
	h.register("a", lbl("region", "eu"), vintage(5), purview(MinTS, t0))
	h.register("b", lbl("region", "eu"), vintage(4), purview(t0, MaxTS))
	// b is behind the label set's highest vintage (5): not up to date.
	out := h.request("q1", "trade", nil, t0-hour, t0+hour, time.Minute)
	dispatchedTo(t, out, "a") // locks 5
	if len(dispatches(out)) != 1 {
		t.Fatalf("b must wait: %s", describe(out))
	}
	// b catches up to 5: it can now serve q1 at the locked 5.
	h.advance(time.Second)
	if d := dispatchedTo(t, h.vintageTo("b", 5), "b"); d.Portion.Vintage != 5 {
		t.Fatalf("vintage %d", d.Portion.Vintage)
	}
}

func TestRetryOnRetryAnswerRedoesWholeLabelSet(t *testing.T) {
	h := newHarness(t, Config{})
	tiered(h, "eu")
	// Replicas for the new attempt, since the first DAPs stay busy with the
	// superseded one until they report.
	h.register("idb2-eu", lbl("region", "eu"), tier(TierIDB), purview(t0, t0+12*hour))
	out := h.request("q1", "trade", nil, t0-hour, t0+13*hour, time.Minute)
	hdb := dispatchedTo(t, out, "hdb-eu")
	idb := dispatches(out)[1]
	rdb := dispatchedTo(t, out, "rdb-eu")
	h.advance(time.Second)
	h.complete(hdb, OutcomeOK)
	out = h.complete(rdb, OutcomeRetry)
	rn := only[RetryNoted](t, out)
	if rn.Attempt != 1 || !strings.Contains(rn.Reason, "RETRY") {
		t.Fatalf("retry %+v", rn)
	}
	// All tiers are redone at attempt 1: hdb-eu (done, free) and rdb-eu
	// (answered, free) take theirs; the idb DAP still running attempt 0 is
	// not used, its replica is.
	for _, d := range dispatches(out) {
		if d.Portion.Attempt != 1 || d.Retries != 1 {
			t.Fatalf("attempt: %s", describe(out))
		}
		if d.DAP == idb.DAP {
			t.Fatalf("DAP running the previous attempt was used: %s", describe(out))
		}
	}
	if len(dispatches(out)) != 3 {
		t.Fatalf("want 3 tiers redone, got %s", describe(out))
	}
	// The superseded idb portion completing changes nothing but its slot.
	out = h.complete(idb, OutcomeOK)
	none[AggExpect](t, out)
}

func TestMaxRetriesFailsTheRequest(t *testing.T) {
	h := newHarness(t, Config{MaxRetry: 2})
	h.register("rdb-eu", lbl("region", "eu"))
	d := dispatchedTo(t, h.request("q1", "trade", nil, t0, t0+hour, time.Minute), "rdb-eu")
	for i := uint32(1); i <= 2; i++ {
		h.advance(time.Second)
		d = dispatchedTo(t, h.complete(d, OutcomeRetry), "rdb-eu")
		if d.Portion.Attempt != i {
			t.Fatalf("attempt %d", d.Portion.Attempt)
		}
	}
	rep := only[Reply](t, h.complete(d, OutcomeRetry))
	if rep.Kind != ReplyMaxRetries || !strings.Contains(rep.Text, "after 2 retries (maximum 2") || rep.Retries != 3 {
		t.Fatalf("reply %+v", rep)
	}
}

func TestVintageRetryWhenAllDAPsAboveLock(t *testing.T) {
	h := newHarness(t, Config{})
	h.register("a", lbl("region", "eu"), vintage(1), purview(MinTS, t0))
	h.register("b", lbl("region", "eu"), vintage(1), purview(MinTS, t0))
	h.register("c", lbl("region", "eu"), vintage(1), purview(t0, MaxTS), unavailable())
	out := h.request("q1", "trade", nil, t0-hour, t0+hour, time.Minute)
	dispatchedTo(t, out, "a") // locks 1; [t0, t0+1h) queued for c
	h.advance(time.Second)
	none[RetryNoted](t, h.vintageTo("b", 2))
	// Every DAP of the label set is now above the lock (2 > 1): retry.
	none[RetryNoted](t, h.vintageTo("a", 2))
	rn := only[RetryNoted](t, h.vintageTo("c", 2))
	if rn.Labels["region"] != "eu" {
		t.Fatalf("%+v", rn)
	}
}

func TestSQLDateRolloverRestartsWholeRequest(t *testing.T) {
	h := newHarness(t, Config{})
	h.now = t0 + 23*hour + int64(59*time.Minute)
	h.register("eu", lbl("region", "eu"), unavailable())
	h.register("us", lbl("region", "us"))
	out := h.step(RequestArrived{At: h.now, Request: Request{ID: "s1", API: "sql", Table: "trade", Range: TimeRange{Start: t0, End: t0 + hour}, Deadline: h.now + int64(time.Hour), SQL: true}})
	us := dispatchedTo(t, out, "us")
	// Past midnight, eu becomes available: dequeueing the SQL item after a
	// date change restarts the whole request.
	h.advance(2 * time.Minute)
	out = h.status(dapInfo("eu", lbl("region", "eu")))
	rn := only[RetryNoted](t, out)
	if !rn.Whole {
		t.Fatalf("want whole restart, got %+v", rn)
	}
	if d := dispatchedTo(t, out, "eu"); d.Portion.Attempt != 1 {
		t.Fatalf("%s", describe(out))
	}
	// us still runs attempt 0 of its label set; it gets attempt 1 after.
	if d := dispatchedTo(t, h.complete(us, OutcomeOK), "us"); d.Portion.Attempt != 1 {
		t.Fatal("us attempt 1 not dispatched")
	}
}

func TestSQLRetryAfterPurviewChangeRestartsWholeRequest(t *testing.T) {
	h := newHarness(t, Config{})
	h.register("eu", lbl("region", "eu"))
	h.register("us", lbl("region", "us"))
	out := h.step(RequestArrived{At: h.now, Request: Request{ID: "s1", API: "sql", Table: "trade", Range: TimeRange{Start: t0, End: t0 + hour}, Deadline: h.now + int64(time.Hour), SQL: true}})
	eu := dispatchedTo(t, out, "eu")
	h.advance(time.Second)
	h.status(dapInfo("us", lbl("region", "us"), func(d *DAPInfo) { d.PurviewVersion = 2 }))
	rn := only[RetryNoted](t, h.complete(eu, OutcomeRetry))
	if !rn.Whole {
		t.Fatalf("want whole restart after a purview change, got %+v", rn)
	}
}

func TestLostDAPWorkIsRequeued(t *testing.T) {
	h := newHarness(t, Config{})
	h.register("a", lbl("region", "eu"))
	h.register("b", lbl("region", "eu"))
	q1a := dispatchedTo(t, h.request("q1", "trade", nil, t0, t0+hour, time.Minute), "a")
	h.advance(time.Second)
	q2b := dispatchedTo(t, h.request("q2", "trade", nil, t0, t0+hour, time.Minute), "b")
	h.advance(time.Second)
	out := h.step(DAPLost{At: h.now, DAP: "a"})
	none[Reply](t, out)
	none[*Dispatch](t, out) // b is busy: q1's portion waits in the queue
	if st, _ := h.c.Stats(); st.QueueLength != 1 {
		t.Fatalf("queue %d, want the lost portion requeued", st.QueueLength)
	}
	h.advance(time.Second)
	out = h.complete(q2b, OutcomeOK)
	again := dispatchedTo(t, out, "b")
	if again.Portion.Request != "q1" || again.Portion.Range.Start != q1a.Portion.Range.Start || again.Portion.Range.End != q1a.Portion.Range.End {
		t.Fatalf("got %s", describe(out))
	}
	// A late answer from the lost DAP is stale; the Agg is told to expect
	// only the replacement.
	h.complete(q1a, OutcomeOK)
	ae := only[AggExpect](t, h.complete(again, OutcomeOK))
	if len(ae.Portions) != 1 || ae.Portions[0].PortionID != again.Portion.ID {
		t.Fatalf("agg expect %+v", ae)
	}
}

func TestShardedAndUnshardedTables(t *testing.T) {
	h := newHarness(t, Config{})
	tiered(h, "eu", "us")
	// Sharded, not partitioned: one portion per label set, no time split.
	out := h.request("q1", "ref", nil, t0, t0+hour, time.Minute)
	if len(dispatches(out)) != 2 {
		t.Fatalf("want one portion per label set, got %s", describe(out))
	}
	for _, d := range dispatches(out) {
		if d.Portion.Range.Start != MinTS || d.Portion.Range.End != MaxTS {
			t.Fatalf("no time split expected: %s", describe(out))
		}
	}
	// Neither: one portion, any one DAP that holds the table.
	out = h.request("q2", "cfg", nil, 0, 0, time.Minute)
	if len(dispatches(out)) != 1 {
		t.Fatalf("want one portion, got %s", describe(out))
	}
}

func TestDAPErrorMakesRequestInactiveUntilAggAnswers(t *testing.T) {
	h := newHarness(t, Config{})
	tiered(h, "eu")
	out := h.request("q1", "trade", nil, t0-hour, t0+13*hour, time.Minute)
	hdb := dispatchedTo(t, out, "hdb-eu")
	out = h.step(PortionCompleted{At: h.now, Request: "q1", Portion: hdb.Portion.ID, DAP: "hdb-eu", Outcome: OutcomeError, Code: 10, Message: "column sz not found"})
	f := only[AggFail](t, out)
	if f.Agg != "agg-1" || f.Code != 10 || f.Message != "column sz not found" {
		t.Fatalf("%+v", f)
	}
	if _, by := h.c.Stats(); by[StatusInactive] != 1 {
		t.Fatalf("by status %v", by)
	}
	h.step(AggDone{At: h.now, Request: "q1"})
	if _, by := h.c.Stats(); len(by) != 0 {
		t.Fatalf("request not ended: %v", by)
	}
}

func TestCancelAndPause(t *testing.T) {
	h := newHarness(t, Config{})
	h.register("a", lbl("region", "eu"))
	h.step(DAPPaused{At: h.now, DAP: "a", Until: h.now + int64(time.Second)})
	none[*Dispatch](t, h.request("q1", "trade", nil, t0, t0+hour, time.Minute))
	if at, ok := h.c.NextDeadline(); !ok || at != h.now+int64(time.Second) {
		t.Fatalf("next deadline %d %v: want the pause end", at, ok)
	}
	h.advance(time.Second)
	d := dispatchedTo(t, h.tick(), "a")
	none[*Dispatch](t, h.request("q2", "trade", nil, t0, t0+hour, time.Minute))
	rep := only[Reply](t, h.step(RequestCancelled{At: h.now, Request: "q2", Reason: "caller went away"}))
	if rep.Kind != ReplyCancelled {
		t.Fatalf("%+v", rep)
	}
	// q2 is gone from the queue: completing q1 dispatches nothing.
	none[*Dispatch](t, h.complete(d, OutcomeOK))
}

func TestTimeoutAnsweredAtTheDeadline(t *testing.T) {
	h := newHarness(t, Config{})
	h.register("a", lbl("region", "eu"), unavailable())
	h.request("q1", "trade", nil, t0, t0+hour, 5*time.Second)
	at, ok := h.c.NextDeadline()
	if !ok || at != t0+int64(5*time.Second) {
		t.Fatalf("next deadline %v %v", at, ok)
	}
	h.now = at - 1
	none[Reply](t, h.tick())
	h.now = at
	rep := only[Reply](t, h.tick())
	if rep.Kind != ReplyTimeout {
		t.Fatalf("%+v", rep)
	}
	if _, ok := h.c.NextDeadline(); ok {
		t.Fatal("no deadline should remain")
	}
}

// A completion with an outcome the core does not know (zero, or past the
// last) fails the request through its Agg, as an error does: it neither
// counts as a success nor leaves the request waiting.
func TestUnknownOutcomeIsAnError(t *testing.T) {
	for _, o := range []Outcome{0, OutcomeRefused + 1} {
		h := newHarness(t, Config{})
		h.register("a", lbl("region", "eu"))
		d := dispatchedTo(t, h.request("q1", "trade", nil, t0, t0+hour, time.Minute), "a")
		out := h.complete(d, o)
		none[AggExpect](t, out)
		if f := only[AggFail](t, out); f.Request != "q1" {
			t.Fatalf("outcome %d: %+v", o, f)
		}
	}
}
