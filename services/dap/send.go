package dap

import (
	"fmt"

	"github.com/nats-io/nats.go"
	"github.com/sg-project/sg/messages"
)

// headers are the routing headers of everything sent about dispatch p, plus rc/ac/ai,
// so that the Agg and the RC can route and log without decoding the body.
func headers(p *messages.PortionDispatch, st messages.Status) nats.Header {
	h := nats.Header{}
	p.Routing().Write(h)
	st.Write(h)
	return h
}

// sendPartial sends the partial result of p to its Agg, in chunks when the message is
// above the connection's max payload (nothing is cut silently).
func (d *DAP) sendPartial(p *messages.PortionDispatch, st messages.Status, payload []byte) error {
	return d.sendWindow(p, st, payload, 0, false)
}

// sendWindow sends one window of the partial result of p (window.go); a
// partial in one piece is window 0 without more.
func (d *DAP) sendWindow(p *messages.PortionDispatch, st messages.Status, payload []byte, window uint32, more bool) error {
	pr := messages.PartialResult{V: messages.PortionVersion, RequestID: p.RequestID, PortionID: p.PortionID,
		Attempt: p.Attempt, DAPID: d.cfg.ID, Status: st, Payload: payload, Window: window, More: more}
	if err := pr.Validate(); err != nil {
		return err
	}
	data, err := messages.Encode(&pr)
	if err != nil {
		return err
	}
	subject := d.cfg.Subjects.AggPartial(p.AggID)
	h := headers(p, st)
	if int64(len(data)+headerSize(h)) > d.cfg.NC.MaxPayload() {
		if _, err := messages.SendChunked(d.cfg.NC, subject, h, data, 0); err != nil {
			return fmt.Errorf("send partial result of %d bytes in chunks: %w", len(data), err)
		}
		return nil
	}
	return d.cfg.NC.PublishMsg(&nats.Msg{Subject: subject, Header: h, Data: data})
}

// complete fills the identity and versions of a completion and sends it to the RC.
func (d *DAP) complete(p *messages.PortionDispatch, c messages.PortionCompletion) {
	c.V, c.RequestID, c.PortionID, c.Attempt, c.DAPID = messages.PortionVersion, p.RequestID, p.PortionID, p.Attempt, d.cfg.ID
	d.mu.Lock()
	c.PurviewVersion, c.ReferenceVintage = d.state.pv, d.state.rv
	purview := d.state.purview
	c.Purview = &purview
	d.mu.Unlock()
	if err := c.Validate(); err != nil {
		d.portionLog(p).Error().Err(err).Msg("completion not sent")
		return
	}
	st := messages.Status{RC: c.Code, AC: c.Code, AI: c.Message}
	if c.Code != messages.CodeOK {
		st.AC = messages.CodeErr
	}
	_ = d.publish(d.cfg.Subjects.RCCompletion(p.RCID), &c, completionHeaders(p, st))
}

// completionHeaders are the headers of a completion to the RC: the ids that
// name it, the caller's log correlation (the RC logs with it) and the status.
// The RC reads the rest from the body, which it decodes anyway; the other
// routing headers were read by nobody and cost an allocation each to write
// and to parse on every completion.
func completionHeaders(p *messages.PortionDispatch, st messages.Status) nats.Header {
	h := make(nats.Header, 6)
	messages.Routing{RequestID: p.RequestID, PortionID: p.PortionID, LogCorr: p.LogCorr}.Write(h)
	st.Write(h)
	return h
}

// headerSize is the size of h on the wire, which counts against max payload.
func headerSize(h nats.Header) int {
	n := len("NATS/1.0\r\n\r\n")
	for k, vs := range h {
		for _, v := range vs {
			n += len(k) + len(v) + 4
		}
	}
	return n
}
