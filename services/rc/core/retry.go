package core

import (
	"fmt"
	"sort"
)

// retry redoes a label set of a request: every tier of it, as a new attempt
// with its vintage unlocked (seed: Retries). For SQL requests the whole
// request restarts if the date or any purview changed since it was first
// queued; whole forces that. More retries than Config.MaxRetry fail the
// request.
func (c *Core) retry(r *request, ls *labelSet, reason string, whole bool) {
	if !r.live() || r.errored || r.timingOut {
		return
	}
	r.retries++
	c.stats.Retries++
	if r.retries > c.cfg.MaxRetry {
		c.reply(r, ReplyMaxRetries, fmt.Sprintf("Request failed after %d retries (maximum %d, SG_MAX_RETRY); last retry reason: %s", r.retries-1, c.cfg.MaxRetry, reason))
		return
	}
	if r.SQL && (utcDay(c.now) != r.firstQueuedDay || c.fleet.purviewEpoch != r.purviewEpoch) {
		whole = true
	}
	sets := []*labelSet{ls}
	if whole {
		sets = r.sets
		r.firstQueuedDay = utcDay(c.now)
		r.purviewEpoch = c.fleet.purviewEpoch
	}
	for _, s := range sets {
		c.restart(r, s)
	}
	c.emit(RetryNoted{Request: r.ID, Labels: ls.labels, Whole: whole, Attempt: ls.attempt, Reason: reason})
	c.placeRequest(r)
}

// restart supersedes a label set's current attempt and queues it whole. Its
// running portions keep their DAPs' slots until they report back; those
// DAPs are not used for the new attempt.
func (c *Core) restart(r *request, ls *labelSet) {
	for len(ls.items) > 0 {
		c.unqueue(ls.items[len(ls.items)-1])
	}
	for _, ps := range r.portions {
		if ps.ls == ls && ps.Attempt == ls.attempt {
			if !ps.superseded {
				c.trackSupersede(r, ps)
			}
			ps.superseded = true
		}
	}
	ls.attempt++
	ls.locked, ls.vintage, ls.sub = false, 0, nil
	r.setRunning(ls, 0)
	clear(ls.done)
	ls.done = ls.done[:0]
	c.enqueue(r, ls, c.queueRange(r))
}

// vintageRetries: a label set that has a queued entry and a locked vintage
// is retried when the DAPs of the label set are all above the locked
// vintage (seed: Reference vintage change).
//
// Reading of the seed's example (its numbers have typos): after dap-4-1
// moves to 21 the seed retries foo=bar2 although dap-3-1 is still at 20;
// dap-3-1 cannot serve the queued range [2022.12.05;+inf) at all. So we
// apply the rule to the DAPs that could serve the queued entry (same label
// set, purview intersecting it, in scope), and also, as written, to all the
// label set's DAPs. In the second step, dap-1-1 moves to 11 while dap-1-2
// stays at 10 (the seed's "20" and "21" there are typos for 10 and 11): not
// all are above the lock of 10, so nothing is retried, and dap-1-1 is not
// used for the label set because 11 is not the locked 10.
func (c *Core) groupChanged(g groupKey) {
	qg := c.groups[g]
	if qg == nil || len(qg.locked) == 0 {
		return
	}
	vintages := make([]uint64, 0, len(qg.locked))
	for v := range qg.locked {
		vintages = append(vintages, v)
	}
	sort.Slice(vintages, func(i, j int) bool { return vintages[i] < vintages[j] })
	type target struct {
		r  *request
		ls *labelSet
	}
	var targets []target
	seen := map[*labelSet]bool{}
	for _, v := range vintages {
		q := qg.locked[v]
		ds := c.fleet.group(g)
		allAbove := len(ds) > 0
		for _, d := range ds {
			if d.serves(g.table) && d.Vintage <= v {
				allAbove = false
				break
			}
		}
		q.walk(func(it *item) {
			if seen[it.ls] {
				return
			}
			if allAbove || c.coveringAbove(it, v) {
				seen[it.ls] = true
				targets = append(targets, target{it.req, it.ls})
			}
		})
	}
	sort.SliceStable(targets, func(i, j int) bool {
		if targets[i].r.arrived != targets[j].r.arrived {
			return targets[i].r.arrived < targets[j].r.arrived
		}
		return targets[i].r.ID < targets[j].r.ID
	})
	for _, t := range targets {
		c.retry(t.r, t.ls, fmt.Sprintf("every DAP of label set %s is above the locked reference vintage %d", t.ls.labels, t.ls.vintage), false)
	}
}

// coveringAbove: at least one DAP could serve the item, and all that could
// are above vintage v.
func (c *Core) coveringAbove(it *item, v uint64) bool {
	n := 0
	for _, d := range c.fleet.group(it.ls.group) {
		if !c.candidate(d, it) {
			continue
		}
		if d.Vintage <= v {
			return false
		}
		n++
	}
	return n > 0
}
