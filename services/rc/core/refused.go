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
	// Via is the secondary RC that relayed the refused dispatch for this
	// (primary) RC and forwards its DAP's refusal (ForwardRefusal); "" for a
	// refusal the service sent this RC itself. It must be the route the
	// portion was dispatched by.
	Via string
	// Internal: a service sent what sg never sends (ReplyInternal); else the
	// request's own content is at fault (ReplyBadRequest).
	Internal bool
	// Reason is the refusing service's, bounded by the shell.
	Reason string
}

func (e Refused) at() int64 { return e.At }

// RefusalNoted: the core accepted a refusal (and answered its request),
// forwarded it to the primary RC of a portion it relays, or dropped it as
// forged or stale (Why says which check it failed).
type RefusalNoted struct {
	Request   string
	By        string // "DAP <id>" or "Agg <id>"
	Accepted  bool
	Forwarded bool
	Why       string // for a dropped one
}

func (RefusalNoted) isCommand() {}

// ForwardRefusal: as a secondary, pass a DAP's refusal of a relayed portion
// to the primary RC (as ForwardCompletion passes a completion), which ends
// the request; Refused.Via is this RC.
type ForwardRefusal struct {
	RC      string
	Refused Refused
}

func (ForwardRefusal) isCommand() {}

// Why a refusal is dropped.
const (
	refusedUnknown   = "no live request of that id"
	refusedNotAgg    = "not the request's Agg"
	refusedNotSent   = "no such portion dispatched to that DAP at that attempt"
	refusedAnswered  = "the portion was answered or superseded already"
	refusedTimingOut = "the request is being timed out"
	refusedRelayed   = "a portion this RC relays for a primary, not running so on that DAP"
	refusedRoute     = "not the route the portion was dispatched by"
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
	case e.Via != "":
		drop(refusedRoute) // an Agg refuses to the primary itself
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
		c.refusedRelayed(rr, e, by, drop)
		return
	}
	r, ps, d, dapID := c.reportedBy(e.Request, e.Portion, e.DAP)
	if dapID != e.DAP || ps != nil && ps.Attempt != e.Attempt {
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
	// A portion placed through a secondary is refused by way of it (the DAP
	// refuses to the RC that dispatched it: ForwardRefusal), one placed on
	// this RC's own DAP directly.
	route := ""
	if ps != nil {
		route = ps.via
	} else if d != nil && !d.own(c.cfg.Self) {
		route = d.RC
	}
	if e.Via != route {
		drop(refusedRoute) // nothing freed
		return
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

// refusedRelayed: as a secondary, a DAP of this RC refused a portion relayed
// for a primary. The DAP runs nothing of it, so its slot is free; the
// refusal goes on to the primary (ForwardRefusal), whose request it ends at
// once, as a completion is forwarded (review4: it was dropped here, and the
// primary's request waited for its deadline). Only a refusal that names the
// slot exactly as it was taken, not yet ended, goes on: any other is forged
// or stale and dropped here, freeing nothing.
func (c *Core) refusedRelayed(rr *relayedRequest, e Refused, by string, drop func(string)) {
	p := rr.find(e.Portion)
	d := c.fleet.byID[e.DAP]
	if e.Via != "" || p.done || p.dap != e.DAP || d == nil || !d.runsExactly(e.Portion, e.Request, e.Attempt, true) {
		drop(refusedRelayed)
		return
	}
	if _, freed := c.freeSlot(d, e.Portion); freed {
		d.lastCompletionAt = c.now
		defer c.dequeue(d)
	}
	p.done = true
	p.tooLate = c.now >= rr.deadline
	e.Via = c.cfg.Self
	c.stats.RefusalsForwarded++
	c.emit(RefusalNoted{Request: e.Request, By: by, Forwarded: true})
	c.emit(ForwardRefusal{RC: rr.primary, Refused: e})
}
