package core

import (
	"testing"
	"time"
)

// timeoutText steps to the request's deadline and returns the ai text.
func (h *harness) timeoutText() string {
	h.t.Helper()
	at, ok := h.c.NextDeadline()
	if !ok {
		h.t.Fatal("no deadline pending")
	}
	h.now = at
	rep := only[Reply](h.t, h.tick())
	if rep.Kind != ReplyTimeout {
		h.t.Fatalf("reply %+v", rep)
	}
	return rep.Text
}

func wantText(t *testing.T, got, want string) {
	t.Helper()
	if got != want {
		t.Fatalf("timeout text\n got: %s\nwant: %s", got, want)
	}
}

const (
	rangeHour = `startTS=2022-12-05T00:00:00.000000000Z;endTS=2022-12-05T01:00:00.000000000Z`
)

func TestTimeoutAllocatingNoDAPCovers(t *testing.T) {
	h := newHarness(t, Config{})
	h.register("hdb", lbl("region", "eu"), purview(MinTS, t0))
	h.request("q1", "trade", nil, t0, t0+hour, time.Second)
	wantText(t, h.timeoutText(), `Request timed out, [rc=rc-1;status="allocating";queue="[labels={region:eu};`+rangeHour+`;reason=\"No DAP covers labels/time range\";dap=[]]"]`)
}

func TestTimeoutAllocatingBusy(t *testing.T) {
	h := newHarness(t, Config{})
	h.register("a", lbl("region", "eu"))
	h.request("q0", "trade", nil, t0, t0+hour, time.Minute)
	h.request("q1", "trade", nil, t0, t0+hour, time.Second)
	wantText(t, h.timeoutText(), `Request timed out, [rc=rc-1;status="allocating";queue="[labels={region:eu};`+rangeHour+`;reason=\"Busy executing another request\";dap=[a:5080]]"]`)
}

func TestTimeoutAllocatingUnavailable(t *testing.T) {
	h := newHarness(t, Config{})
	h.register("a", lbl("region", "eu"), unavailable())
	h.request("q1", "trade", nil, t0, t0+hour, time.Second)
	wantText(t, h.timeoutText(), `Request timed out, [rc=rc-1;status="allocating";queue="[labels={region:eu};`+rangeHour+`;reason=\"Unavailable for unspecified reasons\";dap=[a:5080]]"]`)
}

func TestTimeoutAllocatingGlobalVintage(t *testing.T) {
	h := newHarness(t, Config{})
	h.register("a", lbl("region", "eu"), vintage(19), purview(t0, MaxTS))
	h.register("b", lbl("region", "eu"), vintage(20), purview(MinTS, t0), unavailable())
	h.request("q1", "trade", nil, t0, t0+hour, time.Second)
	wantText(t, h.timeoutText(), `Request timed out, [rc=rc-1;status="allocating";queue="[labels={region:eu};`+rangeHour+`;reason=\"DAP reference vintage 19 does not match global reference vintage 20\";dap=[a:5080]]"]`)
}

func TestTimeoutAllocatingQueueVintageAndSeveralReasons(t *testing.T) {
	h := newHarness(t, Config{})
	h.register("a", lbl("region", "eu"), vintage(15), purview(MinTS, t0))
	h.register("b", lbl("region", "eu"), vintage(15), purview(t0, MaxTS), unavailable())
	h.register("c", lbl("region", "eu"), vintage(15), purview(t0, MaxTS))
	h.request("q0", "trade", nil, t0, t0+hour, time.Minute)      // c is busy
	h.request("q1", "trade", nil, t0-hour, t0+hour, time.Second) // a locks 15
	h.advance(time.Millisecond)
	// No retry: c, which covers the queued range, is still at the lock.
	none[RetryNoted](t, h.vintageTo("b", 19))
	wantText(t, h.timeoutText(), `Request timed out, [rc=rc-1;status="allocating";queue="`+
		`[labels={region:eu};`+rangeHour+`;reason=\"Unavailable for unspecified reasons, DAP reference vintage 19 does not match queue reference vintage 15\";dap=[b:5080]] `+
		`[labels={region:eu};`+rangeHour+`;reason=\"Busy executing another request\";dap=[c:5080]]"]`)
}

