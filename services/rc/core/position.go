package core

import "time"

// Position and drain rate as data (seed: dynamic-retry-after-design, "Why
// position-based instead of queue-size-based"): what a GW needs to tell an
// async caller when to come back. The core measures each DAP's execution
// time from its own dispatches and completions (no clock of its own: the
// events' times), so the figures are those of the DAPs that can serve the
// request, not a fleet average.

// Position is what the core knows of one request's progress.
type Position struct {
	Status Status
	// Ahead: queue items older than the request's oldest queued item, in
	// the groups (DAPs) its queued items wait for; 0-indexed as the seed's p.
	Ahead int
	// Queued and Running: the request's own items queued and portions running.
	Queued, Running int
	// DrainRate: items per second the DAPs that can serve the request's
	// queued items complete, from their measured execution times and
	// concurrency (0: nothing measured yet).
	DrainRate float64
	// Exec: the measured mean execution time of a portion on those DAPs (0:
	// nothing measured yet; the caller uses a nominal time).
	Exec time.Duration
}

// execAlpha weighs a new execution time in a DAP's moving mean: recent
// enough to follow a change of load, smooth enough not to jump on one slow
// portion.
const execAlpha = 0.2

// noteExec records the execution time of a portion a DAP completed.
func (c *Core) noteExec(d *dap, rp runningPortion, o Outcome) {
	if o != OutcomeOK || rp.started == 0 || c.now < rp.started {
		return
	}
	ns := float64(c.now - rp.started)
	if d.measured {
		d.execMean += execAlpha * (ns - d.execMean)
	} else {
		d.execMean, d.measured = ns, true
	}
}

// DrainRate is the measured drain rate of the DAPs for which ok holds: the
// sum of concurrency / mean execution time over those with a measurement,
// and the mean execution time over them (0, 0 when none has one).
func (c *Core) drainRate(ok func(*dap) bool) (rate float64, exec time.Duration) {
	var sum float64
	n := 0
	for _, d := range c.fleet.byID {
		m := d.execMean
		if !d.measured || m <= 0 || !d.Available || !d.own(c.cfg.Self) || !ok(d) {
			continue
		}
		rate += float64(max(d.Concurrency, 1)) / (m / float64(time.Second))
		sum += m
		n++
	}
	if n == 0 {
		return 0, 0
	}
	return rate, time.Duration(sum / float64(n))
}

// FleetDrainRate is DrainRate over every available DAP of this RC: what a
// refusal over the RC's own queue limit waits on.
func (c *Core) FleetDrainRate() float64 {
	r, _ := c.drainRate(func(*dap) bool { return true })
	return r
}

// Position reports request id's place in the queue and the pace of the DAPs
// that can serve it; false when the core does not coordinate it.
func (c *Core) Position(id string) (Position, bool) {
	r, ok := c.requests[id]
	if !ok {
		return Position{}, false
	}
	p := Position{Status: r.status(), Queued: r.queued, Running: r.running}
	groups := map[groupKey]bool{}
	var oldest *item
	for _, ls := range r.sets {
		for _, it := range ls.items {
			groups[ls.group] = true
			if oldest == nil || it.ageKey().less(oldest.ageKey()) {
				oldest = it
			}
		}
	}
	if oldest != nil {
		for gk := range groups {
			qg := c.groups[gk]
			if qg == nil {
				continue
			}
			count := func(q *subqueue) {
				if q == nil {
					return
				}
				q.walk(func(it *item) {
					if it.req != r && it.ageKey().less(oldest.ageKey()) {
						p.Ahead++
					}
				})
			}
			count(qg.unlocked)
			for _, q := range qg.locked {
				count(q)
			}
		}
	}
	// The DAPs that can serve it: those of its label sets' groups, in scope.
	sets := map[groupKey]bool{}
	for _, ls := range r.sets {
		sets[ls.group] = true
	}
	p.DrainRate, p.Exec = c.drainRate(func(d *dap) bool {
		return c.inScope(r, d) && sets[c.fleet.groupOf(d, r.Table)]
	})
	return p, true
}
