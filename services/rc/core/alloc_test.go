package core

import (
	"strconv"
	"testing"
	"time"
)

// allocBudgetRC is the most a small request may allocate in the core, from
// arrival to the Agg's answer: one label set, one DAP, one portion (arrive,
// dispatch, track, complete, AggDone), the request id included. Measured 35 (issue 10); the budget
// leaves room for a field or two, not for a new per-request structure.
const allocBudgetRC = 40

// A small request's allocations in the scheduler do not grow past the budget.
func TestAllocBudgetSmallRequest(t *testing.T) {
	c := New(Config{Self: "rc-1", Aggs: []string{"agg-1"}})
	now := t0
	c.Step(DAPRegistered{At: now, DAP: dapInfo("d1", Labels{"region": "eu"})})
	n := 0
	allocs := testing.AllocsPerRun(200, func() {
		n++
		now += int64(time.Millisecond)
		id := "q-" + strconv.Itoa(n)
		var d Dispatch
		for _, cmd := range c.Step(RequestArrived{At: now, Request: Request{ID: id, API: "getData", Table: "trade",
			Labels: Selector{"region": {"eu"}}, Start: t0, End: t0 + hour, Deadline: now + int64(time.Minute), Agg: "agg-1"}}) {
			if x, ok := cmd.(Dispatch); ok {
				d = x
			}
		}
		if d.DAP == "" {
			t.Fatal("nothing dispatched")
		}
		c.Step(PortionCompleted{At: now, Request: id, Portion: d.Portion.ID, DAP: d.DAP, Outcome: OutcomeOK})
		c.Step(AggDone{At: now, Request: id})
	})
	t.Logf("allocations per small request in the RC core: %.0f (budget %d)", allocs, allocBudgetRC)
	if allocs > allocBudgetRC {
		t.Fatalf("a small request allocates %.0f times in the RC core, budget %d", allocs, allocBudgetRC)
	}
	if st, _ := c.Stats(); st.Ended != n {
		t.Fatalf("%d requests ended, want %d", st.Ended, n)
	}
}

// BenchmarkSmallRequestCore is the RC core's share of a small request: arrive,
// dispatch, complete, AggDone (go test ./services/rc/core -run '^$' -bench SmallRequestCore).
func BenchmarkSmallRequestCore(b *testing.B) {
	c := New(Config{Self: "rc-1", Aggs: []string{"agg-1"}})
	now := t0
	c.Step(DAPRegistered{At: now, DAP: dapInfo("d1", Labels{"region": "eu"})})
	b.ReportAllocs()
	n := 0
	for b.Loop() {
		n++
		now += int64(time.Millisecond)
		id := "q-" + strconv.Itoa(n)
		var d Dispatch
		for _, cmd := range c.Step(RequestArrived{At: now, Request: Request{ID: id, API: "getData", Table: "trade",
			Labels: Selector{"region": {"eu"}}, Start: t0, End: t0 + hour, Deadline: now + int64(time.Minute), Agg: "agg-1"}}) {
			if x, ok := cmd.(Dispatch); ok {
				d = x
			}
		}
		c.Step(PortionCompleted{At: now, Request: id, Portion: d.Portion.ID, DAP: d.DAP, Outcome: OutcomeOK})
		c.Step(AggDone{At: now, Request: id})
	}
}
