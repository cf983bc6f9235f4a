package agg

import (
	"errors"

	"github.com/nats-io/nats.go"

	"github.com/sg-project/sg/messages"
	"github.com/sg-project/sg/subjects"
)

// refuse tells the RC that schedules a request that this Agg refused a
// message of it (a body that does not decode or validate), so that the RC
// answers the caller at once rather than at the deadline (messages.Refusal).
// The request and the RC come from the message's headers (an expectation's,
// rcID "") or, for a partial, rcID is the RC the Agg knows from the
// request's expectation (partialRC: callers refuse a partial only then, so
// that a partial's own headers never choose the RC): a message that names
// neither is only counted, as before. Fire-and-forget:
// an older RC drops the refusal, and the request times out as it would have.
func (a *Agg) refuse(h nats.Header, rcID string, code messages.Code, reason string) {
	route, err := messages.RefusalRoute(h)
	if rcID != "" && route.RequestID != "" && subjects.Validate("RC id", rcID) == nil && subjects.Validate("request id", route.RequestID) == nil {
		route.RCID, err = rcID, nil
	}
	if err != nil {
		a.log.Debug().Err(err).Msg("refused message names no request and RC to tell")
		return
	}
	f := messages.NewRefusal(route.RequestID, subjects.ServiceAgg, a.cfg.ID, code, reason)
	// Counted before it is published, so that whoever receives the refusal
	// finds it counted (Stats); taken back if it could not be published.
	a.stats.refusals.Add(1)
	data, err := messages.Encode(&f)
	if err == nil {
		err = a.cfg.NC.Publish(a.cfg.Subjects.RCRefused(route.RCID), data)
	}
	if err != nil {
		a.stats.refusals.Add(^uint64(0))
		a.lim.Warn(&a.log, "refusal_not_sent").Err(err).Str("request_id", route.RequestID).Str("rc", route.RCID).Msg("refusal not sent")
		return
	}
	a.metrics.refusalSent()
	// One per malformed message: within the limit, as the line about it.
	a.lim.Warn(&a.log, "refusal_sent").Str("request_id", route.RequestID).Str("rc", route.RCID).Stringer("code", code).Str("reason", f.Reason).Msg("message refused: the RC is told")
}

// partialRC is the RC to refuse a partial that did not decode to: that of
// its request's expectation, if the expectation counts on the portion and
// attempt the headers name and the request still wants it ("" otherwise: a
// superseded or unexpected partial is no loss, and a DAP's partial names no
// RC of its own).
func (a *Agg) partialRC(h nats.Header) string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.partialRCLocked(h)
}

func (a *Agg) partialRCLocked(h nats.Header) string {
	route, err := messages.ReadRouting(h)
	if err != nil || route.PortionID == 0 {
		return ""
	}
	ref := messages.PortionRef{PortionID: route.PortionID, Attempt: route.Attempt}
	if _, done := a.finished[route.RequestID]; done {
		return ""
	}
	if r := a.requests[route.RequestID]; r != nil && r.exp != nil && r.expected[ref] && r.wants(ref) {
		return r.exp.RCID
	}
	return ""
}

// refuseTransferLocked is the refusal of a chunked partial that cannot be
// reassembled, to run once the lock is let go (nil when there is none to
// send: one too large is answered TOO_LARGE by the Agg itself).
func (a *Agg) refuseTransferLocked(h nats.Header, err error) func() {
	if errors.Is(err, messages.ErrTooLarge) {
		return nil
	}
	rc := a.partialRCLocked(h)
	if rc == "" {
		return nil
	}
	reason := "chunked partial result of portion " + messages.CutText(h.Get(messages.HdrPortionID), 64) + ": " + err.Error()
	return func() { a.refuse(h, rc, messages.RefusalCodeOutput, reason) }
}
