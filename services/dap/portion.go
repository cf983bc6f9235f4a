package dap

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"
	"github.com/sg-project/sg/messages"
	"github.com/sg-project/sg/services/agg/merge"
	"github.com/sg-project/sg/services/limits"
	"github.com/sg-project/sg/subjects"
)

// onPortion takes one dispatch off the wire: malformed ones are answered with an error
// where they can be, mismatched ones RETRY at once (no point queueing them), the others
// join the queue.
func (d *DAP) onPortion(m *nats.Msg) {
	d.stats.received.Add(1)
	p, err := messages.DecodeValid[messages.PortionDispatch](m.Data)
	if err != nil {
		d.rejectMalformed(m, err)
		return
	}
	if reason := d.mismatch(&p); reason != "" {
		d.retry(&p, reason)
		return
	}
	if d.isCancelled(&p) {
		d.answerCancelled(&p, 0) // its cancel overtook it
		return
	}
	if n, ok := d.queue.push(p, d.cfg.MaxQueue); !ok {
		d.refuse(&p, n)
	}
}

// refuse answers a dispatch over the queue limit RATE_LIMITED: the RC answers the
// caller with the limit and when to come back.
func (d *DAP) refuse(p *messages.PortionDispatch, waiting int) {
	d.stats.refused.Add(1)
	// A flood of dispatches (any publisher can send them) refuses each:
	// counted (Stats.Refused), logged within the limit.
	d.lim.Warn(d.portionLog(p), "queue_full").Int("queued", waiting).Int("limit", d.cfg.MaxQueue).Msg("portion refused: queue full")
	st := messages.Status{RC: messages.CodeRateLimited, AC: messages.CodeErr,
		AI: fmt.Sprintf("DAP %s has %d portions waiting, its limit %s=%d (%s)", d.cfg.ID, waiting, limits.DAPQueue, d.cfg.MaxQueue, EnvMaxQueue)}
	d.fail(p, st, 0)
}

// mismatch says why the DAP cannot run p as dispatched, in the seed's terms, or "".
// Seed (Retries): the DAP compares the purview version and reference vintage of the
// dispatch with its own and answers RETRY when either differs.
func (d *DAP) mismatch(p *messages.PortionDispatch) string {
	_, reason := d.admit(p)
	return reason
}

// admit is mismatch that also returns the source to run p on, read under the same lock.
func (d *DAP) admit(p *messages.PortionDispatch) (Source, string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.state.source, d.mismatchLocked(p)
}

func (d *DAP) mismatchLocked(p *messages.PortionDispatch) string {
	switch {
	case !d.state.available:
		return fmt.Sprintf("DAP %s is unavailable: %s", d.cfg.ID, d.state.reason)
	case p.PurviewVersion != d.state.pv:
		return fmt.Sprintf("DAP purview version %d does not match dispatch purview version %d", d.state.pv, p.PurviewVersion)
	case p.ReferenceVintage != d.state.rv:
		return fmt.Sprintf("DAP reference vintage %d does not match dispatch reference vintage %d", d.state.rv, p.ReferenceVintage)
	case p.Range != messages.Unbounded && (p.Range.Start < d.state.purview.Start || p.Range.End > d.state.purview.End):
		// A time portion is always the intersection of the request with the purview the
		// RC saw (only a portion of a table without time is unbounded). One outside ours
		// was placed on a stale purview at a version that happens to match (an RC that
		// learned the version before the purview): answering it would drop the rows we
		// gave away.
		return fmt.Sprintf("dispatch range %s is outside DAP purview %s", p.Range, d.state.purview)
	}
	return ""
}

func (d *DAP) portionLog(p *messages.PortionDispatch) *zerolog.Logger {
	l := d.log.With().Str("request_id", p.RequestID).Uint64("portion", uint64(p.PortionID)).
		Uint32("attempt", p.Attempt).Str("api", p.API).Str("log_corr", p.LogCorr).Logger()
	return &l
}

// retry answers RETRY with the DAP's current versions, so the RC learns them without
// waiting for the event.
func (d *DAP) retry(p *messages.PortionDispatch, reason string) {
	d.stats.retried.Add(1)
	d.portionLog(p).Info().Str("reason", reason).Msg("portion answered RETRY")
	d.complete(p, messages.PortionCompletion{Outcome: messages.OutcomeRetry, Code: messages.CodeRetry, Message: reason})
}

