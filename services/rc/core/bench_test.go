package core

import (
	"fmt"
	"testing"
	"time"

	"github.com/sg-project/sg/services/cputime"
)

// BenchmarkDispatch measures dequeue decisions with 1,000 DAPs (100 label
// sets x 3 tiers, 3-4 replicas each) and about 100,000 queued portions.
// Each iteration completes the oldest running portion, which makes the core
// pick the oldest queued item that DAP can serve and dispatch it.
//
//	go test ./services/rc/... -run '^$' -bench Dispatch
func BenchmarkDispatch(b *testing.B) {
	const (
		labelSets = 100
		daps      = 1000
		queued    = 100_000
	)
	c := New(Config{Self: "rc-1"})
	now := t0
	tables := map[string]TableKind{"trade": TimePartitioned}
	for i := 0; i < daps; i++ {
		ls := i % labelSets
		info := DAPInfo{
			ID: fmt.Sprintf("dap-%d", i), Labels: Labels{"region": fmt.Sprintf("r%03d", ls)},
			Available: true, Concurrency: 1, Tables: tables,
		}
		switch (i / labelSets) % 3 {
		case 0:
			info.Tier, info.Purview.Start, info.Purview.End = TierHDB, MinTS, t0
		case 1:
			info.Tier, info.Purview.Start, info.Purview.End = TierIDB, t0, t0+12*hour
		default:
			info.Tier, info.Purview.Start, info.Purview.End = TierRDB, t0+12*hour, MaxTS
		}
		c.Step(DAPRegistered{At: now, DAP: info})
	}
	// running is a FIFO: head moves on, and the slice is compacted now and
	// then, so that the benchmark measures the core, not its own slice churn;
	// it keeps what a completion names, not the whole Dispatch (~150 bytes
	// copied twice per decision).
	type dispatched struct {
		request, dap string
		portion      PortionID
	}
	var running []dispatched
	head := 0
	// The Agg's answer ends a request (AggDone) once its last portion is in,
	// as in service: without it every finished request stayed in the core and
	// the heap (and GC's work) grew with b.N.
	var answered []string
	collect := func(out []Command) {
		for _, cmd := range out {
			switch x := cmd.(type) {
			case *Dispatch:
				running = append(running, dispatched{x.Portion.Request, x.DAP, x.Portion.ID})
			case AggExpect:
				answered = append(answered, x.Request)
			}
		}
	}
	answer := func() {
		for len(answered) > 0 {
			id := answered[len(answered)-1]
			answered = answered[:len(answered)-1]
			collect(c.Step(AggDone{At: now, Request: id}))
		}
	}
	nextReq := 0
	// Each request spans all three tiers of every label set: one queued item
	// per label set, split three ways as DAPs take their intersections.
	submit := func() {
		nextReq++
		now += int64(time.Microsecond)
		collect(c.Step(RequestArrived{At: now, Request: Request{
			ID: fmt.Sprintf("q-%d", nextReq), Table: "trade", Range: TimeRange{Start: t0 - hour, End: t0 + 13*hour},
			Deadline: now + int64(time.Hour*24*365), Agg: "agg-1",
		}}))
	}
	for c.stats.QueueLength < queued {
		submit()
	}
	b.ReportAllocs()
	b.ResetTimer()
	cpu0, _ := cputime.Process()
	start, arrived := c.stats.Decisions, c.stats.Arrived
	for i := 0; i < b.N; i++ {
		d := running[head]
		head++
		if head >= 1<<14 && 2*head >= len(running) {
			running = append(running[:0], running[head:]...)
			head = 0
		}
		now += int64(time.Microsecond)
		collect(c.Step(PortionCompleted{At: now, Request: d.request, Portion: d.portion, DAP: d.dap, Outcome: OutcomeOK}))
		answer()
		if c.stats.QueueLength < queued {
			submit()
		}
	}
	b.StopTimer()
	if s := b.Elapsed().Seconds(); s > 0 {
		b.ReportMetric(float64(c.stats.Decisions-start)/s, "decisions/s")
	}
	if cpu1, _ := cputime.Process(); cpu1 > cpu0 {
		s := (cpu1 - cpu0).Seconds()
		b.ReportMetric(float64(c.stats.Decisions-start)/s, "decisions/cpu-s")
	}
	// One decision per DAP event: each completion frees the DAP's one slot
	// and the queue always holds work for it.
	b.ReportMetric(float64(c.stats.Decisions-start)/float64(b.N), "decisions/op")
	b.ReportMetric(float64(c.stats.QueueLength), "queued")
	b.ReportMetric(float64(len(c.requests)), "requests")
	b.ReportMetric(float64(c.stats.Arrived-arrived)/float64(b.N), "arrivals/op")
}
