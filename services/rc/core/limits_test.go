package core

import (
	"strings"
	"testing"
	"time"

	"github.com/sg-project/sg/services/limits"
)

func (h *harness) requestFrom(id, caller string, sel Selector) []Command {
	h.t.Helper()
	return h.step(RequestArrived{At: h.now, Request: Request{ID: id, API: "getData", Table: "trade", Labels: sel,
		Range: TimeRange{Start: t0, End: t0 + hour}, Deadline: h.now + int64(time.Minute), Agg: "agg-1", Caller: caller}})
}

// The RC's queue limit: a request that would leave portions queued beyond it
// is refused RATE_LIMITED with the limit's name and when to come back; one
// that waits for nothing is admitted whatever the queue holds.
func TestQueueLimitRefusesAtAdmission(t *testing.T) {
	h := newHarness(t, Config{MaxQueued: 1})
	h.register("eu", lbl("region", "eu"), unavailable())
	h.register("us", lbl("region", "us"), concurrency(2))
	none[Reply](t, h.requestFrom("q1", "a", Selector{"region": {"eu"}}))
	rep := only[Reply](t, h.requestFrom("q2", "b", Selector{"region": {"eu"}}))
	if rep.Kind != ReplyRateLimited || rep.Limit != limits.RCQueued || rep.RetryAfter < 1 ||
		rep.Text != "Request refused: RC rc-1 has 1 portions queued, over its limit rc_queued_portions=1 (SG_RC_MAX_QUEUED)" {
		t.Fatalf("%+v", rep)
	}
	if st, _ := h.c.Stats(); st.QueueLength != 1 {
		t.Fatalf("queue length %d: the refused request's items must go", st.QueueLength)
	}
	// Both label sets: us is dispatched at once, then eu would wait: refused,
	// and the us portion is stopped.
	out := h.requestFrom("q3", "b", nil)
	dispatchedTo(t, out, "us")
	if rep := only[Reply](t, out); rep.Kind != ReplyRateLimited {
		t.Fatalf("%+v", rep)
	}
	if cd := only[CancelDAP](t, out); cd.DAP != "us" || cd.Request != "q3" {
		t.Fatalf("%+v", cd)
	}
	only[CancelAgg](t, out)
	// Waiting for nothing: admitted.
	dispatchedTo(t, h.requestFrom("q4", "b", Selector{"region": {"us"}}), "us")
}

// The per-caller share of the queue, "" being a caller too.
func TestPerCallerQueueLimit(t *testing.T) {
	h := newHarness(t, Config{MaxQueuedPerCaller: 1})
	h.register("eu", lbl("region", "eu"), unavailable())
	none[Reply](t, h.requestFrom("q1", "a", nil))
	rep := only[Reply](t, h.requestFrom("q2", "a", nil))
	if rep.Kind != ReplyRateLimited || rep.Limit != limits.CallerQueued || !strings.Contains(rep.Text, `caller "a" has 1 portions queued`) {
		t.Fatalf("%+v", rep)
	}
	none[Reply](t, h.requestFrom("q3", "b", nil))
	none[Reply](t, h.requestFrom("q4", "", nil))
	only[Reply](t, h.requestFrom("q5", "", nil))
	// q1 leaves: a may queue again.
	only[Reply](t, h.step(RequestCancelled{At: h.now, Request: "q1"}))
	none[Reply](t, h.requestFrom("q6", "a", nil))
}

// A DAP refusing a portion over its queue limit: the caller gets RATE_LIMITED
// naming the DAP's limit; the rest of the request is stopped.
func TestDAPRefusalIsRateLimited(t *testing.T) {
	h := newHarness(t, Config{})
	h.register("eu", lbl("region", "eu"))
	h.register("us", lbl("region", "us"))
	out := h.request("q1", "trade", nil, t0, t0+hour, time.Minute)
	eu, us := dispatchedTo(t, out, "eu"), dispatchedTo(t, out, "us")
	out = h.step(PortionCompleted{At: h.now, Request: "q1", Portion: eu.Portion.ID, DAP: "eu", Outcome: OutcomeRefused,
		Message: "DAP eu has 1000 portions waiting, its limit dap_queue=1000 (SG_DAP_MAX_QUEUE)"})
	rep := only[Reply](t, out)
	if rep.Kind != ReplyRateLimited || rep.Limit != limits.DAPQueue || rep.RetryAfter < 1 ||
		rep.Text != "Request refused: DAP eu has 1000 portions waiting, its limit dap_queue=1000 (SG_DAP_MAX_QUEUE)" {
		t.Fatalf("%+v", rep)
	}
	if cd := only[CancelDAP](t, out); cd.DAP != "us" {
		t.Fatalf("%+v", cd)
	}
	none[Reply](t, h.complete(us, OutcomeError))
}
