package rc

import (
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sg-project/sg/messages"
	"github.com/sg-project/sg/services/defaults"
	"github.com/sg-project/sg/services/rc/core"
	"github.com/sg-project/sg/subjects"
)

// handle turns one NATS message into core events. Bytes from the network are
// decoded with messages.DecodeValid, which never panics; a bad message is
// logged and counted, and changes nothing.
func (r *RC) handle(in input) {
	now := r.cfg.Now()
	if dapID, event, ok := r.cfg.Subjects.ParseDAPEvent(in.subject); ok {
		r.dapEvent(dapID, event, in.msg.Data, now)
		return
	}
	if id := r.aggOf(in.subject); id != "" {
		r.onAggHeartbeat(id, in.msg.Data, now)
		return
	}
	switch in.subject {
	case r.own.secondaryDispatch:
		pp, err := messages.DecodeValid[messages.PeerPortion](in.msg.Data)
		if r.bad(in, err) {
			return
		}
		r.peerPortion(pp, now)
	case r.own.secondaryQuery:
		q, err := messages.DecodeValid[messages.SecondaryQuery](in.msg.Data)
		if r.bad(in, err) {
			return
		}
		r.metrics.peerMessages.WithLabelValues("status_query_received").Inc()
		r.step(core.PeerStatusQuery{At: now.UnixNano(), Primary: q.PrimaryRCID, Request: q.RequestID})
	case r.own.secondaryStatus:
		b, err := messages.DecodeValid[messages.PeerStatusBlock](in.msg.Data)
		if r.bad(in, err) {
			return
		}
		r.metrics.peerMessages.WithLabelValues("status_received").Inc()
		r.reqDebug(b.RequestID).Str("secondary", b.RCID).Str("block", b.Block).Msg("secondary RC status")
		r.step(core.PeerStatusReport{At: now.UnixNano(), RC: b.RCID, Request: b.RequestID, Block: b.Block})
	case r.own.submit:
		sub, err := messages.DecodeValid[messages.RCSubmission](in.msg.Data)
		if r.bad(in, err) {
			return
		}
		r.submit(sub, in.msg.Header.Get(messages.HdrCaller), now)
		r.notePositionKey(sub.RequestID, in.msg.Header)
	case r.own.position:
		r.onPosition(in)
	case r.own.completion:
		c, err := messages.DecodeValid[messages.PortionCompletion](in.msg.Data)
		if r.bad(in, err) {
			return
		}
		if r.throttled(c, in.msg.Header, now) { // throttle.go
			return
		}
		r.completion(c, in.msg.Header, now)
	case r.own.cancel:
		r.onCancel(in, now)
	case r.own.refused:
		r.onRefused(in, now) // refused.go
	case r.own.aggDone:
		d, err := messages.DecodeValid[messages.AggDone](in.msg.Data)
		if r.bad(in, err) {
			return
		}
		for _, e := range d.Done {
			if e.TimedOut {
				r.reqLog(e.RequestID).Info().Str("agg", d.AggID).Str("ai", e.Status.AI).Msg("the Agg's execution timed out")
				r.step(core.AggTimedOut{At: now.UnixNano(), Request: e.RequestID, Agg: d.AggID})
				continue
			}
			r.step(core.AggDone{At: now.UnixNano(), Request: e.RequestID})
			r.finish(e.RequestID, e.Status, time.Duration(e.Held))
		}
	case r.announceOf(in.subject): // last: every other case is one comparison
		a, err := messages.DecodeValid[messages.RCAnnouncement](in.msg.Data)
		if r.bad(in, err) {
			return
		}
		r.onRCAnnounce(a, now)
	default:
		r.metrics.badMessages.Inc()
		r.lim.Warn(&r.log, "unknown_subject").Str("subject", in.subject).Msg("message on an unknown RC subject")
	}
}

// onCancel: a GW gave up on a drive (client cancel or deadline), or our
// primary cancels a request we relay. The body is empty; the id travels in
// Sg-Request-Id.
func (r *RC) onCancel(in input, now time.Time) {
	id := in.msg.Header.Get(messages.HdrRequestID)
	if err := subjects.Validate("request id", id); err != nil {
		r.bad(in, err)
		return
	}
	_, primary := r.pending[id]
	_, secondary := r.relayed[id]
	if !primary && !secondary {
		r.reqDebug(id).Msg("cancel for a request this RC does not hold")
		return
	}
	r.metrics.cancels.WithLabelValues("received").Inc()
	r.reqLog(id).Info().Bool("primary", primary).Msg("request cancelled")
	r.step(core.RequestCancelled{At: now.UnixNano(), Request: id, Reason: "by the caller"})
}

