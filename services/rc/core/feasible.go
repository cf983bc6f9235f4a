package core

import "fmt"

// Why a DAP was not given a queued portion, in the seed's words. The timeout
// message is assembled from these; do not reword them.
const (
	ReasonNoDAP              = "No DAP covers labels/time range"
	ReasonBusy               = "Busy executing another request"
	ReasonPreviousAttempt    = "Busy executing a previous version of this request (auto-retry)"
	ReasonTimedOutDequeue    = "Timed out before we were able to dequeue"
	ReasonTimedOutResponse   = "Timed out before we could process response"
	ReasonUnavailable        = "Unavailable for unspecified reasons"
	ReasonUnknown            = "Unknown reason for not assigning request portion to DAP(s)"
	reasonVintageFmt         = "DAP reference vintage %d does not match %s reference vintage %d"
	reasonVintageQueueWord   = "queue"
	reasonVintageGlobalWord  = "global"
	errorEmptyQueue          = "Empty queue encountered"
	composeErrorPrefix       = "Request timed out, but error encountered composing message: "
	incompleteTimeoutLogLine = "Exhausted number of retries waiting for other RCs to report timeout (max=%d), composing incomplete timeout message"
)

// ReasonRequiredDropped (sql only, seed: "the request specifically required
// the listed DAPs, but they dropped from the RC"): DAPs that ran the label
// set's portions left the fleet with them, and no DAP serves what is queued.
const ReasonRequiredDropped = "Required DAPs dropped"

// Placement is asked once. One chain of feasibility checks (the model is
// Nomad's scheduler/feasible: a FeasibilityChecker per question, each
// recording why a node was filtered) both decides dispatch and writes the
// reasons of a timeout message's queue block. The queue index (group,
// vintage subqueue, purview, see queue.go) only proposes items, narrowed by
// the chain's own checks (inGroup, vintageFits, meets; ready for the DAPs a
// new request is offered to), never by copies of them: dispatch takes an
// item when the whole chain passes, and the explainer reports every check
// that fails, in the chain's order, in the seed's words.
//
// A check answers its question without allocating (dispatch runs it on every
// decision); its reason, asked only for a timeout message, may format.
type feasibilityCheck struct {
	ok func(c *Core, d *dap, it *item) bool
	// reason is the seed's words for a failure; nil for a check that only
	// decides whether the DAP is listed at all (candidate, see explain).
	reason func(c *Core, d *dap, it *item) string
	// dapOnly: the check looks at the DAP alone; a DAP that fails one can
	// take no item, and dequeue stops asking for it.
	dapOnly bool
	// quietAfter: a failure is not reported when the check at this index
	// failed too (busy with a previous attempt says more than busy).
	quietAfter int
}

// Indexes into placement, for quietAfter.
const (
	checkCandidate = iota
	checkPreviousAttempt
	checkSlot
	checkAvailable
	checkPaused
	checkVintage
	checkTimingOut
)

// placement is the chain, in the order the seed lists a DAP's reasons.
var placement = [...]feasibilityCheck{
	checkCandidate: {ok: (*Core).candidate, quietAfter: -1},
	checkPreviousAttempt: {quietAfter: -1,
		ok: func(_ *Core, d *dap, it *item) bool {
			return !d.runsPreviousAttempt(it.req.ID, it.ls.group.key, it.ls.attempt)
		},
		reason: func(*Core, *dap, *item) string { return ReasonPreviousAttempt }},
	checkSlot: {dapOnly: true, quietAfter: checkPreviousAttempt,
		ok:     func(_ *Core, d *dap, _ *item) bool { return d.freeSlots() > 0 },
		reason: func(*Core, *dap, *item) string { return ReasonBusy }},
	checkAvailable: {dapOnly: true, quietAfter: -1,
		ok:     func(_ *Core, d *dap, _ *item) bool { return d.Available },
		reason: func(*Core, *dap, *item) string { return ReasonUnavailable }},
	checkPaused: {dapOnly: true, quietAfter: -1,
		ok:     func(c *Core, d *dap, _ *item) bool { return d.pausedUntil <= c.now },
		reason: func(_ *Core, d *dap, _ *item) string { return pausedReason(d.pausedUntil) }},
	checkVintage: {quietAfter: -1,
		ok: func(c *Core, d *dap, it *item) bool {
			return c.vintageFits(d, c.queueGroupOf(it.ls), it.ls.locked, it.ls.vintage)
		},
		reason: func(c *Core, d *dap, it *item) string {
			want, word := c.wantVintage(c.queueGroupOf(it.ls), it.ls.locked, it.ls.vintage)
			return fmt.Sprintf(reasonVintageFmt, d.Vintage, word, want)
		}},
	// A request timing out has its items unqueued; this guards the moment
	// in between, and has nothing to say in a message.
	checkTimingOut: {quietAfter: -1,
		ok:     func(_ *Core, _ *dap, it *item) bool { return !it.req.timingOut },
		reason: func(*Core, *dap, *item) string { return "" }},
}

