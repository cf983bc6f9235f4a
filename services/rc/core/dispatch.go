package core

import (
	"cmp"
	"slices"

	"github.com/sg-project/sg/messages"
)

// subFor is the subqueue that holds a label set's items: per locked vintage,
// or the unlocked one.
// The label set keeps the answer (ls.sub) while that subqueue lives (its id
// is ls.subID: a released subqueue has none, a reused one a new one) and the
// label set's lock does not change: leftovers are queued without a lookup.
func (c *Core) subFor(ls *labelSet) *subqueue {
	if q := ls.sub; q != nil && q.id == ls.subID {
		return q
	}
	g := c.queueGroupOf(ls)
	var q *subqueue
	if !ls.locked {
		if g.unlocked == nil {
			g.unlocked = c.newSubqueue(g, subKey{group: ls.group})
		}
		q = g.unlocked
	} else if q = g.locked[ls.vintage]; q == nil {
		q = c.newSubqueue(g, subKey{group: ls.group, locked: true, vintage: ls.vintage})
		g.locked[ls.vintage] = q
	}
	ls.sub, ls.subID = q, q.id
	return q
}

// queueGroupOf is the label set's queue group, looked up once (again when
// the one it held was dropped).
func (c *Core) queueGroupOf(ls *labelSet) *queueGroup {
	if ls.qg == nil || ls.qg.dropped {
		ls.qg = c.groupFor(ls.group)
	}
	return ls.qg
}

// groupFor is the queue group of a group key, made on first use. A group
// lives while a DAP of the fleet serves it or anything of it is queued
// (dropGroupIfIdle), so that there are no more of them than the fleet's
// (table, label set) pairs and the ones with queued work. Label sets and
// DAPs hold theirs instead of looking it up on every decision: a DAP's
// groups are never dropped while it is in the fleet (it serves them), and a
// label set's or known set's group is looked up again once dropped.
func (c *Core) groupFor(gk groupKey) *queueGroup {
	g := c.groups[gk]
	if g == nil {
		g = &queueGroup{key: gk, locked: map[uint64]*subqueue{}, purviews: c.groupPurviews(gk)}
		c.groups[gk] = g
	}
	return g
}

// groupDAPs is fleet.group of the queue group's key, kept on the group until
// the fleet changes: a request placed asks it once per label set.
func (c *Core) groupDAPs(g *queueGroup) []*dap {
	if !g.dapsKnown || g.dapsEpoch != c.fleet.epoch {
		g.daps, g.dapsEpoch, g.dapsKnown = c.fleet.group(g.key), c.fleet.epoch, true
	}
	return g.daps
}

// dapGroups is the DAP's queue group per table (in d.tables order), and
// whether the table is time-partitioned; worked out again after any change
// to the fleet.
func (c *Core) dapGroups(d *dap) []dapGroup {
	if d.groupsEpoch == c.fleet.epoch && len(d.groups) == len(d.tables) {
		return d.groups
	}
	d.groups = d.groups[:0]
	for _, t := range d.tables {
		gk := c.fleet.groupOf(d, t)
		d.groups = append(d.groups, dapGroup{g: c.groupFor(gk), partitioned: c.fleet.kind(t) == TimePartitioned})
	}
	d.groupsEpoch = c.fleet.epoch
	return d.groups
}

// groupPurviews lists the distinct purviews of the group's DAPs, sorted: one
// heap each in the group's subqueues. A table that is not time-partitioned
// has one, the whole range.
func (c *Core) groupPurviews(g groupKey) []messages.TimeRange {
	if c.fleet.kind(g.table) != TimePartitioned {
		return wholeRange
	}
	var ps []messages.TimeRange
	for _, d := range c.fleet.group(g) {
		if p := d.Purview; d.serves(g.table) && !slices.Contains(ps, p) {
			ps = append(ps, p)
		}
	}
	slices.SortFunc(ps, func(a, b messages.TimeRange) int {
		if a.Start != b.Start {
			return cmp.Compare(a.Start, b.Start)
		}
		return cmp.Compare(a.End, b.End)
	})
	return ps
}

// refreshPurviews rebuilds the heaps of the groups whose DAPs changed, when
// their set of purviews did: after every change to the fleet.
func (c *Core) refreshPurviews() {
	for _, gk := range c.fleet.dirty {
		g := c.groups[gk]
		if g == nil {
			continue
		}
		if c.dropGroupIfIdle(g); g.dropped {
			continue // its last DAP left and nothing of it is queued
		}
		ps := c.groupPurviews(gk)
		if slices.Equal(ps, g.purviews) {
			continue
		}
		g.purviews = ps
		if g.unlocked != nil {
			g.unlocked.setPurviews(ps)
		}
		for _, q := range g.locked {
			q.setPurviews(ps)
		}
	}
	c.fleet.dirty = c.fleet.dirty[:0]
}

