package dap

import (
	"fmt"

	"github.com/nats-io/nats.go"
	"github.com/sg-project/sg/messages"
)

// sendPartial sends the partial result of p to its Agg, in chunks when the message is
// above the connection's max payload (nothing is cut silently).
func (d *DAP) sendPartial(p *messages.PortionDispatch, st messages.Status, payload []byte) error {
	return d.sendWindow(p, st, payload, 0, false)
}

// sendWindow sends one window of the partial result of p (window.go); a
// partial in one piece is window 0 without more.
func (d *DAP) sendWindow(p *messages.PortionDispatch, st messages.Status, payload []byte, window uint32, more bool) error {
	pr := d.envelope(p, st, window, more)
	pr.Payload = payload
	if err := pr.Validate(); err != nil {
		return err
	}
	// Published from the encoder's pooled buffer: nats.go copies what it sends.
	return messages.WithEncoded(&pr, func(data []byte) error { return d.publishPartial(p, st, data) })
}

// envelope is the PartialResult of window window of p's partial result, without its payload.
func (d *DAP) envelope(p *messages.PortionDispatch, st messages.Status, window uint32, more bool) messages.PartialResult {
	return messages.PartialResult{V: messages.PortionVersion, RequestID: p.RequestID, PortionID: p.PortionID,
		Attempt: p.Attempt, DAPID: d.cfg.ID, Status: st, Window: window, More: more}
}

// publishPartial sends an encoded PartialResult of p to its Agg, in chunks
// when above the max payload. data may be reused once it returns.
func (d *DAP) publishPartial(p *messages.PortionDispatch, st messages.Status, data []byte) error {
	subject := d.cfg.Subjects.AggPartial(p.AggID)
	h := p.ReplyHeader(st)
	if int64(len(data)+messages.HeaderSize(h)) > d.cfg.NC.MaxPayload() {
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
	_ = d.publish(d.cfg.Subjects.RCCompletion(p.RCID), &c, p.ReplyHeader(st))
}
