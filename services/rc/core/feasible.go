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

// candidate reports whether a DAP could ever serve the item: same group,
// serves the table, in the request's scope and, for time-partitioned
// tables, a purview that intersects the item. Only candidates are listed in
// a queue block; with none, the reason is ReasonNoDAP.
func (c *Core) candidate(d *dap, it *item) bool {
	r := it.req
	if !d.serves(r.Table) || !c.inScope(r, d) {
		return false
	}
	if c.fleet.groupOf(d, r.Table) != it.ls.group {
		return false
	}
	if r.kind == TimePartitioned {
		_, _, ok := overlap(it.start, it.end, d.Start, d.End)
		return ok
	}
	return true
}

// wantVintage is the vintage a DAP needs for the item: the label set's
// locked vintage if it has one ("queue"), else the group's highest
// ("global": the DAP must be up to date).
func (c *Core) wantVintage(it *item) (v uint64, word string) {
	if it.ls.locked {
		return it.ls.vintage, reasonVintageQueueWord
	}
	v, _ = c.fleet.maxVintage(it.ls.group)
	return v, reasonVintageGlobalWord
}

// reasons is the feasibility chain for a candidate DAP and a queued item,
// one link per question, collecting every failed check (the seed joins
// several reasons with commas). Dispatch uses the same questions through
// the queue index (group, vintage, purview) and ready/eligible below.
func (c *Core) reasons(d *dap, it *item) []string {
	var out []string
	r := it.req
	// Has the DAP reported back from an earlier attempt of this label set?
	prev := d.runsPreviousAttempt(r.ID, it.ls.group.key, it.ls.attempt)
	if prev {
		out = append(out, ReasonPreviousAttempt)
	}
	// Does it have a free slot?
	if !prev && d.freeSlots() <= 0 {
		out = append(out, ReasonBusy)
	}
	// Is it available?
	if !d.Available {
		out = append(out, ReasonUnavailable)
	}
	// Is it paused by a downstream rate limit (throttle.go)?
	if d.pausedUntil > c.now {
		out = append(out, pausedReason(d.pausedUntil))
	}
	// Is its reference vintage the one the label set needs?
	if want, word := c.wantVintage(it); d.Vintage != want {
		out = append(out, fmt.Sprintf(reasonVintageFmt, d.Vintage, word, want))
	}
	if len(out) > 0 {
		return out
	}
	// Every check passes: the DAP became able to serve the item only as the
	// request timed out.
	switch {
	case d.lastCompletionAt >= r.Deadline:
		return []string{ReasonTimedOutResponse}
	case d.changedAt >= r.Deadline:
		return []string{ReasonTimedOutDequeue}
	}
	return []string{ReasonUnknown}
}

// ready: the DAP-side checks of dispatch (available, not paused, a free slot).
func (c *Core) ready(d *dap) bool {
	return d.Available && d.pausedUntil <= c.now && d.freeSlots() > 0
}

// eligible: the item-side checks that the queue index does not answer.
func (c *Core) eligible(d *dap, it *item) bool {
	r := it.req
	return !r.timingOut && c.inScope(r, d) && !d.runsPreviousAttempt(r.ID, it.ls.group.key, it.ls.attempt)
}