// dropIfEmpty keeps the group maps as small as the queue. A group's
// unlocked subqueue stays while the group does (one per group): it empties
// and comes back with every request, and releasing and rebuilding it each
// time cost more than the decisions around it. A group emptied that no DAP
// serves goes (dropGroupIfIdle).
func (c *Core) dropIfEmpty(q *subqueue) {
	if q.n > 0 {
		return
	}
	g := q.g
	if q.key.locked && g.locked[q.key.vintage] == q {
		delete(g.locked, q.key.vintage)
		c.freeSub(q)
	}
	c.dropGroupIfIdle(g)
}

// dropGroupIfIdle deletes a queue group that holds nothing queued and that
// no DAP of the fleet serves: without it, every (table, label set) a
// long-running RC ever queued for kept its group and subqueue buffers. What
// still points at it (a label set, a known set, a gone DAP's cache) sees
// dropped and looks the key up again; a group is only an index, so a new
// one rebuilt from the fleet (groupFor) stands for it.
func (c *Core) dropGroupIfIdle(g *queueGroup) {
	if g.dropped || !g.empty() || c.groupServed(g) {
		return
	}
	delete(c.groups, g.key)
	g.dropped = true
	if q := g.unlocked; q != nil {
		g.unlocked = nil
		c.freeSub(q)
	}
	// What it kept of the fleet is forgotten with it: none of it is known.
	g.daps, g.dapsKnown, g.topKnown, g.servedKnown = nil, false, false, false
}

// groupServed is fleet.serves of the group's key, kept on the group until
// the fleet changes: a served group's subqueues empty with every request,
// and asking the fleet each time cost its map lookups (kinds, setDAPs).
func (c *Core) groupServed(g *queueGroup) bool {
	if !g.servedKnown || g.servedEpoch != c.fleet.epoch {
		g.served, g.servedEpoch, g.servedKnown = c.fleet.serves(g.key), c.fleet.epoch, true
	}
	return g.served
}

// Released subqueues kept for reuse: at most maxFreeSubs, each with room
// for at most maxFreeSubItems items. A burst of many label sets (or
// vintages) would otherwise keep a subqueue and its buffers for each for
// the RC's life; a steady load reuses a few.
const (
	maxFreeSubs     = 64
	maxFreeSubItems = 1024
)

// freeSub releases a subqueue that left its group, and keeps it with its
// buffers for the next subqueue when there is room and it is not oversized.
func (c *Core) freeSub(q *subqueue) {
	q.release()
	if len(c.freeSubs) < maxFreeSubs && cap(q.items) <= maxFreeSubItems {
		c.freeSubs = append(c.freeSubs, q)
	}
}

// newSubqueue is a subqueue of group g, reused when one was released.
func (c *Core) newSubqueue(g *queueGroup, key subKey) *subqueue {
	var q *subqueue
	if n := len(c.freeSubs); n > 0 {
		q = c.freeSubs[n-1]
		c.freeSubs[n-1] = nil
		c.freeSubs = c.freeSubs[:n-1]
	} else {
		q = new(subqueue)
	}
	c.nextSubID++
	q.key, q.g, q.id, q.tab = key, g, c.nextSubID, &c.items
	q.setPurviews(g.purviews)
	return q
}

// empty: nothing of the group is queued.
func (g *queueGroup) empty() bool {
	return (g.unlocked == nil || g.unlocked.n == 0) && len(g.locked) == 0
}

// enqueue adds a time range of a label set, aged as the request.
func (c *Core) enqueue(r *request, ls *labelSet, rng TimeRange) {
	c.enqueueAt(r, ls, rng, r.arrived)
}

func (c *Core) enqueueAt(r *request, ls *labelSet, rng TimeRange, age int64) {
	c.nextSeq++
	it := c.newItem()
	*it = item{req: r, ls: ls, rng: rng, age: age, seq: c.nextSeq, idx: len(ls.items), ix: it.ix}
	ls.items = append(ls.items, it)
	c.subFor(ls).insert(it)
	r.queued++
	c.callerQueue(r).queued++
	c.stats.QueueLength++
}

