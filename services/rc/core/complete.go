package core

import (
	"fmt"
	"slices"

	"github.com/sg-project/sg/services/limits"
	"github.com/sg-project/sg/services/retryafter"
)

// completed handles a DAP's report on a portion.
func (c *Core) completed(e PortionCompleted) {
	if e.Outcome < OutcomeOK || e.Outcome > OutcomeRefused {
		// Not an outcome the shell passes (it validates completions and
		// classifies them): an error, so that the request is answered rather
		// than left waiting for a label set that cannot complete.
		e.Outcome = OutcomeError
	}
	r, ps, d, dapID := c.reportedBy(e.Request, e.Portion, e.DAP)
	if d == nil {
		if ps != nil && ps.d != nil && !ps.d.gone {
			d = ps.d // the DAP with id dapID, without looking it up
		} else {
			d = c.fleet.byID[dapID]
		}
	}
	if d != nil {
		if rp, ok := c.freeSlot(d, e.Portion); ok {
			c.noteExec(d, rp, e.Outcome)
		}
		d.lastCompletionAt = c.now
	}
	if rr := c.relayed[e.Request]; rr != nil && rr.has(e.Portion) {
		c.relayCompleted(rr, e)
		c.expire()
		if d != nil {
			c.dequeue(d)
		}
		return
	}
	if ps == nil || ps.finished || ps.superseded {
		// A superseded attempt, a lost DAP's late answer, a duplicate or an
		// ended request: the slot is free, nothing else changes.
		if ps != nil {
			ps.finished = true
		}
		c.stats.Stale++
		c.expire()
		if d != nil {
			c.dequeue(d)
		}
		return
	}
	if e.Outcome == OutcomeTimeout && r.Deadline <= c.now {
		// The DAP gave up at the deadline, as the RC is about to: it was
		// executing when time ran out, and the message says so (not
		// "respTooLate", which is a response the RC could not process).
		c.expire()
		if d != nil {
			c.dequeue(d)
		}
		return
	}
	ps.finished = true
	ls := ps.ls
	r.setRunning(ls, ls.running-1)
	switch {
	case r.Deadline <= c.now:
		// Too late: the deadline has passed and the request times out
		// below; the response is named in the timeout message.
		addr := dapID
		if d != nil {
			addr = d.Addr
		}
		r.tooLate = append(r.tooLate, addr)
		if e.Outcome == OutcomeOK {
			r.tooLateOK = true
		}
		c.expire()
	case r.errored || r.timingOut:
		c.expire()
	case e.Outcome == OutcomeOK:
		ls.done = append(ls.done, ps)
		c.expire()
		if r.live() && r.complete() {
			c.aggregate(r)
		}
	case e.Outcome == OutcomeRetry:
		c.expire()
		c.retry(r, ls, fmt.Sprintf("DAP %s answered RETRY: %s", dapID, e.Message), false)
	case e.Outcome == OutcomeError:
		c.expire()
		if r.live() {
			r.errored = true
			c.unqueueAll(r)
			c.emit(AggFail{Request: r.ID, Agg: r.Agg, Portion: ps.ref(), DAP: dapID, Code: e.Code, Message: e.Message})
		}
	case e.Outcome == OutcomeRefused:
		// Over the DAP's queue limit: the caller comes back later.
		c.expire()
		if r.live() {
			busy, rate := 1, retryafter.NominalRate(1, c.cfg.RetryAfter.NominalExec)
			if d != nil {
				busy, rate = len(d.running)+1, retryafter.NominalRate(d.Concurrency, c.cfg.RetryAfter.NominalExec)
				if measured, _ := c.drainRate(func(x *dap) bool { return x == d }); measured > 0 {
					rate = measured
				}
			}
			c.replyLimit(r, limits.DAPQueue, "Request refused: "+e.Message, limits.RetryAfter(busy, rate, c.cfg.RetryAfter.Params))
		}
	case e.Outcome == OutcomeTimeout:
		// The DAP gave up on the deadline (its clock leads): time the
		// request out now. It was executing when its time ran out, and the
		// message says so (status "executing", dap=...), never "unknown".
		c.expire()
		if r.live() {
			ps.finished = false
			c.timeout(r)
			ps.finished = true
		}
	}
	if d != nil {
		c.dequeue(d)
	}
}

// aggregate: every label set is complete; tell the Agg exactly which
// portions make the answer.
func (c *Core) aggregate(r *request) {
	r.aggregating = true
	// In the step's reused storage (c.refs), like the decisions' commands:
	// a request of many portions allocated its whole list here.
	start := len(c.refs)
	for _, ls := range r.sets {
		for _, ps := range ls.done {
			c.refs = append(c.refs, ps.ref())
		}
	}
	var refs []PortionRef
	if n := len(c.refs); n > start {
		refs = c.refs[start:n:n]
	}
	c.emit(AggExpect{Request: r.ID, Agg: r.Agg, Portions: refs})
}

