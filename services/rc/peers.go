package rc

import (
	"time"

	"github.com/sg-project/sg/messages"
	"github.com/sg-project/sg/services/rc/core"
)

// The multi-RC roles, carried out over NATS. The core decides (primary: place
// a portion on a peer's DAP; secondary: relay, forward, report); this file
// only moves its commands and events.
//
//	primary                         secondary (owns the DAP)
//	Dispatch{ViaRC}  -- PeerPortion -->  PeerDispatch -> Dispatch -> DAP
//	PortionCompleted <-- PortionCompletion (forwarded) -- ForwardCompletion <- DAP
//	Refused{Via}     <-- Refusal{Via} (forwarded) ------ ForwardRefusal <- DAP (refused.go)
//	QueryPeerStatus  -- SecondaryQuery -->  PeerStatusQuery
//	PeerStatusReport <-- PeerStatusBlock --  ReportPeerStatus
//
// A secondary needs the request's arguments to dispatch; it keeps them per
// request (relayed) until the primary can no longer ask about it.

// relayInfo is what the secondary's shell keeps of a peer's request.
type relayInfo struct {
	primary string
	tmpl    messages.PortionDispatch // API, Args, LogCorr of the request
	forget  time.Time
}

// peerRC is what a primary knows of another RC from its announcements: a
// new start time or silence means its relayed portions will never complete.
type peerRC struct {
	startedAt int64
	lastSeen  time.Time
	period    time.Duration
}

// viaPortion: a portion this RC (primary) placed on a peer's DAP.
type viaPortion struct {
	rc  string
	dap string
}

func (r *RC) sendPeerPortion(c core.Dispatch, m messages.PortionDispatch) {
	pp := messages.PeerPortion{V: messages.PortionVersion, PrimaryID: r.cfg.ID, DAPID: c.DAP, Table: c.Table,
		Retries: uint32(c.Retries), QueuedAt: c.QueuedAt, Dispatch: m}
	if p := r.pending[c.Portion.Request]; p != nil {
		if p.via == nil {
			p.via = map[core.PortionID]viaPortion{}
		}
		p.via[c.Portion.ID] = viaPortion{rc: c.ViaRC, dap: c.DAP}
	}
	r.metrics.peerMessages.WithLabelValues("portion_sent").Inc()
	r.reqDebug(m.RequestID).Str("dap", c.DAP).Str("secondary", c.ViaRC).Uint64("portion", uint64(m.PortionID)).Msg("dispatch via secondary RC")
	r.publish(r.cfg.Subjects.RCSecondaryDispatch(c.ViaRC), nil, &pp)
}

// peerPortion: as a secondary, run a primary's portion on our DAP.
func (r *RC) peerPortion(pp messages.PeerPortion, now time.Time) {
	d := pp.Dispatch
	r.metrics.peerMessages.WithLabelValues("portion_relayed").Inc()
	ri := r.relayed[d.RequestID]
	if ri == nil {
		ri = &relayInfo{primary: pp.PrimaryID}
		r.relayed[d.RequestID] = ri
	}
	tmpl := d
	tmpl.Args, tmpl.ArgsJSON = append([]byte(nil), d.Args...), append([]byte(nil), d.ArgsJSON...) // as they came: msgpack or JSON
	ri.tmpl = tmpl
	// Kept for as long as the core keeps the relayed request (it may still be
	// asked for its status after the deadline), plus a timer period.
	ri.forget = time.Unix(0, d.Deadline).Add(time.Duration(2*r.cfg.MultiRCMaxWait+1) * r.cfg.TickEvery)
	r.reqDebug(d.RequestID).Str("primary", pp.PrimaryID).Str("dap", pp.DAPID).Uint64("portion", uint64(d.PortionID)).Msg("relaying portion for primary RC")
	r.step(core.PeerDispatch{At: now.UnixNano(), Primary: pp.PrimaryID, Dispatch: core.Dispatch{
		Portion: core.Portion{ID: d.PortionID, Request: d.RequestID, Labels: d.Labels, Range: d.Range,
			Attempt: d.Attempt, PurviewVersion: d.PurviewVersion, Vintage: d.ReferenceVintage},
		DAP: pp.DAPID, API: d.API, Table: pp.Table, Agg: d.AggID, Deadline: d.Deadline,
		Retries: int(pp.Retries), QueuedAt: pp.QueuedAt,
	}})
}

