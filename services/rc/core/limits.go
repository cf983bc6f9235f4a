package core

import (
	"fmt"

	"github.com/sg-project/sg/services/limits"
	"github.com/sg-project/sg/services/retryafter"
)

// Queue limits are decided here, at admission: a new request that leaves
// portions queued while the RC's queue (or its caller's share of it) is over
// its limit is answered RATE_LIMITED, and what was dispatched of it is
// stopped. A request once admitted is never dropped for a limit: its
// requeues (lost DAP, retries) may pass the limit for a while.

// admit checks a new request's queued items against the limits.
func (c *Core) admit(r *request) {
	if r.queued == 0 {
		return // all dispatched: it waits for nothing
	}
	switch {
	case c.cfg.MaxQueued > 0 && c.stats.QueueLength > c.cfg.MaxQueued:
		c.refuse(r, limits.RCQueued, fmt.Sprintf("RC %s has %d portions queued, over its limit %s=%d (SG_RC_MAX_QUEUED)",
			c.cfg.Addr, c.stats.QueueLength-r.queued, limits.RCQueued, c.cfg.MaxQueued), c.stats.QueueLength)
	case c.cfg.MaxQueuedPerCaller > 0 && c.queuedFor(r.Caller) > c.cfg.MaxQueuedPerCaller:
		c.refuse(r, limits.CallerQueued, fmt.Sprintf("caller %q has %d portions queued at RC %s, over its limit %s=%d (SG_RC_MAX_QUEUED_PER_CALLER)",
			r.Caller, c.queuedFor(r.Caller)-r.queued, c.cfg.Addr, limits.CallerQueued, c.cfg.MaxQueuedPerCaller), c.queuedFor(r.Caller))
	}
}

// refuse answers RATE_LIMITED over a limit, with when to come back: the
// backlog at the measured drain rate of the fleet's available DAPs (their
// slots at the nominal execution time when nothing was measured yet).
func (c *Core) refuse(r *request, limit, text string, backlog int) {
	rate := c.FleetDrainRate()
	if rate <= 0 {
		slots := 0
		for _, d := range c.fleet.byID {
			if d.Available {
				slots += d.Concurrency
			}
		}
		rate = retryafter.NominalRate(slots, c.cfg.RetryAfter.NominalExec)
	}
	c.stats.Refused++
	c.replyLimit(r, limit, "Request refused: "+text, limits.RetryAfter(backlog, rate, c.cfg.RetryAfter.Params))
}

// replyLimit is reply for ReplyRateLimited.
func (c *Core) replyLimit(r *request, limit, text string, retryAfter int) {
	c.emit(Reply{Request: r.ID, Kind: ReplyRateLimited, Text: text, Retries: r.retries, Limit: limit, RetryAfter: retryAfter})
	c.stats.Replies[ReplyRateLimited]++
	c.stopWork(r)
	c.end(r)
}