// runPortion runs the dispatch in s.p, which has the slot s, until its deadline.
//
// Its logger (the portion's fields on the DAP's) is built only where it logs: a
// portion that runs and succeeds logs at debug level at most, and building it
// for every portion cost allocations on every small request.
func (d *DAP) runPortion(s *slot) {
	p := &s.p
	// The versions may have changed while the portion waited for a slot. The source is
	// taken in the same critical section as the check: a portion runs on the data of the
	// versions it was dispatched with, even if Apply swaps them a moment later.
	src, reason := d.admit(p)
	if reason != "" {
		d.retry(p, reason)
		return
	}
	deadline := time.Unix(0, p.Deadline)
	if !time.Now().Before(deadline) {
		d.timedOut(p, 0)
		return
	}
	if d.isCancelled(p) {
		d.answerCancelled(p, 0)
		return
	}
	d.setRunning(+1)
	defer d.setRunning(-1)
	start := time.Now()
	d.metrics.executing() // metrics.go
	defer d.metrics.executed(start)
	// Stopped by the deadline, by shutdown (Run's ctx) or by the RC's cancel
	// (onCancel), through the slot (slot.go).
	execCtx := s.begin(deadline, start)
	defer s.end()
	// The Source runs on the slot's own goroutine, whose stack has grown through the
	// engine and the codecs already (handing it to another goroutine and back cost two
	// goroutine switches per portion). If the deadline or a cancel comes first, the
	// slot answers the RC at once (slot.answerEarly), so the RC need not wait for a
	// Source that is slow to stop; the slot is given back only once it has returned.
	r := d.execute(execCtx, src, p)
	if !s.claim() { // answered already, or being answered
		<-s.answered
		return
	}
	ctx := s.parent
	elapsed := time.Since(start)
	switch {
	case ctx.Err() != nil:
		return // shutdown: DAPLost tells the RC
	case execCtx.cancelled():
		d.answerCancelled(p, elapsed) // never a result for a cancelled request
	case errors.Is(r.err, context.DeadlineExceeded) || (r.err == nil && !time.Now().Before(deadline)):
		d.timedOut(p, elapsed) // never a result after the deadline
		return
	case d.throttled(p, r.err, elapsed): // throttle.go
		return
	case r.err != nil:
		d.stats.failed.Add(1)
		st := statusOf(r.err)
		d.portionLog(p).Warn().Err(r.err).Stringer("rc", st.RC).Msg("portion failed")
		d.fail(p, st, elapsed)
		return
	}
	bytes := int64(len(r.payload))
	var err error
	if r.part != nil {
		var w sent
		w, err = d.sendWindows(execCtx, p, r.part) // window.go
		elapsed = time.Since(start)
		switch {
		case ctx.Err() != nil:
			return // shutdown: DAPLost tells the RC
		case execCtx.cancelled():
			d.answerCancelled(p, elapsed)
			return
		case errors.Is(err, context.DeadlineExceeded):
			d.timedOut(p, elapsed) // the error ends the windows sent so far
			return
		}
		r.rows, bytes = w.rows, w.bytes
	} else {
		err = d.sendPartial(p, messages.StatusOK, r.payload)
	}
	if err != nil {
		d.stats.failed.Add(1)
		d.portionLog(p).Error().Err(err).Msg("partial result not sent")
		d.complete(p, messages.PortionCompletion{Outcome: messages.OutcomeError, Code: messages.CodeErr,
			Message: "DAP could not send the partial result: " + errText(err), ElapsedNS: int64(elapsed)})
		return
	}
	d.stats.executed.Add(1)
	if d.log.GetLevel() <= zerolog.DebugLevel && zerolog.GlobalLevel() <= zerolog.DebugLevel {
		d.portionLog(p).Debug().Int64("bytes", bytes).Int64("rows", r.rows).Dur("elapsed", elapsed).Msg("portion done")
	}
	d.complete(p, messages.PortionCompletion{Outcome: messages.OutcomeOK, Code: messages.CodeOK, PartialSent: true,
		Rows: r.rows, Bytes: bytes, ElapsedNS: int64(elapsed)})
}

// partialResult is the result of a PartialSource: a partial above one window
// is kept to be sent in windows, any other is encoded whole.
func (d *DAP) partialResult(part merge.Partial, err error) (r execResult) {
	if err != nil {
		return execResult{err: err}
	}
	r.rows = partialRows(&part)
	if d.windowed(&part) {
		r.part = &part
		return r
	}
	if r.payload, err = merge.EncodePartial(part); err != nil {
		r.err = fmt.Errorf("encode partial: %w", err)
	}
	return r
}

func (d *DAP) setRunning(delta int) {
	d.mu.Lock()
	d.state.running += delta
	d.mu.Unlock()
}