// forwardCompletion: as a secondary, pass our DAP's completion to the primary.
func (r *RC) forwardCompletion(c core.ForwardCompletion) {
	e := c.Completion
	m := messages.PortionCompletion{V: messages.PortionVersion, RequestID: e.Request, PortionID: e.Portion,
		DAPID: e.DAP, Message: truncateText(e.Message)}
	m.Outcome, m.Code = e.Outcome.OnWire(messages.Code(e.Code))
	if m.Outcome == messages.OutcomeError && m.Code == messages.CodeOK {
		m.Code = messages.CodeErr
	}
	if rec := r.daps[e.DAP]; rec != nil {
		m.PurviewVersion, m.ReferenceVintage = rec.reg.PurviewVersion, rec.reg.ReferenceVintage
	}
	r.metrics.peerMessages.WithLabelValues("completion_forwarded").Inc()
	r.publish(r.cfg.Subjects.RCCompletion(c.RC), nil, &m)
}

func (r *RC) queryPeer(c core.QueryPeerStatus) {
	q := messages.SecondaryQuery{V: messages.PortionVersion, RequestID: c.Request, PrimaryRCID: r.cfg.ID}
	r.metrics.peerMessages.WithLabelValues("status_query_sent").Inc()
	r.reqDebug(c.Request).Str("secondary", c.RC).Msg("asking secondary RC for its status")
	r.publish(r.cfg.Subjects.RCSecondaryQuery(c.RC), nil, &q)
}

func (r *RC) reportPeer(c core.ReportPeerStatus) {
	b := messages.PeerStatusBlock{V: messages.PortionVersion, RequestID: c.Request, RCID: r.cfg.ID, Block: c.Block}
	r.metrics.peerMessages.WithLabelValues("status_sent").Inc()
	r.reqDebug(c.Request).Str("primary", c.RC).Str("block", c.Block).Msg("status reported to primary RC")
	r.publish(r.cfg.Subjects.RCSecondaryStatus(c.RC), nil, &b)
}

// onRCAnnounce tracks the other RCs. When one restarts (new start time) or
// drains, the portions this RC relayed through it will never complete: they
// are completed as RETRY, so the core places them again (through the new
// incarnation, or elsewhere) instead of waiting for the deadline.
func (r *RC) onRCAnnounce(a messages.RCAnnouncement, now time.Time) {
	if a.RCID == r.cfg.ID {
		return
	}
	p := r.peers[a.RCID]
	if p == nil {
		p = &peerRC{startedAt: a.StartedAt}
		r.peers[a.RCID] = p
	}
	p.lastSeen, p.period = now, r.cfg.AnnounceEvery
	switch {
	case a.Draining:
		r.peerGone(a.RCID, "secondary RC "+a.RCID+" stopped", now)
		delete(r.peers, a.RCID)
	case a.StartedAt != p.startedAt:
		p.startedAt = a.StartedAt
		r.peerGone(a.RCID, "secondary RC "+a.RCID+" restarted", now)
	}
}

// checkPeers drops RCs silent for ten announcement periods (at least 3 s):
// a busy secondary that misses a few announcements must not have its portions
// retried (each retry counts against SG_MAX_RETRY). A restart or a stop is
// acted on at once (onRCAnnounce).
func (r *RC) checkPeers(now time.Time) {
	for id, p := range r.peers {
		if now.Sub(p.lastSeen) > max(10*p.period, 3*time.Second) {
			delete(r.peers, id)
			r.log.Warn().Str("peer_rc", id).Dur("silent", now.Sub(p.lastSeen)).Msg("peer RC lost: missed announcements")
			r.peerGone(id, "secondary RC "+id+" lost", now)
		}
	}
}

func (r *RC) peerGone(rcID, why string, now time.Time) {
	type lost struct {
		req   string
		id    core.PortionID
		dapID string
	}
	var all []lost
	for reqID, p := range r.pending {
		for id, v := range p.via {
			if v.rc == rcID {
				all = append(all, lost{reqID, id, v.dap})
			}
		}
	}
	for _, l := range all {
		r.reqLog(l.req).Info().Str("secondary", rcID).Str("dap", l.dapID).Msg("relayed portion lost with its secondary RC: retrying")
		r.completePortion(core.PortionCompleted{At: now.UnixNano(), Request: l.req, Portion: l.id, DAP: l.dapID,
			Outcome: core.OutcomeRetry, Message: why})
	}
}

// completePortion feeds a completion and forgets the portion's relay record.
func (r *RC) completePortion(e core.PortionCompleted) {
	if p := r.pending[e.Request]; p != nil && p.via != nil {
		delete(p.via, e.Portion)
	}
	r.step(e)
}

// forgetRelayed drops the arguments of peers' requests the core no longer asks for.
func (r *RC) forgetRelayed(now time.Time) {
	for id, ri := range r.relayed {
		if now.After(ri.forget) {
			delete(r.relayed, id)
		}
	}
}

func truncateText(s string) string {
	const limit = 60 << 10
	if len(s) > limit {
		return s[:limit]
	}
	return s
}