// dapLost: a DAP is gone. Its running portions are requeued (the Agg is
// told the exact portions at the end, so a late partial from the lost DAP
// is discarded); its groups are re-checked for vintage retries.
func (c *Core) dapLost(id string) {
	d := c.fleet.byID[id]
	if d == nil {
		c.expire()
		return
	}
	var groups []groupKey
	for _, t := range d.tables {
		groups = append(groups, c.fleet.groupOf(d, t))
	}
	c.fleet.remove(d, c.now)
	if d.measured {
		if c.pastExec == nil {
			c.pastExec = map[string]float64{}
		}
		c.pastExec[d.ID] = d.execMean
	}
	c.refreshPurviews()
	c.stats.DAPsLost++
	var touched []*request
	for _, rp := range d.running {
		if rp.ps != nil {
			c.runningByID.del(rp.id)
		}
		if rp.relayed {
			if rr := c.relayed[rp.request]; rr != nil {
				c.relayLost(rr, rp.id, d)
			}
			continue
		}
		r := c.requests[rp.request]
		if r == nil {
			continue
		}
		ps := r.portion(rp.id)
		if ps == nil || ps.finished || ps.superseded {
			continue
		}
		ps.finished = true
		ps.superseded = true
		c.trackSupersede(r, ps)
		if r.errored || r.timingOut || r.aggregating {
			continue
		}
		r.setRunning(ps.ls, ps.ls.running-1)
		if r.SQL && !slices.Contains(ps.ls.dropped, d.Addr) {
			ps.ls.dropped = append(ps.ls.dropped, d.Addr)
		}
		c.enqueue(r, ps.ls, ps.Range)
		touched = append(touched, r)
	}
	d.running = nil
	c.expire()
	for _, g := range groups {
		c.groupChanged(g)
	}
	for _, r := range touched {
		if r.live() {
			c.placeRequest(r)
		}
	}
	c.dequeueGroups(groups)
}

// end forgets a request that has been answered.
func (c *Core) end(r *request) {
	if r.ended {
		return
	}
	c.unqueueAll(r)
	// A group split made for a label set no DAP serves, that nothing of the
	// request was queued in (it failed, or arrived late), goes with it.
	for _, ls := range r.sets {
		if g := ls.qg; g != nil {
			c.dropGroupIfIdle(g)
		}
	}
	c.releaseCaller(r)
	r.ended = true
	delete(c.requests, r.ID)
	c.ended = append(c.ended, r)
	c.stats.Ended++
}

// reply answers the request with an error or timeout from the RC itself.
func (c *Core) reply(r *request, kind ReplyKind, text string) {
	c.emit(Reply{Request: r.ID, Kind: kind, Text: text, Retries: r.retries})
	c.stats.Replies[kind]++
	c.stopWork(r)
	c.end(r)
}

// reported finds what a DAP's report on a portion is about: the request and
// the portion (nil when the core no longer holds them) and the DAP whose slot
// it frees, the one the portion was sent to, whatever the report claims.
func (c *Core) reported(reqID string, portion PortionID, claimed string) (*request, *portionState, string) {
	r, ps, _, dapID := c.reportedBy(reqID, portion, claimed)
	return r, ps, dapID
}

// reportedBy is reported, and the DAP when the portion is one this core's
// DAPs execute (as it is unless the report is late or wrong): the portion is
// then found by its id in the running index instead of by the request's id
// and a search of its portions. ps.ID and ps.r tell a portion state still
// the one dispatched from one recycled since (ids are never reused).
func (c *Core) reportedBy(reqID string, portion PortionID, claimed string) (*request, *portionState, *dap, string) {
	if ps := c.runningByID.get(portion); ps != nil && ps.ID == portion {
		if r := ps.r; r != nil && !r.ended && r.ID == reqID && ps.d != nil && !ps.d.gone {
			return r, ps, ps.d, ps.dap
		}
	}
	r, ps, dapID := c.reportedByRequest(reqID, portion, claimed)
	return r, ps, nil, dapID
}

// freeSlot frees the DAP's slot for the portion: its running entry and the
// index entry of a portion this core dispatched.
func (c *Core) freeSlot(d *dap, id PortionID) (runningPortion, bool) {
	rp, ok := d.removeRunning(id)
	if ok && rp.ps != nil {
		c.runningByID.del(id)
	}
	return rp, ok
}

// reportedByRequest finds the portion through its request.
func (c *Core) reportedByRequest(reqID string, portion PortionID, claimed string) (*request, *portionState, string) {
	r := c.requests[reqID]
	var ps *portionState
	if r != nil {
		ps = r.portion(portion)
	}
	if ps != nil {
		return r, ps, ps.dap
	}
	return r, nil, claimed
}
