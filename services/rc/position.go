package rc

import (
	"github.com/nats-io/nats.go"

	"github.com/sg-project/sg/messages"
)

// notePositionKey remembers by which client request id and caller a GW may
// ask for a request's position (subjects.RCPosition).
func (r *RC) notePositionKey(id string, h nats.Header) {
	p, ok := r.pending[id]
	if !ok {
		return
	}
	p.client = h.Get(messages.HdrClientRequestID)
	p.caller = h.Get(messages.HdrCaller)
}

// onPosition answers a GW's PositionQuery with the core's Position of the
// request it names, if this RC coordinates it; otherwise it stays silent
// (the GW asks every RC and takes the one that knows). The report goes to
// the GW the query names, on a subject the RC builds: never one from the
// message.
func (r *RC) onPosition(in input) {
	q, err := messages.DecodeValid[messages.PositionQuery](in.msg.Data)
	if r.bad(in, err) {
		return
	}
	for id, p := range r.pending {
		if p.client != q.ClientRequestID || (q.Caller != "" && p.caller != q.Caller) {
			continue
		}
		pos, ok := r.core.Position(id)
		if !ok {
			return
		}
		b, err := messages.Encode(messages.PositionReport{V: messages.JobVersion, RCID: r.cfg.ID, ClientRequestID: q.ClientRequestID, Status: pos.Status,
			Ahead: pos.Ahead, Queued: pos.Queued, DrainRate: pos.DrainRate, ExecMS: pos.Exec.Milliseconds()})
		if err != nil {
			r.log.Error().Err(err).Msg("encode position report")
			return
		}
		if err := r.cfg.NC.Publish(r.cfg.Subjects.GWPosition(q.GWID), b); err != nil {
			r.reqLog(p.sub.RequestID).Warn().Err(err).Msg("position report not sent")
		}
		return
	}
}