// feasible: the whole chain passes; dispatch gives the item only then.
func (c *Core) feasible(d *dap, it *item) bool {
	for i := range placement {
		if !placement[i].ok(c, d, it) {
			return false
		}
	}
	return true
}

// ready: the DAP-side checks of the chain pass (it can take some item now).
func (c *Core) ready(d *dap) bool {
	for i := range placement {
		if placement[i].dapOnly && !placement[i].ok(c, d, nil) {
			return false
		}
	}
	return true
}

// explain runs the chain for a timeout message: listed is false when the
// DAP is no candidate for the item (with none listed the reason is
// ReasonNoDAP); otherwise the reasons of every failed check, or, when all
// pass, why the DAP is idle anyway: it became able to serve the item only
// as the request timed out.
func (c *Core) explain(d *dap, it *item) (listed bool, reasons []string) {
	if !placement[checkCandidate].ok(c, d, it) {
		return false, nil
	}
	var failed [len(placement)]bool
	for i := range placement {
		chk := &placement[i]
		if i == checkCandidate || chk.ok(c, d, it) {
			continue
		}
		failed[i] = true
		if chk.quietAfter >= 0 && failed[chk.quietAfter] {
			continue
		}
		if why := chk.reason(c, d, it); why != "" {
			reasons = append(reasons, why)
		}
	}
	if len(reasons) > 0 {
		return true, reasons
	}
	r := it.req
	switch {
	case d.lastCompletionAt >= r.Deadline:
		return true, []string{ReasonTimedOutResponse}
	case d.changedAt >= r.Deadline:
		return true, []string{ReasonTimedOutDequeue}
	}
	return true, []string{ReasonUnknown}
}

// candidate reports whether a DAP could ever serve the item: same group,
// serves the table, in the request's scope and, for time-partitioned
// tables, a purview that intersects the item. Only candidates are listed in
// a queue block; with none, the reason is ReasonNoDAP.
func (c *Core) candidate(d *dap, it *item) bool {
	r := it.req
	if !c.inScope(r, d) || !c.inGroup(d, it.ls) {
		return false
	}
	if r.kind == TimePartitioned {
		return meets(d.Purview, it.rng) // the rule the queue's purview heaps index by
	}
	return true
}

// wantVintage is the vintage a DAP needs for the items of queue group g
// whose label set locked vintage v (locked) or none yet: the locked one
// ("queue"), else the group's highest ("global": the DAP must be up to
// date). The items of one subqueue share the answer (its key is the lock).
func (c *Core) wantVintage(g *queueGroup, locked bool, v uint64) (want uint64, word string) {
	if locked {
		return v, reasonVintageQueueWord
	}
	return c.groupTop(g), reasonVintageGlobalWord
}

// vintageFits is the chain's vintage check: the DAP has the vintage the
// items want. oldestFor asks it of a whole subqueue before looking in it.
func (c *Core) vintageFits(d *dap, g *queueGroup, locked bool, v uint64) bool {
	want, _ := c.wantVintage(g, locked, v)
	return d.Vintage == want
}

// inGroup: the DAP serves the label set's table and is one of its group
// (fleet.groupOf), asked of the DAP's queue groups: a group key has one queue
// group at a time (a DAP's are not dropped while it serves them, a label
// set's is looked up again once dropped), so a pointer compare replaces a
// table lookup and a compare of two strings on every decision.
func (c *Core) inGroup(d *dap, ls *labelSet) bool {
	g := c.queueGroupOf(ls)
	for _, dg := range c.dapGroups(d) {
		if dg.g == g {
			return true
		}
	}
	return false
}