func (r *RC) bad(in input, err error) bool {
	if err == nil {
		return false
	}
	r.metrics.badMessages.Inc()
	r.lim.Warn(&r.log, "bad_message").Err(err).Str("subject", in.subject).Int("bytes", len(in.msg.Data)).Msg("bad message")
	return true
}

func (r *RC) dapEvent(dapID, event string, data []byte, now time.Time) {
	at := now.UnixNano()
	switch event {
	case subjects.EventRegister:
		reg, err := messages.DecodeValid[messages.DAPRegistration](data)
		if err != nil || reg.DAPID != dapID {
			r.badDAP(dapID, event, err)
			return
		}
		// Until its first heartbeat says otherwise, a DAP is assumed to beat
		// at the DAP runtime's default period.
		r.daps[dapID] = &dapRecord{reg: reg, lastSeen: now, interval: defaultDAPHeartbeat}
		r.log.Info().Str("dap", dapID).Str("tier", string(reg.Tier)).Str("labels", reg.Labels.Key()).Msg("dap registered")
		r.step(core.DAPRegistered{At: at, DAP: dapInfo(reg)})
	case subjects.EventStatus:
		u, err := messages.DecodeValid[messages.DAPStatusUpdate](data)
		rec := r.daps[dapID]
		if err != nil || rec == nil || u.DAPID != dapID {
			r.badDAP(dapID, event, err)
			return
		}
		rec.reg.Available, rec.reg.Purview, rec.reg.PurviewVersion = u.Available, u.Purview, u.PurviewVersion
		rec.lastSeen = now
		r.step(core.DAPStatusChanged{At: at, DAP: dapInfo(rec.reg)})
	case subjects.EventVintage:
		u, err := messages.DecodeValid[messages.DAPVintageUpdate](data)
		rec := r.daps[dapID]
		if err != nil || rec == nil || u.DAPID != dapID {
			r.badDAP(dapID, event, err)
			return
		}
		rec.reg.ReferenceVintage = u.ReferenceVintage
		rec.lastSeen = now
		r.step(core.DAPVintageChanged{At: at, DAP: dapID, Vintage: u.ReferenceVintage})
	case subjects.EventHeartbeat:
		hb, err := messages.DecodeValid[messages.DAPHeartbeat](data)
		if err != nil {
			r.badDAP(dapID, event, err)
			return
		}
		rec := r.daps[dapID]
		if rec == nil {
			// A DAP this RC dropped, or never heard register: take it back.
			if reg := hb.Registration; reg != nil && reg.DAPID == dapID && reg.Validate() == nil {
				r.daps[dapID] = &dapRecord{reg: *reg, lastSeen: now, interval: defaultDAPHeartbeat}
				r.log.Info().Str("dap", dapID).Msg("dap registered from its heartbeat")
				r.step(core.DAPRegistered{At: at, DAP: dapInfo(*reg)})
			}
			return
		}
		rec.lastSeen = now
		if hb.IntervalMS > 0 {
			rec.interval = time.Duration(hb.IntervalMS) * time.Millisecond
			r.heardInterval(rec.interval)
		}
		// A missed status or vintage event is noticed here.
		if hb.PurviewVersion != rec.reg.PurviewVersion {
			rec.reg.PurviewVersion = hb.PurviewVersion
			r.step(core.DAPStatusChanged{At: at, DAP: dapInfo(rec.reg)})
		}
		if hb.ReferenceVintage != rec.reg.ReferenceVintage {
			rec.reg.ReferenceVintage = hb.ReferenceVintage
			r.step(core.DAPVintageChanged{At: at, DAP: dapID, Vintage: hb.ReferenceVintage})
		}
	case subjects.EventLost:
		if l, err := messages.DecodeValid[messages.DAPLost](data); err != nil || l.DAPID != dapID {
			r.badDAP(dapID, event, err) // a garbage body must not drop a DAP
			return
		}
		if _, ok := r.daps[dapID]; !ok {
			return
		}
		delete(r.daps, dapID)
		r.log.Info().Str("dap", dapID).Msg("dap lost")
		r.step(core.DAPLost{At: at, DAP: dapID})
	}
}

func (r *RC) badDAP(dapID, event string, err error) {
	r.metrics.badMessages.Inc()
	r.lim.Warn(&r.log, "bad_dap_event").Err(err).Str("dap", dapID).Str("event", event).Msg("bad or out-of-order DAP event")
}

