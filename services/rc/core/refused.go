package core

// Refused: a DAP or an Agg could not decode or validate a message of the
// request (a dispatch, an expectation, a partial) and says so. The shell
// checked the refusal's shape, not its truth: anyone who may publish on the
// RC's refusal subject can name any request, so the core acts on it only if
// it names what this core really sent to that service.
type Refused struct {
	At      int64
	Request string
	// Agg is set for an Agg's refusal (it must be the request's Agg); DAP,
	// with Portion and Attempt, for a DAP's (it must be the DAP that portion
	// was dispatched to, at that attempt, and not have answered it).
	Agg     string
	DAP     string
	Portion PortionID
	Attempt uint32
	// Internal: a service sent what sg never sends (ReplyInternal); else the
	// request's own content is at fault (ReplyBadRequest).
	Internal bool
	// Reason is the refusing service's, bounded by the shell.
	Reason string
}

func (e Refused) at() int64 { return e.At }

// RefusalNoted: the core accepted a refusal (and answered its request), or
// dropped it as forged or stale (Why says which check it failed).
type RefusalNoted struct {
	Request  string
	By       string // "DAP <id>" or "Agg <id>"
	Accepted bool
	Why      string // for a dropped one
}

func (RefusalNoted) isCommand() {}

// Why a refusal is dropped.
const (
	refusedUnknown   = "no live request of that id"
	refusedNotAgg    = "not the request's Agg"
	refusedNotSent   = "no such portion dispatched to that DAP at that attempt"
	refusedAnswered  = "the portion was answered or superseded already"
	refusedTimingOut = "the request is being timed out"
	refusedRelayed   = "a portion this RC relays for a primary"
	refusedErrored   = "the Agg answers the request already, with a DAP's error"
)

// refused handles a Refused event.
func (c *Core) refused(e Refused) {
	// Deadlines first: a refusal at or after the deadline must not replace
	// the seed's timeout message.
	c.expire()
	by := "Agg " + e.Agg
	if e.DAP != "" {
		by = "DAP " + e.DAP
	}
	drop := func(why string) {
		c.stats.RefusalsDropped++
		c.emit(RefusalNoted{Request: e.Request, By: by, Why: why})
	}
	kind := ReplyBadRequest
	if e.Internal {
		kind = ReplyInternal
	}
	text := "Request refused by " + by + ": " + e.Reason
	if e.DAP != "" {
		c.refusedByDAP(e, by, kind, text, drop)
		return
	}
	r := c.requests[e.Request]
	switch {
	case r == nil || !r.live():
		drop(refusedUnknown)
	case e.Agg == "" || e.Agg != r.Agg:
		drop(refusedNotAgg)
	case r.errored:
		// As for a completion (complete.go): a DAP's error was passed to the
		// Agg (AggFail), which answers with it; a second answer here would
		// race it, and its CancelAgg could cut it short.
		drop(refusedErrored)
	case r.timingOut:
		drop(refusedTimingOut)
	default:
		c.stats.RefusalsAccepted++
		c.emit(RefusalNoted{Request: r.ID, By: by, Accepted: true})
		c.reply(r, kind, text)
	}
}

// refusedByDAP: a DAP refused a dispatch. As for a completion, the slot goes
// back only to the DAP the portion was sent to; the request ends only if the
// portion is its current attempt there, unanswered.
func (c *Core) refusedByDAP(e Refused, by string, kind ReplyKind, text string, drop func(string)) {
	if rr := c.relayed[e.Request]; rr != nil && rr.has(e.Portion) {
		// A secondary's DAP: its completion is the primary's to judge, and
		// a refusal is not passed on (the portion waits for its deadline:
		// the Agg would wait for the error partial an error completion
		// promises). The DAP runs nothing of it, so its slot is free
		// (review4: it stayed taken until the relay ended).
		if d := c.fleet.byID[e.DAP]; d != nil && d.runsExactly(e.Portion, e.Request, e.Attempt, true) {
			if _, freed := c.freeSlot(d, e.Portion); freed {
				d.lastCompletionAt = c.now
				defer c.dequeue(d)
			}
		}
		drop(refusedRelayed)
		return
	}
	r, ps, d, dapID := c.reportedBy(e.Request, e.Portion, e.DAP)
	if dapID != e.DAP || ps != nil && (ps.Attempt != e.Attempt || ps.via != "") {
		drop(refusedNotSent) // nothing freed: it names what this core did not send
		return
	}
	if d == nil {
		if ps != nil && ps.d != nil && !ps.d.gone {
			d = ps.d
		} else {
			d = c.fleet.byID[dapID]
		}
	}
	// The DAP runs nothing of it: its slot is free, as on a completion (a
	// superseded attempt or an ended request's portion holds one too), if
	// the refusal names the slot exactly as it was taken.
	if d != nil && d.runsExactly(e.Portion, e.Request, e.Attempt, false) {
		if _, freed := c.freeSlot(d, e.Portion); freed {
			d.lastCompletionAt = c.now
			defer c.dequeue(d)
		}
	}
	switch {
	case r == nil || !r.live():
		drop(refusedUnknown)
		return
	case ps == nil:
		drop(refusedNotSent)
		return
	case ps.finished || ps.superseded:
		ps.finished = true
		drop(refusedAnswered)
		return
	}
	ps.finished = true
	r.setRunning(ps.ls, ps.ls.running-1)
	switch {
	case r.errored:
		drop(refusedErrored) // the Agg answers with the first DAP's error (AggFail)
		return
	case r.timingOut:
		drop(refusedTimingOut)
		return
	}
	c.stats.RefusalsAccepted++
	c.emit(RefusalNoted{Request: r.ID, By: by, Accepted: true})
	c.reply(r, kind, text)
}

// runsExactly: the DAP holds a slot for portion id of the request, at that
// attempt, run for this core or (relayed) for a primary RC.
func (d *dap) runsExactly(id PortionID, request string, attempt uint32, relayed bool) bool {
	for _, r := range d.running {
		if r.id == id {
			return r.request == request && r.attempt == attempt && r.relayed == relayed
		}
	}
	return false
}
