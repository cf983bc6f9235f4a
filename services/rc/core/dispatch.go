package core

// subFor is the subqueue that holds a label set's items: per locked vintage,
// or the unlocked one.
func (c *Core) subFor(ls *labelSet) *subqueue {
	g := c.groups[ls.group]
	if g == nil {
		g = &queueGroup{locked: map[uint64]*subqueue{}}
		c.groups[ls.group] = g
	}
	if !ls.locked {
		if g.unlocked == nil {
			g.unlocked = &subqueue{key: subKey{group: ls.group}}
		}
		return g.unlocked
	}
	q := g.locked[ls.vintage]
	if q == nil {
		q = &subqueue{key: subKey{group: ls.group, locked: true, vintage: ls.vintage}}
		g.locked[ls.vintage] = q
	}
	return q
}

// dropIfEmpty keeps the group maps as small as the queue.
func (c *Core) dropIfEmpty(q *subqueue) {
	if q.n > 0 {
		return
	}
	g := c.groups[q.key.group]
	if g == nil {
		return
	}
	if q.key.locked {
		delete(g.locked, q.key.vintage)
	} else if g.unlocked == q {
		g.unlocked = nil
	}
	if g.unlocked == nil && len(g.locked) == 0 {
		delete(c.groups, q.key.group)
	}
}

// enqueue adds the range [s, e) of a label set, aged as the request.
func (c *Core) enqueue(r *request, ls *labelSet, s, e int64) {
	c.enqueueAt(r, ls, s, e, r.arrived)
}

func (c *Core) enqueueAt(r *request, ls *labelSet, s, e, age int64) {
	c.nextSeq++
	it := &item{req: r, ls: ls, start: s, end: e, age: age, seq: c.nextSeq, idx: len(ls.items)}
	ls.items = append(ls.items, it)
	c.subFor(ls).insert(it)
	r.queued++
	c.queuedBy[r.Caller]++
	c.stats.QueueLength++
}

// unqueue removes an item from the queue and its label set.
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
	if c.queuedBy[it.req.Caller]--; c.queuedBy[it.req.Caller] <= 0 {
		delete(c.queuedBy, it.req.Caller)
	}
	c.stats.QueueLength--
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
	items := append([]*item(nil), ls.items...)
	for _, it := range items {
		it.sub.remove(it)
		c.dropIfEmpty(it.sub)
	}
	ls.locked, ls.vintage = true, v
	q := c.subFor(ls)
	for _, it := range items {
		q.insert(it)
	}
}

// oldestFor finds the oldest queued item the DAP can serve now, through the
// index: for each table it serves, the subqueue of its own vintage (items
// locked at it) and, if it is up to date, the unlocked subqueue; within
// each, the oldest item intersecting its purview that passes eligible.
func (c *Core) oldestFor(d *dap) *item {
	var best *item
	consider := func(q *subqueue, s, e int64) {
		if q == nil || q.n == 0 {
			return
		}
		it := q.oldest(s, e, c, d, &c.scratch)
		if it != nil && (best == nil || it.ageKey().less(best.ageKey())) {
			best = it
		}
	}
	for _, t := range d.tables {
		gk := c.fleet.groupOf(d, t)
		g := c.groups[gk]
		if g == nil {
			continue
		}
		s, e := MinTS, MaxTS
		if c.fleet.kinds[t] == TimePartitioned {
			s, e = d.Start, d.End
		}
		consider(g.locked[d.Vintage], s, e)
		if g.unlocked != nil {
			if top, _ := c.fleet.maxVintage(gk); d.Vintage == top {
				consider(g.unlocked, s, e)
			}
		}
	}
	return best
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
// requeues the leftovers at the item's age.
func (c *Core) dispatchItem(d *dap, it *item) {
	r, ls := it.req, it.ls
	s, e := it.start, it.end
	if r.kind == TimePartitioned {
		s, e, _ = overlap(it.start, it.end, d.Start, d.End)
	}
	c.unqueue(it)
	if !ls.locked {
		c.lock(ls, d.Vintage)
	}
	if it.start < s {
		c.enqueueAt(r, ls, it.start, s, it.age)
	}
	if e < it.end {
		c.enqueueAt(r, ls, e, it.end, it.age)
	}
	c.nextPortion++
	p := Portion{
		ID:             c.nextPortion,
		Request:        r.ID,
		Labels:         ls.labels,
		Start:          s,
		End:            e,
		Attempt:        ls.attempt,
		PurviewVersion: d.PurviewVersion,
		Vintage:        d.Vintage,
	}
	via := ""
	if !d.own(c.cfg.Self) {
		via = d.RC
		r.addSecondary(via)
	}
	r.portions[p.ID] = &portionState{Portion: p, ls: ls, dap: d.ID, via: via}
	r.setRunning(ls, ls.running+1)
	d.running = append(d.running, runningPortion{id: p.ID, request: r.ID, key: ls.group.key, attempt: ls.attempt, started: c.now})
	c.stats.Dispatched++
	c.trackDispatch(r, r.portions[p.ID])
	c.emit(Dispatch{
		Portion:  p,
		DAP:      d.ID,
		ViaRC:    via,
		API:      r.API,
		Table:    r.Table,
		Agg:      r.Agg,
		Deadline: r.Deadline,
		Retries:  r.retries,
		QueuedAt: it.age,
	})
}

// applyDAP records a registration or status update.
func (c *Core) applyDAP(info DAPInfo, keepVintage bool) *dap {
	d := c.fleet.upsert(info, keepVintage)
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
		if c.groups[g] == nil {
			continue // nothing queued in this group
		}
		for _, o := range c.fleet.group(g) {
			if c.ready(o) {
				c.dequeue(o)
			}
		}
	}
}
