package core

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sg-project/sg/messages"
)

// The purview heaps answer "the oldest item meeting this purview that the
// chain accepts" as a scan of the subqueue would, through inserts and removals in any order, and the
// stale slots that lazy removal leaves stay bounded by the live ones; with
// ages at random (mostly the heap) and mostly rising (mostly the FIFO).
func TestPurviewHeapsMatchAScan(t *testing.T) {
	t.Run("random", func(t *testing.T) {
		testPurviewHeaps(t, func(rng *rand.Rand, _ int) int64 { return int64(rng.IntN(50)) })
	})
	t.Run("rising", func(t *testing.T) {
		testPurviewHeaps(t, func(rng *rand.Rand, step int) int64 { return int64(step/16 - rng.IntN(2)*rng.IntN(4)) })
	})
}

func testPurviewHeaps(t *testing.T, age func(*rand.Rand, int) int64) {
	c := New(Config{Self: "rc-1"})
	c.Step(Tick{At: t0})
	bounds := []int64{MinTS, t0 - hour, t0, t0 + 12*hour, t0 + 13*hour, MaxTS}
	purviews := []messages.TimeRange{{Start: MinTS, End: t0}, {Start: t0, End: t0 + 12*hour}, {Start: t0 + 12*hour, End: MaxTS}, messages.Unbounded}
	// (tables as fleet.upsert lists them: the chain asks the DAP's groups.)
	d := &dap{DAPInfo: DAPInfo{ID: "d", Available: true, Concurrency: 1, Tables: map[string]TableKind{"trade": TimePartitioned}}, tables: []string{"trade"}}
	r := &request{Request: Request{ID: "q", Table: "trade"}, kind: TimePartitioned}
	// Items of a request scoped to another tier: the chain refuses them, and
	// the walk goes on past them.
	other := &request{Request: Request{ID: "scoped", Table: "trade", Tier: TierHDB}, kind: TimePartitioned}
	ls := &labelSet{group: groupKey{table: "trade"}, locked: true}
	q := &subqueue{id: 1, tab: &c.items}
	q.setPurviews(purviews)
	rng := rand.New(rand.NewPCG(7, 11))
	var live []*item
	seq := uint64(0)
	for step := 0; step < 20000; step++ {
		if len(live) < 300 && (len(live) == 0 || rng.IntN(2) == 0) {
			i := rng.IntN(len(bounds) - 1)
			j := i + 1 + rng.IntN(len(bounds)-1-i)
			seq++
			req := r
			if rng.IntN(3) == 0 {
				req = other
			}
			it := c.newItem()
			*it = item{req: req, ls: ls, rng: TimeRange{Start: bounds[i], End: bounds[j]}, age: age(rng, step), seq: seq, ix: it.ix}
			q.insert(it)
			live = append(live, it)
		} else {
			k := rng.IntN(len(live))
			q.remove(live[k])
			live[k] = live[len(live)-1]
			live = live[:len(live)-1]
		}
		for b, p := range purviews {
			var want *item
			for _, it := range live {
				if it.req == r && it.rng.Start < p.End && it.rng.End > p.Start && (want == nil || it.ageKey().less(want.ageKey())) {
					want = it
				}
			}
			d.Purview = p // the DAP asking has this purview
			if got := q.oldest(p, c, d, &c.scratch); got != want {
				t.Fatalf("step %d, purview %v: oldest %+v, a scan finds %+v", step, p, got, want)
			}
			if h := q.heaps[b]; h.size() > 2*h.live+64 {
				t.Fatalf("step %d: purview %v holds %d slots for %d live items", step, p, h.size(), h.live)
			}
		}
	}
}

// oldest returns the oldest item meeting purview p that the placement chain
// finds feasible for d. scratch is reused between calls.
func (q *subqueue) oldest(p messages.TimeRange, c *Core, d *dap, scratch *frontier) *item {
	h, top, ok := q.peek(p)
	if !ok {
		return nil
	}
	return q.oldestFrom(h, top, c, d, scratch)
}