// checkHeartbeats drops DAPs silent for three heartbeat intervals; what they
// were running is requeued by the core.
func (r *RC) checkHeartbeats() {
	now := r.cfg.Now()
	for id, rec := range r.daps {
		if now.Sub(rec.lastSeen) > 3*rec.interval {
			delete(r.daps, id)
			r.log.Warn().Str("dap", id).Dur("silent", now.Sub(rec.lastSeen)).Msg("dap lost: missed heartbeats")
			r.step(core.DAPLost{At: now.UnixNano(), DAP: id})
		}
	}
}

// defaultDAPHeartbeat is the DAP runtime's default heartbeat period.
const defaultDAPHeartbeat = defaults.DAPHeartbeat

func dapInfo(reg messages.DAPRegistration) core.DAPInfo {
	tables := make(map[string]core.TableKind, len(reg.Tables))
	for _, t := range reg.Tables {
		tables[t.Name] = t.Kind
	}
	return core.DAPInfo{
		ID: reg.DAPID, Addr: reg.Addr, RC: reg.RCID, Assembly: reg.Assembly,
		Labels: reg.Labels, Tier: reg.Tier,
		Purview: reg.Purview, Tables: tables,
		PurviewVersion: reg.PurviewVersion, Vintage: reg.ReferenceVintage,
		Available: reg.Available, Concurrency: reg.Concurrency,
	}
}

func (r *RC) completion(c messages.PortionCompletion, h nats.Header, now time.Time) {
	out := c.Class() // a timeout, a refusal (the DAP's queue is full) or as sent
	r.reqDebugFrom(c.RequestID, h).Str("dap", c.DAPID).Uint64("portion", uint64(c.PortionID)).Stringer("outcome", c.Outcome).Msg("portion completed")
	// A RETRY carries the DAP's current watermarks: learn them now, so the
	// retry is placed on what the DAP really holds, not on an event still
	// in flight.
	if rec := r.daps[c.DAPID]; rec != nil && out == core.OutcomeRetry {
		at := now.UnixNano()
		// The purview comes with its version: learning the version alone
		// would send ranges the DAP has given away, at a matching version.
		if c.PurviewVersion != rec.reg.PurviewVersion || (c.Purview != nil && *c.Purview != rec.reg.Purview) {
			rec.reg.PurviewVersion = c.PurviewVersion
			if c.Purview != nil && c.Purview.Valid() {
				rec.reg.Purview = *c.Purview
			}
			r.step(core.DAPStatusChanged{At: at, DAP: dapInfo(rec.reg)})
		}
		if c.ReferenceVintage != rec.reg.ReferenceVintage {
			rec.reg.ReferenceVintage = c.ReferenceVintage
			r.step(core.DAPVintageChanged{At: at, DAP: c.DAPID, Vintage: c.ReferenceVintage})
		}
	}
	r.completePortion(core.PortionCompleted{At: now.UnixNano(), Request: c.RequestID, Portion: c.PortionID, DAP: c.DAPID,
		Outcome: out, Code: int(c.Code), Message: c.Message})
}

// rcOf returns the RC id of an RC announcement subject ("" otherwise).
// ownSubjects are the subjects an RC receives on, built once: every message
// is matched against them, and building them per message cost a Sprintf each.
type ownSubjects struct {
	submit, position, completion, cancel, aggDone      string
	refused                                            string
	secondaryDispatch, secondaryQuery, secondaryStatus string
	rcEventPrefix, aggEventPrefix                      string
}

func newOwnSubjects(s subjects.Subjects, id string) ownSubjects {
	return ownSubjects{
		submit: s.RCSubmit(id), position: s.RCPosition(id), completion: s.RCCompletion(id), cancel: s.RCCancel(id),
		aggDone: s.RCAggDone(id), refused: s.RCRefused(id), secondaryDispatch: s.RCSecondaryDispatch(id), secondaryQuery: s.RCSecondaryQuery(id),
		secondaryStatus: s.RCSecondaryStatus(id),
		rcEventPrefix:   s.Prefix() + ".evt.rc.", aggEventPrefix: s.Prefix() + ".evt.agg.",
	}
}

// announceOf is subject if it is an RC's announcement (for handle's
// switch), else "", which no message's subject equals.
func (r *RC) announceOf(subject string) string {
	if r.rcOf(subject) != "" && strings.HasSuffix(subject, ".announce") {
		return subject
	}
	return ""
}

func (r *RC) rcOf(subject string) string {
	rest, ok := strings.CutPrefix(subject, r.own.rcEventPrefix)
	if !ok {
		return ""
	}
	id, ok := strings.CutSuffix(rest, ".announce")
	if !ok || strings.Contains(id, ".") {
		return ""
	}
	return id
}
