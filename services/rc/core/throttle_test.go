package core

import (
	"strings"
	"testing"
	"time"
)

// throttle reports that the DAP of d was throttled by endpoint until the
// given time.
func (h *harness) throttle(d Dispatch, endpoint string, until int64) []Command {
	h.t.Helper()
	return h.step(DAPThrottled{At: h.now, Request: d.Portion.Request, Portion: d.Portion.ID, DAP: d.DAP, Endpoint: endpoint, Until: until})
}

func other(id string) string {
	if id == "a" {
		return "b"
	}
	return "a"
}

// The core scenario: a label set served by two replicas, "a" and
// "b", whose sources call the same remote endpoint "ads".
func TestThrottledDAPPausesItsEndpointAndRequeuesTheWork(t *testing.T) {
	h := newHarness(t, Config{})
	h.register("a", lbl("region", "eu"))
	h.register("b", lbl("region", "eu"))

	// 1. One DAP is throttled: the replica takes the work at once, with no retry.
	first := dispatches(h.request("q1", "trade", nil, t0, t0+hour, time.Minute))
	if len(first) != 1 {
		t.Fatalf("want one dispatch, got %v", first)
	}
	x := first[0]
	pauseEnd := h.now + int64(15*time.Second)
	y := dispatchedTo(t, h.throttle(x, "ads", pauseEnd), other(x.DAP))
	if y.Portion.Range.Start != x.Portion.Range.Start || y.Portion.Range.End != x.Portion.Range.End || y.Portion.Attempt != x.Portion.Attempt ||
		y.Retries != 0 || y.QueuedAt != x.QueuedAt {
		t.Fatalf("requeued portion %+v, first %+v: want the same range and attempt, its age, no retry", y, x)
	}

	// 2. The replica is throttled too: both are paused, the portion waits.
	none[*Dispatch](t, h.throttle(y, "ads", pauseEnd))
	if at, ok := h.c.NextDeadline(); !ok || at != pauseEnd {
		t.Fatalf("next deadline %d %v: want the pause end %d", at, ok, pauseEnd)
	}
	h.now = pauseEnd - 1
	none[*Dispatch](t, h.tick())

	// 3. After the pause it runs, still not as a retry, and the request completes.
	h.now = pauseEnd
	z := dispatches(h.tick())
	if len(z) != 1 || z[0].Retries != 0 || z[0].Portion.Attempt != x.Portion.Attempt {
		t.Fatalf("after the pause: %s; want one dispatch, no retry", describe(toCommands(z)))
	}
	only[AggExpect](t, h.complete(z[0], OutcomeOK))
	if st, _ := h.c.Stats(); st.Retries != 0 {
		t.Fatalf("%d retries counted, want 0", st.Retries)
	}

	// 4. The core now knows both call "ads": throttling one pauses both.
	d := dispatches(h.request("q2", "trade", nil, t0, t0+hour, time.Minute))[0]
	pause2 := h.now + int64(10*time.Second)
	none[*Dispatch](t, h.throttle(d, "ads", pause2))
	h.now = pause2
	if got := dispatches(h.tick()); len(got) != 1 {
		t.Fatalf("after the shared pause: %s", describe(toCommands(got)))
	}
}

// A deadline inside the pause: the timeout message names the pause as the
// reason for both DAPs, in the seed's form.
func TestTimeoutInsidePauseNamesThePause(t *testing.T) {
	h := newHarness(t, Config{Addr: "rc-1:5000"})
	h.register("a", lbl("region", "eu"))
	h.register("b", lbl("region", "eu"))
	x := dispatches(h.request("q1", "trade", nil, t0, t0+hour, 5*time.Second))[0]
	until := h.now + int64(time.Minute)
	y := dispatchedTo(t, h.throttle(x, "ads", until), other(x.DAP))
	none[*Dispatch](t, h.throttle(y, "ads", until))
	h.advance(5 * time.Second)
	rep := only[Reply](t, h.tick())
	want := `reason="Paused by downstream rate limit until 2022-12-05T00:01:00.000000000Z";dap=[a:5080,b:5080]`
	t.Log(rep.Text)
	if rep.Kind != ReplyTimeout || !strings.Contains(rep.Text, strings.ReplaceAll(want, `"`, `\"`)) || rep.Retries != 0 {
		t.Fatalf("timeout %q (retries %d); want it to contain %s", rep.Text, rep.Retries, want)
	}
}

// A DAP that throttles with no endpoint key pauses alone; a stale report
// (a superseded portion) still pauses the DAP; a lost DAP is forgotten.
func TestThrottleEdgeCases(t *testing.T) {
	h := newHarness(t, Config{})
	h.register("a", lbl("region", "eu"))
	h.register("b", lbl("region", "eu"))
	x := dispatches(h.request("q1", "trade", nil, t0, t0+hour, time.Minute))[0]
	until := h.now + int64(time.Second)
	y := dispatchedTo(t, h.throttle(x, "", until), other(x.DAP))
	// A duplicate of the report changes nothing.
	none[*Dispatch](t, h.throttle(x, "", until))
	only[AggExpect](t, h.complete(y, OutcomeOK))
	// The endpoint is learned from a, then a is lost: b's throttle pauses b alone.
	d := dispatches(h.request("q2", "trade", nil, t0, t0+hour, time.Minute))[0]
	h.now = until
	h.tick()
	e := dispatchedTo(t, h.throttle(d, "ads", h.now+int64(time.Hour)), other(d.DAP))
	h.step(DAPLost{At: h.now, DAP: d.DAP})
	none[*Dispatch](t, h.throttle(e, "ads", h.now+int64(time.Second)))
	h.advance(time.Second)
	dispatchedTo(t, h.tick(), e.DAP)
	// An absurd pause is capped at an hour.
	h2 := newHarness(t, Config{})
	h2.register("a", lbl("region", "eu"))
	f := dispatches(h2.request("q", "trade", nil, t0, t0+hour, 2*time.Hour))[0]
	h2.throttle(f, "ads", MaxTS)
	if at, ok := h2.c.NextDeadline(); !ok || at != h2.now+int64(time.Hour) {
		t.Fatalf("next deadline %d: want the pause capped at an hour", at)
	}
}

func toCommands(ds []Dispatch) []Command {
	out := make([]Command, len(ds))
	for i, d := range ds {
		out[i] = &d
	}
	return out
}
