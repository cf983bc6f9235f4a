package rc

import (
	"time"

	"github.com/sg-project/sg/messages"
	"github.com/sg-project/sg/services/rc/core"
	"github.com/sg-project/sg/subjects"
)

// onRefused: a DAP or an Agg could not decode or validate a message of one of
// our requests (messages.Refusal). Its shape is checked here; whether it names
// what this RC sent (the request's Agg; the DAP, portion and attempt of a
// dispatch) is the core's to judge (core.Refused).
func (r *RC) onRefused(in input, now time.Time) {
	f, err := messages.DecodeValid[messages.Refusal](in.msg.Data)
	if err != nil {
		r.metrics.refusals.WithLabelValues("bad").Inc()
		r.bad(in, err)
		return
	}
	e := core.Refused{At: now.UnixNano(), Request: f.RequestID, Internal: f.Code == messages.CodeInternal, Reason: f.Reason, Via: f.Via}
	if f.Service == subjects.ServiceDAP {
		e.DAP, e.Portion, e.Attempt = f.ServiceID, f.PortionID, f.Attempt
	} else {
		e.Agg = f.ServiceID
	}
	r.step(e)
}

// forwardRefusal: as a secondary, pass our DAP's refusal of a relayed
// portion to the primary, on its refusal subject, as the DAP would have had
// the primary dispatched it (peers.go forwards completions alike).
func (r *RC) forwardRefusal(c core.ForwardRefusal) {
	e := c.Refused
	code := messages.CodeBadRequest
	if e.Internal {
		code = messages.CodeInternal
	}
	f := messages.NewRefusal(e.Request, subjects.ServiceDAP, e.DAP, code, e.Reason)
	f.PortionID, f.Attempt, f.Via = e.Portion, e.Attempt, e.Via
	r.metrics.peerMessages.WithLabelValues("refusal_forwarded").Inc()
	r.publish(r.cfg.Subjects.RCRefused(c.RC), nil, &f)
}

// noteRefusal counts and logs the core's verdict on a refusal.
func (r *RC) noteRefusal(c core.RefusalNoted) {
	switch {
	case c.Accepted:
		r.metrics.refusals.WithLabelValues("accepted").Inc()
		r.reqLog(c.Request).Warn().Str("by", c.By).Msg("request refused downstream: answered at once")
		return
	case c.Forwarded:
		r.metrics.refusals.WithLabelValues("forwarded").Inc()
		r.reqLog(c.Request).Warn().Str("by", c.By).Msg("relayed portion refused downstream: passed to the primary RC")
		return
	}
	r.metrics.refusals.WithLabelValues("dropped").Inc()
	// Anyone can publish refusals naming any request: counted each, logged
	// within the limit.
	r.lim.Warn(r.reqLog(c.Request), "refusal_dropped").Str("by", c.By).Str("why", c.Why).Msg("refusal dropped: forged or stale")
}