func (d *DAP) timedOut(p *messages.PortionDispatch, elapsed time.Duration) {
	d.stats.timedOut.Add(1)
	d.portionLog(p).Warn().Dur("elapsed", elapsed).Msg("portion passed its deadline")
	st := messages.Status{RC: messages.CodeTimeout, AC: messages.CodeErr,
		AI: fmt.Sprintf("DAP %s: portion %s did not complete before its deadline", d.cfg.ID, p.Ref())}
	d.fail(p, st, elapsed)
}

// fail tells the Agg (which answers the error) and the RC (which frees the slot).
func (d *DAP) fail(p *messages.PortionDispatch, st messages.Status, elapsed time.Duration) {
	sent := d.sendPartial(p, st, nil) == nil
	d.complete(p, messages.PortionCompletion{Outcome: messages.OutcomeError, Code: st.RC, Message: st.AI,
		PartialSent: sent, ElapsedNS: int64(elapsed)})
}

// rejectMalformed counts and logs a dispatch that does not decode or validate, and
// answers it with BAD_REQUEST. A current RC names itself, the request, the portion
// and its attempt in the headers (messages.PortionDispatch.Header): the DAP refuses the dispatch to
// that RC (messages.Refusal), which answers the caller at once, whether or not any
// of the body decoded. An older RC's dispatch names no RC: it is answered as
// before, when enough of the body decodes to know where to answer.
func (d *DAP) rejectMalformed(m *nats.Msg, err error) {
	d.countMalformed()
	if route, rerr := messages.RefusalRoute(m.Header); rerr == nil && route.PortionID != 0 {
		d.refuseDispatch(route, errText(err), len(m.Data)) // the error names the portion dispatch
		return
	}
	var p messages.PortionDispatch
	_ = messages.Decode(m.Data, &p) // best effort: whatever fields decoded
	d.lim.Warn(d.portionLog(&p), "malformed_dispatch").Err(err).Int("bytes", len(m.Data)).Msg("malformed portion dispatch")
	st := messages.Status{RC: messages.CodeBadRequest, AC: messages.CodeErr, AI: "DAP " + d.cfg.ID + ": " + errText(err)}
	if subjects.Validate("Agg id", p.AggID) == nil {
		if err := d.sendPartial(&p, st, nil); err != nil {
			d.log.Debug().Err(err).Msg("no error partial for the malformed dispatch")
		}
	}
	if subjects.Validate("RC id", p.RCID) == nil {
		d.complete(&p, messages.PortionCompletion{Outcome: messages.OutcomeError, Code: st.RC, Message: st.AI})
	}
}

// execResult is what a Source returned for one portion.
type execResult struct {
	payload []byte
	part    *merge.Partial // a partial sent in windows (window.go), not encoded whole
	rows    int64
	err     error
}

// execute runs the portion on its Source.
func (d *DAP) execute(ctx context.Context, src Source, p *messages.PortionDispatch) (r execResult) {
	if ps, ok := src.(PartialSource); ok {
		if part, ok, err := ps.ExecutePartial(ctx, p.API, p.Arguments(), p.Labels, p.Range); ok {
			return d.partialResult(part, err)
		}
	}
	if rc, ok := src.(RowCounter); ok {
		r.payload, r.rows, r.err = rc.ExecuteRows(ctx, p.API, p.Arguments(), p.Labels, p.Range)
	} else {
		r.payload, r.err = src.Execute(ctx, p.API, p.Arguments(), p.Labels, p.Range)
	}
	return r
}

// refuseDispatch tells the RC that dispatched a portion that this DAP cannot
// take it (fire-and-forget: an older RC drops it and the request times out).
func (d *DAP) refuseDispatch(route messages.Routing, reason string, size int) {
	f := messages.NewRefusal(route.RequestID, subjects.ServiceDAP, d.cfg.ID, messages.RefusalCodeRequest, reason)
	f.PortionID, f.Attempt = route.PortionID, route.Attempt
	l := d.log.With().Str("request_id", route.RequestID).Uint64("portion", uint64(route.PortionID)).Uint32("attempt", route.Attempt).
		Str("rc", route.RCID).Int("bytes", size).Logger()
	// Counted before it is published, so that whoever receives the refusal
	// finds it counted (Stats); taken back if it could not be published.
	d.stats.refusals.Add(1)
	data, err := messages.Encode(&f)
	if err == nil {
		err = d.cfg.NC.Publish(d.cfg.Subjects.RCRefused(route.RCID), data)
	}
	if err != nil {
		d.stats.refusals.Add(^uint64(0))
		d.lim.Warn(&l, "refusal_not_sent").Err(err).Str("reason", f.Reason).Msg("malformed portion dispatch: refusal not sent")
		return
	}
	d.metrics.refusalSent()
	d.lim.Warn(&l, "malformed_dispatch_refused").Str("reason", f.Reason).Msg("malformed portion dispatch: refused to its RC")
}
