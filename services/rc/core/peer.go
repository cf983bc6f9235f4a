package core

import (
	"sort"

	"github.com/sg-project/sg/messages"
)

// The secondary role: a primary RC placed a portion on a DAP this RC owns.
// This RC relays it to the DAP, forwards the DAP's completion (or refusal:
// refused.go) to the primary, and reports its status block for the timeout message. It does
// not re-check feasibility: the primary sees every DAP's events and decided.

// relayedRequest is what a secondary keeps of a peer's request.
type relayedRequest struct {
	id       string
	primary  string
	deadline int64
	portions []*relayedPortion
	// rcvTooLate: label sets of portions that arrived after the deadline.
	rcvTooLate []string
	reported   bool
	forgetAt   int64
	// errored: a DAP of this RC failed its portion; the Agg answers with the
	// error, and until then the request is "inactive" here (seed).
	errored bool
}

type relayedPortion struct {
	id      PortionID
	dap     string
	done    bool
	tooLate bool
}

func (rr *relayedRequest) has(id PortionID) bool { return rr.find(id) != nil }

func (rr *relayedRequest) find(id PortionID) *relayedPortion {
	for _, p := range rr.portions {
		if p.id == id {
			return p
		}
	}
	return nil
}

func (c *Core) relayFor(primary, id string, deadline int64) *relayedRequest {
	rr := c.relayed[id]
	if rr == nil {
		rr = &relayedRequest{id: id, primary: primary, deadline: deadline}
		c.relayed[id] = rr
		if deadline > c.now {
			c.schedule(timerEntry{at: deadline, kind: timerRelayed, id: id})
		}
		// Kept past the deadline for as long as the primary may ask.
		rr.forgetAt = max(deadline, c.now) + 2*int64(c.cfg.MultiRCMaxWait)*int64(c.cfg.TickEvery)
		c.schedule(timerEntry{at: rr.forgetAt, kind: timerRelayForget, id: id})
	}
	return rr
}

func (c *Core) peerDispatch(e PeerDispatch) {
	disp := e.Dispatch
	rr := c.relayFor(e.Primary, disp.Portion.Request, disp.Deadline)
	if c.now >= disp.Deadline {
		rr.rcvTooLate = append(rr.rcvTooLate, disp.Portion.Labels.String())
		c.emit(ReportPeerStatus{RC: rr.primary, Request: rr.id, Block: c.secondaryBlock(rr)})
		return
	}
	d := c.fleet.byID[disp.DAP]
	if d == nil || !d.own(c.cfg.Self) {
		// The DAP left (or is not ours): the primary retries the label set.
		c.emit(ForwardCompletion{RC: rr.primary, Completion: PortionCompleted{
			At: c.now, Request: rr.id, Portion: disp.Portion.ID, DAP: disp.DAP,
			Outcome: OutcomeRetry, Message: "DAP " + disp.DAP + " is not connected to RC " + c.cfg.Self,
		}})
		return
	}
	rr.portions = append(rr.portions, &relayedPortion{id: disp.Portion.ID, dap: d.ID})
	d.running = append(d.running, runningPortion{id: disp.Portion.ID, request: rr.id, key: d.key, attempt: disp.Portion.Attempt, relayed: true, started: c.now})
	disp.ViaRC = ""
	c.stats.Relayed++
	x := c.dispatches.new()
	*x = disp
	c.emit(x)
}

func (c *Core) relayCompleted(rr *relayedRequest, e PortionCompleted) {
	p := rr.find(e.Portion)
	if p.done {
		return
	}
	if e.Outcome == OutcomeTimeout && c.now >= rr.deadline {
		// Executing when time ran out: still shown as such (see completed).
		c.emit(ForwardCompletion{RC: rr.primary, Completion: e})
		return
	}
	p.done = true
	p.tooLate = c.now >= rr.deadline
	if e.Outcome == OutcomeError {
		rr.errored = true
	}
	c.emit(ForwardCompletion{RC: rr.primary, Completion: e})
}

func (c *Core) relayLost(rr *relayedRequest, id PortionID, d *dap) {
	p := rr.find(id)
	if p == nil || p.done {
		return
	}
	p.done = true
	c.emit(ForwardCompletion{RC: rr.primary, Completion: PortionCompleted{
		At: c.now, Request: rr.id, Portion: id, DAP: d.ID,
		Outcome: OutcomeRetry, Message: "DAP " + d.ID + " lost",
	}})
}

// relayDeadline: a secondary may see the deadline first; if its DAPs are
// still running it tells the primary.
func (c *Core) relayDeadline(rr *relayedRequest) {
	rr.reported = true
	for _, p := range rr.portions {
		if !p.done {
			c.emit(ReportPeerStatus{RC: rr.primary, Request: rr.id, Block: c.secondaryBlock(rr)})
			return
		}
	}
}

func (c *Core) peerStatusQuery(e PeerStatusQuery) {
	rr := c.relayed[e.Request]
	block := renderBlock(blockFacts{rc: c.cfg.Addr, status: messages.StatusUnknown})
	if rr != nil {
		block = c.secondaryBlock(rr)
	}
	c.emit(ReportPeerStatus{RC: e.Primary, Request: e.Request, Block: block})
}

func (c *Core) peerStatusReport(e PeerStatusReport) {
	r := c.requests[e.Request]
	if r == nil {
		return
	}
	if r.peerBlocks == nil {
		r.peerBlocks = map[string]string{}
	}
	r.peerBlocks[e.RC] = e.Block
	if r.timingOut && len(c.unreported(r)) == 0 {
		c.finishTimeout(r)
	}
}

// secondaryBlock: executing while a DAP runs, completed when all are done,
// received too late when the portions came after the deadline.
func (c *Core) secondaryBlock(rr *relayedRequest) string {
	b := blockFacts{rc: c.cfg.Addr}
	seen := map[string]bool{}
	for _, p := range rr.portions {
		addr := p.dap
		if d := c.fleet.byID[p.dap]; d != nil {
			addr = d.Addr
		}
		switch {
		case !p.done && !seen[addr]:
			b.daps = append(b.daps, addr)
		case p.tooLate && !seen[addr]:
			b.respTooLate = append(b.respTooLate, addr)
		}
		seen[addr] = true
	}
	sort.Strings(b.daps)
	sort.Strings(b.respTooLate)
	switch {
	case len(rr.portions) == 0 && len(rr.rcvTooLate) > 0:
		b.status = messages.StatusReceivedTooLate
		b.rcvTooLate = rr.rcvTooLate
	case rr.errored:
		// Seed: a secondary whose DAPs are all done reports no more fields;
		// one whose DAPs still run lists them (dap, respTooLate).
		b.status = messages.StatusInactive
	case len(b.daps) > 0 || len(b.respTooLate) > 0:
		b.status = messages.StatusExecuting
	default:
		b.status = messages.StatusCompleted
	}
	return renderBlock(b)
}