// unqueue removes an item from the queue and its label set, and keeps it
// for the next enqueue: nothing holds an item past its unqueue.
func (c *Core) unqueue(it *item) {
	q := it.sub
	q.remove(it)
	c.dropIfEmpty(q)
	ls := it.ls
	last := len(ls.items) - 1
	ls.items[it.idx] = ls.items[last]
	ls.items[it.idx].idx = it.idx
	ls.items[last] = nil
	ls.items = ls.items[:last]
	it.req.queued--
	c.callerQueue(it.req).queued--
	c.stats.QueueLength--
	*it = item{ix: it.ix}
	c.freeItems = append(c.freeItems, it)
}

func (c *Core) unqueueAll(r *request) {
	for _, ls := range r.sets {
		for len(ls.items) > 0 {
			c.unqueue(ls.items[len(ls.items)-1])
		}
	}
}

// lock fixes a label set's reference vintage at its first dispatch
// (seed: Reference vintage change) and moves its queued items to the
// subqueue of that vintage.
func (c *Core) lock(ls *labelSet, v uint64) {
	// (Moving between subqueues leaves ls.items as it is.)
	for _, it := range ls.items {
		q := it.sub
		q.remove(it)
		c.dropIfEmpty(q)
	}
	ls.locked, ls.vintage, ls.sub = true, v, nil
	if len(ls.items) == 0 {
		return // (no empty subqueue made: it would hold its group)
	}
	q := c.subFor(ls)
	for _, it := range ls.items {
		q.insert(it)
	}
}

// oldestFor finds the oldest queued item the DAP can serve now, through the
// index: for each table it serves (dapGroups, as the chain's inGroup), the
// subqueues whose vintage fits the DAP's (the chain's vintageFits: the one
// locked at its vintage and, if it is up to date, the unlocked one); within
// each, the oldest item meeting its purview (meets, as the chain's
// candidate) that the whole placement chain (feasible.go) accepts. The subqueues are asked in the order of their
// oldest slots, and one whose oldest is younger than the item found is not
// asked: the chain runs on the item taken, not on every subqueue's head.
func (c *Core) oldestFor(d *dap) *item {
	cands := c.cands[:0]
	look := func(q *subqueue, p messages.TimeRange) {
		if q == nil || q.n == 0 {
			return
		}
		if h, top, ok := q.peek(p); ok {
			cands = append(cands, candidateHead{q: q, h: h, top: top})
		}
	}
	for _, dg := range c.dapGroups(d) {
		g := dg.g
		if g.empty() {
			continue
		}
		p := wholeRange[0]
		if dg.partitioned {
			p = d.Purview
		}
		// A locked subqueue wants its own vintage (wantVintage): the one
		// keyed by the DAP's is the only locked one that can fit.
		if q := g.locked[d.Vintage]; q != nil && c.vintageFits(d, g, true, q.key.vintage) {
			look(q, p)
		}
		if g.unlocked != nil && c.vintageFits(d, g, false, 0) {
			look(g.unlocked, p)
		}
	}
	// Oldest head first (insertion sort: a DAP has a few).
	for i := 1; i < len(cands); i++ {
		for j := i; j > 0 && cands[j].top.key.less(cands[j-1].top.key); j-- {
			cands[j], cands[j-1] = cands[j-1], cands[j]
		}
	}
	var best *item
	for _, x := range cands {
		if best != nil && !x.top.key.less(best.ageKey()) {
			break // this subqueue and the rest hold nothing older
		}
		it := x.q.oldestFrom(x.h, x.top, c, d, &c.scratch)
		if it != nil && (best == nil || it.ageKey().less(best.ageKey())) {
			best = it
		}
	}
	clear(cands)
	c.cands = cands[:0]
	return best
}

// candidateHead is a subqueue oldestFor may take from, and its oldest slot.
type candidateHead struct {
	q   *subqueue
	h   *ageHeap
	top heapSlot
}

// groupTop is the highest vintage of queue group g's DAPs (fleet.maxVintage),
// kept on g until the fleet's vintages change.
func (c *Core) groupTop(g *queueGroup) uint64 {
	if !g.topKnown || g.topEpoch != c.fleet.vintageEpoch {
		g.top, _ = c.fleet.maxVintage(g.key)
		g.topEpoch, g.topKnown = c.fleet.vintageEpoch, true
	}
	return g.top
}

