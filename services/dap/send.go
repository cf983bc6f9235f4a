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
	h := routingHeaders(p, st)
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
	_ = d.publish(d.cfg.Subjects.RCCompletion(p.RCID), &c, routingHeaders(p, st))
}

// routingHeaders are the headers of everything the DAP sends about dispatch
// p, partial results and completions alike: the ids that name it (the
// attempt, written only past the first, lets an Agg that cannot decode a
// partial tell whether its request counted on it: agg/refuse.go), the
// caller's log correlation (the RC logs with it) and the status. The Agg and
// the RC read the rest from the body, which they decode anyway; the other
// routing headers (api, Agg, content type) would be read by nobody and cost
// allocations to write and to parse on every message.
func routingHeaders(p *messages.PortionDispatch, st messages.Status) nats.Header {
	h := make(nats.Header, 6)
	messages.Routing{RequestID: p.RequestID, PortionID: p.PortionID, Attempt: p.Attempt, LogCorr: p.LogCorr}.Write(h)
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
