package core

// Cancellation: when a request ends at this RC by the RC's own answer
// (timeout, cancel, failure), whoever still works on it is told to stop, so
// that DAP slots and Agg memory are freed at once instead of at the DAP's
// deadline.

// cancel handles the caller's (or the GW's) cancellation. As primary the
// request is answered ReplyCancelled, its queued items dropped and its
// running portions stopped (reply -> stopWork). As secondary the DAPs
// running the primary's portions are told to stop; their answers are
// forwarded to the primary as usual. A request in its multi-RC timeout wait
// is left to finish its timeout (its status blocks are being gathered).
func (c *Core) cancel(e RequestCancelled) {
	if r := c.requests[e.Request]; r != nil && !r.timingOut {
		reason := e.Reason
		if reason == "" {
			reason = "by the caller"
		}
		c.reply(r, ReplyCancelled, "Request cancelled: "+reason)
	}
	if rr := c.relayed[e.Request]; rr != nil {
		seen := map[string]bool{}
		for _, p := range rr.portions {
			if !p.done && !seen[p.dap] {
				seen[p.dap] = true
				c.emit(CancelDAP{Request: rr.id, DAP: p.dap})
			}
		}
	}
}

// stopWork tells the DAPs that still run portions of r (any attempt: a
// superseded one holds a slot too) and the secondaries that relay some to
// stop, and the Agg to drop what it holds. Called when the RC answers r.
func (c *Core) stopWork(r *request) {
	ids := r.portionIDs(func(ps *portionState) bool { return !ps.finished })
	seen := map[string]bool{}
	for _, id := range ids {
		ps := r.portion(id)
		if ps.via != "" {
			if !seen["rc:"+ps.via] {
				seen["rc:"+ps.via] = true
				c.emit(CancelPeer{Request: r.ID, RC: ps.via})
			}
			continue
		}
		// A DAP that answered at the deadline (still shown as executing in
		// the timeout message) has nothing left to stop.
		if d := c.fleet.byID[ps.dap]; d == nil || !d.runs(id) {
			continue
		}
		if !seen[ps.dap] {
			seen[ps.dap] = true
			c.emit(CancelDAP{Request: r.ID, DAP: ps.dap})
		}
	}
	// r.Agg is "" when its Agg was lost with no other to take over.
	if len(r.portions) > 0 && r.Agg != "" {
		c.emit(CancelAgg{Request: r.ID, Agg: r.Agg})
	}
	c.stats.Cancels += len(seen)
}