// dequeue gives the DAP the oldest items it can serve while it has slots
// (seed: Dequeueing).
func (c *Core) dequeue(d *dap) {
	for c.ready(d) {
		it := c.oldestFor(d)
		if it == nil {
			return
		}
		c.stats.Decisions++
		r := it.req
		// SQL: a date rollover since the request was first queued retries it.
		if r.SQL && utcDay(c.now) != r.firstQueuedDay {
			c.retry(r, it.ls, "date rollover since the request was first queued", true)
			continue
		}
		c.dispatchItem(d, it)
	}
}

// dispatchItem sends the intersection of the DAP's purview with the item and
// leaves the leftovers queued at the item's age: the item itself keeps the
// first (shrink), a second (the purview inside the item) is a new item.
func (c *Core) dispatchItem(d *dap, it *item) {
	r, ls := it.req, it.ls
	whole, age := it.rng, it.age
	rng := whole
	if r.kind == TimePartitioned {
		rng, _ = whole.Intersect(d.Purview)
	}
	before := TimeRange{Start: whole.Start, End: rng.Start}
	after := TimeRange{Start: rng.End, End: whole.End}
	switch {
	case before.Valid():
		it.sub.shrink(it, before)
	case after.Valid():
		it.sub.shrink(it, after)
		after = TimeRange{}
	default:
		c.unqueue(it) // it is free from here on
	}
	// (it is not used below: it may be free, or moved by lock.)
	if !ls.locked {
		c.lock(ls, d.Vintage)
	}
	if before.Valid() && after.Valid() {
		c.enqueueAt(r, ls, after, age)
	}
	c.nextPortion++
	p := Portion{
		ID:             c.nextPortion,
		Request:        r.ID,
		Labels:         ls.labels,
		Range:          rng,
		Attempt:        ls.attempt,
		PurviewVersion: d.PurviewVersion,
		Vintage:        d.Vintage,
	}
	via := ""
	if !d.own(c.cfg.Self) {
		via = d.RC
		r.addSecondary(via)
	}
	// Field by field into a zeroed slot (slab or recycled): a composite assignment
	// copies the whole struct through the GC's bulk write barrier.
	var ps *portionState
	if n := len(c.freePortions); n > 0 {
		ps = c.freePortions[n-1]
		c.freePortions[n-1] = nil
		c.freePortions = c.freePortions[:n-1]
	} else {
		ps = c.portionSlab.new()
	}
	ps.r, ps.ls, ps.dap, ps.d, ps.via = r, ls, d.ID, d, via
	ps.ID, ps.Range, ps.Attempt = p.ID, p.Range, p.Attempt
	r.portions = append(r.portions, ps)
	r.ids = append(r.ids, p.ID)
	r.setRunning(ls, ls.running+1)
	d.running = append(d.running, runningPortion{id: p.ID, request: r.ID, key: ls.group.key, attempt: ls.attempt, started: c.now, ps: ps})
	c.runningByID.put(p.ID, ps)
	c.stats.Dispatched++
	c.trackDispatch(r, ps)
	x := c.dispatches.new()
	*x = Dispatch{
		Portion:  p,
		DAP:      d.ID,
		ViaRC:    via,
		API:      r.API,
		Table:    r.Table,
		Agg:      r.Agg,
		Deadline: r.Deadline,
		Retries:  r.retries,
		QueuedAt: age,
	}
	c.emit(x)
}

// applyDAP records a registration or status update.
func (c *Core) applyDAP(info DAPInfo, keepVintage bool) *dap {
	d := c.fleet.upsert(info, keepVintage)
	if m, ok := c.pastExec[d.ID]; ok && !d.measured {
		d.execMean, d.measured = m, true
		delete(c.pastExec, d.ID)
	}
	c.refreshPurviews()
	d.changedAt = c.now
	return d
}

// afterDAPChange runs after any change to a DAP's state: vintage retries in
// its groups, then dequeue for it and for every ready DAP of those groups
// (a change of the group's highest vintage can make other DAPs up to date).
func (c *Core) afterDAPChange(d *dap) {
	d.changedAt = c.now
	groups := make([]groupKey, 0, len(d.tables))
	for _, t := range d.tables {
		groups = append(groups, c.fleet.groupOf(d, t))
	}
	for _, g := range groups {
		c.groupChanged(g)
	}
	c.dequeue(d)
	c.dequeueGroups(groups)
}

// dequeueGroups offers queued items of the groups to their ready DAPs.
func (c *Core) dequeueGroups(groups []groupKey) {
	for _, g := range groups {
		qg := c.groups[g]
		if qg == nil || qg.empty() {
			continue // nothing queued in this group
		}
		for _, o := range c.groupDAPs(qg) {
			if c.ready(o) {
				c.dequeue(o)
			}
		}
	}
}