func TestTimeoutAllocatingPreviousAttempt(t *testing.T) {
	h := newHarness(t, Config{})
	h.register("a", lbl("region", "eu"), purview(MinTS, t0))
	h.register("b", lbl("region", "eu"), purview(t0, MaxTS))
	out := h.request("q1", "trade", nil, t0-hour, t0+hour, time.Second)
	b := dispatchedTo(t, out, "b")
	// b answers RETRY: the label set is redone; b takes its part again, a
	// has not reported back from attempt 0.
	out = h.complete(b, OutcomeRetry)
	only[RetryNoted](t, out)
	if d := dispatchedTo(t, out, "b"); d.Portion.Attempt != 1 {
		t.Fatalf("%s", describe(out))
	}
	wantText(t, h.timeoutText(), `Request timed out, [rc=rc-1;status="allocating";queue="[labels={region:eu};startTS=2022-12-04T23:00:00.000000000Z;endTS=2022-12-05T00:00:00.000000000Z;reason=\"Busy executing a previous version of this request (auto-retry)\";dap=[a:5080]]"]`)
}

func TestTimeoutAllocatingTimedOutBeforeDequeue(t *testing.T) {
	h := newHarness(t, Config{})
	h.register("a", lbl("region", "eu"), unavailable())
	h.request("q1", "trade", nil, t0, t0+hour, time.Second)
	// The DAP becomes available exactly at the deadline: the timeout wins.
	h.now = t0 + int64(time.Second)
	rep := only[Reply](t, h.status(dapInfo("a", lbl("region", "eu"))))
	wantText(t, rep.Text, `Request timed out, [rc=rc-1;status="allocating";queue="[labels={region:eu};`+rangeHour+`;reason=\"Timed out before we were able to dequeue\";dap=[a:5080]]"]`)
}

func TestTimeoutAllocatingTimedOutBeforeProcessingResponse(t *testing.T) {
	h := newHarness(t, Config{})
	h.register("a", lbl("region", "eu"))
	d := dispatchedTo(t, h.request("q0", "trade", nil, t0, t0+hour, time.Minute), "a")
	h.request("q1", "trade", nil, t0, t0+hour, time.Second)
	// a answers q0 exactly at q1's deadline: q1 times out first.
	h.now = t0 + int64(time.Second)
	out := h.complete(d, OutcomeOK)
	rep := only[Reply](t, out)
	wantText(t, rep.Text, `Request timed out, [rc=rc-1;status="allocating";queue="[labels={region:eu};`+rangeHour+`;reason=\"Timed out before we could process response\";dap=[a:5080]]"]`)
	none[*Dispatch](t, out)
}

func TestTimeoutUnknownReason(t *testing.T) {
	// Every check passes and nothing changed at the deadline: the scheduler
	// should have dispatched. Built by hand, since it indicates a bug.
	h := newHarness(t, Config{})
	h.register("a", lbl("region", "eu"), unavailable())
	h.request("q1", "trade", nil, t0, t0+hour, time.Second)
	h.c.fleet.byID["a"].Available = true // behind the core's back
	wantText(t, h.timeoutText(), `Request timed out, [rc=rc-1;status="allocating";queue="[labels={region:eu};`+rangeHour+`;reason=\"Unknown reason for not assigning request portion to DAP(s)\";dap=[a:5080]]"]`)
}

func TestTimeoutShardedAndUnshardedQueueBlocks(t *testing.T) {
	h := newHarness(t, Config{})
	h.register("a", lbl("region", "eu"), unavailable())
	h.request("q1", "ref", nil, 0, 0, time.Second)
	wantText(t, h.timeoutText(), `Request timed out, [rc=rc-1;status="allocating";queue="[labels={region:eu};reason=\"Unavailable for unspecified reasons\";dap=[a:5080]]"]`)
	h.request("q2", "cfg", nil, 0, 0, time.Second)
	wantText(t, h.timeoutText(), `Request timed out, [rc=rc-1;status="allocating";queue="[reason=\"Unavailable for unspecified reasons\";dap=[a:5080]]"]`)
}

func TestTimeoutExecuting(t *testing.T) {
	h := newHarness(t, Config{})
	tiered(h, "eu")
	h.request("q1", "trade", nil, t0-hour, t0+hour, time.Second)
	wantText(t, h.timeoutText(), `Request timed out, [rc=rc-1;status="executing";dap=[hdb-eu:5080,idb-eu:5080]]`)
}

func TestTimeoutExecutingResponseTooLate(t *testing.T) {
	h := newHarness(t, Config{})
	h.register("a", lbl("region", "eu"))
	d := dispatchedTo(t, h.request("q1", "trade", nil, t0, t0+hour, time.Second), "a")
	h.now = t0 + int64(time.Second)
	rep := only[Reply](t, h.complete(d, OutcomeOK))
	wantText(t, rep.Text, `Request timed out, [rc=rc-1;status="executing";respTooLate=[a:5080];agg=agg-1]`)
}