// Queue groups go when nothing references them: after many label sets have
// come (a DAP registers, requests queue and run), waited in the queue after
// their DAPs left, and gone, the core holds groups only for the fleet it has
// now. Before groups were dropped, every (table, label set) ever queued kept
// its group and subqueue buffers for the RC's life.
func TestQueueGroupsDroppedWhenIdle(t *testing.T) {
	h := newHarness(t, Config{LabelSetRetention: time.Hour})
	h.register("keep", lbl("region", "keep"))
	base := len(h.c.groups) // the staying DAP's groups: trade, ref, cfg
	const n = 200
	for i := range n {
		region := fmt.Sprintf("r%d", i)
		id := fmt.Sprintf("d%d", i)
		h.advance(time.Second)
		h.register(id, lbl("region", region))
		// A request runs on the DAP and is answered.
		q := fmt.Sprintf("q%d", i)
		d := dispatchedTo(t, h.request(q, "trade", Selector{"region": {region}}, t0, t0+hour, time.Minute), id)
		h.complete(d, OutcomeOK)
		h.step(AggDone{At: h.now, Request: q})
		// One is running when the DAP is lost, another waits for it.
		d = dispatchedTo(t, h.request(q+"-lost", "ref", Selector{"region": {region}}, t0, t0+hour, time.Minute), id)
		h.request(q+"-wait", "trade", Selector{"region": {region}}, t0, t0+hour, time.Second)
		h.step(DAPLost{At: h.now, DAP: id})
		// The label set is remembered: a request for it queues with no DAP,
		// and times out with the others.
		h.request(q+"-past", "trade", Selector{"region": {region}}, t0, t0+hour, time.Second)
		h.advance(2 * time.Minute)
		h.tick()
		// Requests for it that queue nothing: one late on arrival, one that
		// also selects a label set nobody has.
		only[Reply](t, h.request(q+"-late", "ref", Selector{"region": {region}}, t0, t0+hour, 0))
		only[Reply](t, h.request(q+"-missing", "trade", Selector{"region": {region, "nowhere"}}, t0, t0+hour, time.Minute))
		if i == 0 && len(h.c.groups) != base {
			t.Fatalf("after one label set came and went the core holds %d queue groups, want %d", len(h.c.groups), base)
		}
	}
	if got := len(h.c.groups); got != base {
		var left []string
		for k := range h.c.groups {
			left = append(left, fmt.Sprintf("%s%v", k.table, k.key))
		}
		t.Fatalf("after %d label sets came and went the core holds %d queue groups, want %d (the staying DAP's): %v", n, got, base, left)
	}
	// The staying DAP's groups still serve, and a group of a label set that
	// was dropped comes back when it is needed again.
	dispatchedTo(t, h.request("after", "trade", Selector{"region": {"keep"}}, t0, t0+hour, time.Minute), "keep")
	h.register("again", lbl("region", "r7"))
	dispatchedTo(t, h.request("again", "ref", Selector{"region": {"r7"}}, t0, t0+hour, time.Minute), "again")
}

// Released subqueues kept for reuse are bounded: a burst of requests for
// many label sets no DAP serves now (remembered), each queued in a group of
// its own, leaves at most maxFreeSubs subqueues behind once they time out,
// and none that grew past maxFreeSubItems. Before the bound, every
// subqueue of the burst stayed in c.freeSubs with its buffers for the RC's
// life.
func TestFreeSubqueuesBoundedAfterBurst(t *testing.T) {
	h := newHarness(t, Config{LabelSetRetention: time.Hour})
	const n = 300
	regions := make([]string, n)
	for i := range n {
		regions[i] = fmt.Sprintf("r%d", i)
		id := fmt.Sprintf("d%d", i)
		h.register(id, lbl("region", regions[i]))
		h.step(DAPLost{At: h.now, DAP: id})
	}
	// One label set with more queued than a kept subqueue may hold.
	for i := range maxFreeSubItems + 10 {
		h.request(fmt.Sprintf("big%d", i), "trade", Selector{"region": {"r0"}}, t0, t0+hour, time.Second)
	}
	// A burst over every label set: a group and subqueue each.
	for i, r := range regions {
		h.request(fmt.Sprintf("q%d", i), "trade", Selector{"region": {r}}, t0, t0+hour, time.Second)
	}
	if got := len(h.c.groups); got < n {
		t.Fatalf("the burst queued in %d groups, want at least %d", got, n)
	}
	h.advance(2 * time.Second)
	h.tick()
	if got := len(h.c.groups); got != 0 {
		t.Fatalf("after the burst timed out the core holds %d queue groups, want none", got)
	}
	if got := len(h.c.freeSubs); got > maxFreeSubs {
		t.Fatalf("after a burst over %d label sets the core keeps %d free subqueues, want at most %d", n, got, maxFreeSubs)
	}
	for _, q := range h.c.freeSubs {
		if cap(q.items) > maxFreeSubItems {
			t.Fatalf("a free subqueue kept room for %d items, want at most %d", cap(q.items), maxFreeSubItems)
		}
	}
	// The label sets still queue and are answered once their DAPs are back.
	h.register("back", lbl("region", "r5"))
	dispatchedTo(t, h.request("after", "trade", Selector{"region": {"r5"}}, t0, t0+hour, time.Minute), "back")
}

