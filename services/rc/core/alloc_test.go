package core

import (
	"runtime"
	"strconv"
	"testing"
	"time"
)

// allocBudgetRC is the most a small request may allocate in the core, from
// arrival to the Agg's answer: one label set, one DAP, one portion (arrive,
// dispatch, track, complete, AggDone), the request id included. Measured 35 (issue 10), then 25
// once a decision's commands, items and portion states stopped allocating each, then 13 once
// events stayed off the heap and ended requests' storage was reused, then 12 once AggExpect's
// portion list went into the step's storage; the budget leaves room for a field or two, not
// for a new per-request structure.
const allocBudgetRC = 17

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
			Labels: Selector{"region": {"eu"}}, Range: TimeRange{Start: t0, End: t0 + hour}, Deadline: now + int64(time.Minute), Agg: "agg-1"}}) {
			if x, ok := cmd.(*Dispatch); ok {
				d = *x
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
			Labels: Selector{"region": {"eu"}}, Range: TimeRange{Start: t0, End: t0 + hour}, Deadline: now + int64(time.Minute), Agg: "agg-1"}}) {
			if x, ok := cmd.(*Dispatch); ok {
				d = *x
			}
		}
		c.Step(PortionCompleted{At: now, Request: id, Portion: d.Portion.ID, DAP: d.DAP, Outcome: OutcomeOK})
		c.Step(AggDone{At: now, Request: id})
	}
}

// A decision allocates nothing: a DAP's completion frees its slot, the core
// picks the oldest item the DAP can serve, takes it out of the queue with its
// leftovers requeued, records the portion and says so (Dispatch, AggTrack).
// Measured in BenchmarkDispatch's shape, smaller, once every buffer has
// grown to the steady state; a completion that finishes its request (the
// Agg's expectation) is the request's cost, TestAllocBudgetSmallRequest's.
func TestDecisionAllocatesNothing(t *testing.T) {
	const (
		labelSets = 10
		queued    = 3000
		warm      = 20000
		measured  = 3000
	)
	c := New(Config{Self: "rc-1", Aggs: []string{"agg-1"}})
	now := t0
	tables := map[string]TableKind{"trade": TimePartitioned}
	for i := 0; i < 3*labelSets; i++ {
		info := DAPInfo{ID: "d" + strconv.Itoa(i), Labels: Labels{"region": "r" + strconv.Itoa(i%labelSets)},
			Available: true, Concurrency: 1, Tables: tables}
		switch i / labelSets {
		case 0:
			info.Tier, info.Purview.Start, info.Purview.End = TierHDB, MinTS, t0
		case 1:
			info.Tier, info.Purview.Start, info.Purview.End = TierIDB, t0, t0+12*hour
		default:
			info.Tier, info.Purview.Start, info.Purview.End = TierRDB, t0+12*hour, MaxTS
		}
		c.Step(DAPRegistered{At: now, DAP: info})
	}
	var running []Dispatch
	var answered []string
	collect := func(out []Command) (finished bool) {
		for _, cmd := range out {
			switch x := cmd.(type) {
			case *Dispatch:
				running = append(running, *x)
			case AggExpect:
				answered = append(answered, x.Request)
				finished = true
			}
		}
		return finished
	}
	nextReq := 0
	submit := func() {
		nextReq++
		now += int64(time.Microsecond)
		collect(c.Step(RequestArrived{At: now, Request: Request{ID: "q-" + strconv.Itoa(nextReq), Table: "trade",
			Range: TimeRange{Start: t0 - hour, End: t0 + 13*hour}, Deadline: now + int64(time.Hour), Agg: "agg-1"}}))
	}
	for c.stats.QueueLength < queued {
		submit()
	}
	var m0, m1 runtime.MemStats
	mallocs, decisions := uint64(0), 0
	for i := 0; i < warm+measured; i++ {
		d := running[0]
		running = append(running[:0], running[1:]...)
		now += int64(time.Microsecond)
		var ev Event = PortionCompleted{At: now, Request: d.Portion.Request, Portion: d.Portion.ID, DAP: d.DAP, Outcome: OutcomeOK}
		before := c.stats.Decisions
		runtime.ReadMemStats(&m0)
		out := c.Step(ev)
		runtime.ReadMemStats(&m1)
		if finished := collect(out); i >= warm && !finished {
			mallocs += m1.Mallocs - m0.Mallocs
			decisions += int(c.stats.Decisions - before)
		}
		for _, id := range answered {
			c.Step(AggDone{At: now, Request: id})
		}
		answered = answered[:0]
		if c.stats.QueueLength < queued {
			submit()
		}
	}
	if decisions < measured/2 {
		t.Fatalf("only %d decisions measured", decisions)
	}
	// Nothing but a chunk of portion states now and then (commands.go, slab).
	chunks := uint64(decisions/cap(c.portionSlab.chunk) + 1)
	t.Logf("%d allocations in %d decisions (%d chunks of portion states at most)", mallocs, decisions, chunks)
	if mallocs > chunks {
		t.Fatalf("%d decisions allocated %d times, want at most %d (a chunk of portion states each %d)", decisions, mallocs, chunks, cap(c.portionSlab.chunk))
	}
}
