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
	e := core.Refused{At: now.UnixNano(), Request: f.RequestID, Internal: f.Code == messages.CodeInternal, Reason: f.Reason}
	if f.Service == subjects.ServiceDAP {
		e.DAP, e.Portion, e.Attempt = f.ServiceID, f.PortionID, f.Attempt
	} else {
		e.Agg = f.ServiceID
	}
	r.step(e)
}

// noteRefusal counts and logs the core's verdict on a refusal.
func (r *RC) noteRefusal(c core.RefusalNoted) {
	if c.Accepted {
		r.metrics.refusals.WithLabelValues("accepted").Inc()
		r.reqLog(c.Request).Warn().Str("by", c.By).Msg("request refused downstream: answered at once")
		return
	}
	r.metrics.refusals.WithLabelValues("dropped").Inc()
	r.reqLog(c.Request).Warn().Str("by", c.By).Str("why", c.Why).Msg("refusal dropped: forged or stale")
}