// A dropped group keeps nothing it knew of the fleet as known: its DAPs
// were cleared, and a dapsKnown left true would answer groupDAPs with none
// until the fleet changed (likewise its top vintage and served flag).
func TestDroppedGroupForgetsWhatItKnew(t *testing.T) {
	h := newHarness(t, Config{LabelSetRetention: time.Hour})
	h.register("d1", lbl("region", "eu"))
	h.step(DAPLost{At: h.now, DAP: "d1"})
	h.request("q", "trade", Selector{"region": {"eu"}}, t0, t0+hour, time.Second)
	var g *queueGroup
	for k, x := range h.c.groups {
		if k.table == "trade" {
			g = x
		}
	}
	if g == nil {
		t.Fatal("the request for the remembered label set queued in no group")
	}
	h.c.groupDAPs(g)
	h.c.groupTop(g)
	h.c.groupServed(g)
	h.advance(2 * time.Second)
	h.tick()
	if !g.dropped {
		t.Fatal("the group was not dropped once its request timed out")
	}
	if g.dapsKnown || g.topKnown || g.servedKnown {
		t.Fatalf("a dropped group still knows: daps %v, top %v, served %v", g.dapsKnown, g.topKnown, g.servedKnown)
	}
}

// The per-table cache split reads (tableSets) holds only tables the fleet
// serves or remembers: one whose DAPs left and were forgotten, never asked
// for again, goes; and a cache out of date holds no queue groups.
func TestTableSetsSweptWhenTablesGo(t *testing.T) {
	for _, retention := range []time.Duration{-1, time.Minute} {
		h := newHarness(t, Config{LabelSetRetention: retention})
		h.register("keep", lbl("region", "keep"), tables(map[string]TableKind{"trade": TimePartitioned}))
		const n = 50
		for i := range n {
			table, id := fmt.Sprintf("t%d", i), fmt.Sprintf("d%d", i)
			h.register(id, lbl("region", "eu"), tables(map[string]TableKind{table: TimePartitioned}))
			q := fmt.Sprintf("q%d", i)
			d := dispatchedTo(t, h.request(q, table, Selector{"region": {"eu"}}, t0, t0+hour, time.Minute), id)
			h.complete(d, OutcomeOK)
			h.step(AggDone{At: h.now, Request: q})
			h.step(DAPLost{At: h.now, DAP: id})
		}
		dispatchedTo(t, h.request("keep", "trade", Selector{"region": {"keep"}}, t0, t0+hour, time.Minute), "keep")
		h.advance(2 * time.Minute) // past the retention: the tables are forgotten
		h.tick()
		if got := len(h.c.tableSets); got > 1 {
			var left []string
			for t := range h.c.tableSets {
				left = append(left, t)
			}
			t.Fatalf("retention %v: after %d tables came and went tableSets holds %d: %v", retention, n, got, left)
		}
		// A fleet change leaves the kept table's cache out of date: it holds
		// no queue group until it is read again.
		h.register("other", lbl("region", "other"), tables(map[string]TableKind{"trade": TimePartitioned}))
		for _, ts := range h.c.tableSets {
			for _, k := range ts.sets {
				if k.g != nil {
					t.Fatalf("retention %v: an out-of-date tableSets entry holds the queue group of %s", retention, k.key)
				}
			}
		}
	}
}