func TestTimeoutDAPGivesUpAtTheDeadline(t *testing.T) {
	h := newHarness(t, Config{})
	h.register("a", lbl("region", "eu"))
	d := dispatchedTo(t, h.request("q1", "trade", nil, t0, t0+hour, time.Second), "a")
	// The DAP's own deadline fires first: its TIMEOUT arrives before the
	// RC's timer. It was executing when time ran out, not late.
	h.now = t0 + int64(time.Second)
	rep := only[Reply](t, h.complete(d, OutcomeTimeout))
	wantText(t, rep.Text, `Request timed out, [rc=rc-1;status="executing";dap=[a:5080]]`)
}

func TestTimeoutAggregating(t *testing.T) {
	h := newHarness(t, Config{})
	h.register("a", lbl("region", "eu"))
	d := dispatchedTo(t, h.request("q1", "trade", nil, t0, t0+hour, time.Second), "a")
	only[AggExpect](t, h.complete(d, OutcomeOK))
	wantText(t, h.timeoutText(), `Request timed out, [rc=rc-1;status="aggregating";agg=agg-1]`)
}

func TestTimeoutInactive(t *testing.T) {
	h := newHarness(t, Config{})
	tiered(h, "eu")
	out := h.request("q1", "trade", nil, t0-hour, t0+hour, time.Second)
	hdb := dispatchedTo(t, out, "hdb-eu")
	h.step(PortionCompleted{At: h.now, Request: "q1", Portion: hdb.Portion.ID, DAP: "hdb-eu", Outcome: OutcomeError, Message: "boom"})
	wantText(t, h.timeoutText(), `Request timed out, [rc=rc-1;status="inactive";dap=[idb-eu:5080]]`)

	// All DAPs done: the Agg has the error to answer with.
	h2 := newHarness(t, Config{})
	h2.register("a", lbl("region", "eu"))
	d := dispatchedTo(t, h2.request("q1", "trade", nil, t0, t0+hour, time.Second), "a")
	h2.step(PortionCompleted{At: h2.now, Request: "q1", Portion: d.Portion.ID, DAP: "a", Outcome: OutcomeError, Message: "boom"})
	wantText(t, h2.timeoutText(), `Request timed out, [rc=rc-1;status="inactive";agg=agg-1]`)
}

func TestTimeoutDAPReportsTimeout(t *testing.T) {
	h := newHarness(t, Config{})
	h.register("a", lbl("region", "eu"))
	h.register("b", lbl("region", "us"))
	out := h.request("q1", "trade", nil, t0, t0+hour, time.Minute)
	a := dispatchedTo(t, out, "a")
	h.advance(time.Second)
	rep := only[Reply](t, h.complete(a, OutcomeTimeout))
	// a was executing when its time ran out (as at the deadline itself); a
	// lone reporting DAP would otherwise leave the primary "unknown".
	wantText(t, rep.Text, `Request timed out, [rc=rc-1;status="executing";dap=[a:5080,b:5080]]`)
}

func TestRenderEdgeForms(t *testing.T) {
	// The forms that indicate a bug cannot be reached by a correct core;
	// they are rendered from facts directly.
	got, err := tryRenderBlock(blockFacts{rc: "rc-1", status: "allocating"})
	if err != nil || got != `[rc=rc-1;status="allocating";error="Empty queue encountered"]` {
		t.Fatalf("empty queue: %q %v", got, err)
	}
	got, _ = tryRenderBlock(blockFacts{rc: "rc-1", status: "unknown"})
	if got != `[rc=rc-1;status="unknown"]` {
		t.Fatalf("unknown: %q", got)
	}
	if _, err := tryRenderBlock(blockFacts{rc: "rc-1", status: "bogus"}); err == nil {
		t.Fatal("want an error for an unknown status")
	}
}

func TestTimeoutComposeErrorFallback(t *testing.T) {
	h := newHarness(t, Config{})
	h.register("a", lbl("region", "eu"), unavailable())
	h.request("q1", "trade", nil, t0, t0+hour, time.Second)
	// Corrupt the state so that composing fails.
	h.c.requests["q1"].kind = TableKind("bogus")
	text := h.timeoutText()
	if text != "Request timed out, but error encountered composing message: queued portion of {region:eu} has unknown table kind \"bogus\"" {
		t.Fatalf("got %q", text)
	}
}
