package rc

import (
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sg-project/sg/messages"
	"github.com/sg-project/sg/services/rc/core"
)

// carryOut turns one core command into NATS messages.
func (r *RC) carryOut(cmd core.Command) {
	switch c := cmd.(type) {
	case *core.Dispatch: // valid until the next Step: carried out now
		r.dispatch(*c)
	case *core.AggTrack:
		r.track(*c)
	case core.AggExpect:
		if p := r.pending[c.Request]; p != nil && p.trackSealed {
			// The Agg has this set already (AggTrack), sealed: it answers on the
			// last partial, without this message.
			break
		}
		r.expect(c.Request, c.Agg, c.Portions, nil, true)
	case core.AggFail:
		// The DAP sent its error to the Agg as a partial: the Agg answers it.
		r.reqLog(c.Request).Info().Str("dap", c.DAP).Str("error", c.Message).Msg("dap failed the request")
		r.expect(c.Request, c.Agg, []messages.PortionRef{c.Portion}, nil, true)
	case core.Reply:
		r.reply(c)
	case core.RetryNoted:
		r.metrics.retries.Inc()
		r.metrics.kxRetryCount.Inc()
		r.reqLog(c.Request).Info().Str("labels", c.Labels.String()).Uint32("attempt", c.Attempt).Bool("whole", c.Whole).Str("reason", c.Reason).Msg("retry")
	case core.QueryPeerStatus:
		r.queryPeer(c)
	case core.ReportPeerStatus:
		r.reportPeer(c)
	case core.ForwardCompletion:
		r.forwardCompletion(c)
	case core.CancelDAP:
		r.reqDebug(c.Request).Str("dap", c.DAP).Uint64("portion", uint64(c.Portion)).Msg("telling the DAP to stop the request")
		r.metrics.cancels.WithLabelValues("dap").Inc()
		r.publishCancel(r.cfg.Subjects.DAPCancel(c.DAP), c.Request, c.Portion)
	case core.CancelPeer:
		r.reqDebug(c.Request).Str("secondary", c.RC).Msg("telling the secondary RC to stop the request")
		r.metrics.cancels.WithLabelValues("peer").Inc()
		r.publishCancel(r.cfg.Subjects.RCCancel(c.RC), c.Request, 0)
	case core.RefusalNoted:
		r.noteRefusal(c) // refused.go
	case core.ForwardRefusal:
		r.forwardRefusal(c) // refused.go
	case core.AggChanged:
		if p := r.pending[c.Request]; p != nil {
			p.aggSeq, p.trackSealed = 0, false // the new Agg's expectations start at Seq 1
		}
		r.metrics.aggRedrives.Inc()
		r.reqLog(c.Request).Warn().Str("lost_agg", c.From).Str("agg", c.To).Msg("Agg lost: request driven again on another Agg")
	case core.TimeoutIncomplete:
		r.reqDebug(c.Request).Strs("unreported", c.Unreported).Msg(core.TimeoutIncompleteText(c.Max))
	case core.CancelAgg:
		r.reqDebug(c.Request).Str("agg", c.Agg).Msg("telling the Agg to drop the request")
		r.metrics.cancels.WithLabelValues("agg").Inc()
		r.publishCancel(r.cfg.Subjects.AggCancel(c.Agg), c.Request, 0)
	}
}

func (r *RC) dispatch(c core.Dispatch) {
	m := messages.PortionDispatch{
		RequestID: c.Portion.Request, PortionID: c.Portion.ID,
		Attempt: c.Portion.Attempt, RCID: r.cfg.ID, API: c.API,
		Labels: messages.LabelSet(c.Portion.Labels), Range: c.Portion.Range,
		PurviewVersion: c.Portion.PurviewVersion, ReferenceVintage: c.Portion.Vintage,
		AggID: c.Agg, Deadline: c.Deadline,
	}
	if p := r.pending[c.Portion.Request]; p != nil {
		m.SetArguments(p.sub.Arguments())
		m.LogCorr = p.sub.Header.Opts.LogCorr
	} else if ri := r.relayed[c.Portion.Request]; ri != nil {
		// A secondary relaying a primary's portion: the DAP's completion comes
		// to us (RCID), and we forward it.
		m.SetArguments(ri.tmpl.Arguments())
		m.LogCorr = ri.tmpl.LogCorr
	} else {
		r.reqLog(c.Portion.Request).Error().Msg("dispatch for a request the shell does not hold")
		return
	}
	if c.ViaRC != "" {
		r.sendPeerPortion(c, m)
		return
	}
	h := m.Header()
	subject := r.cfg.Subjects.DAPPortion(c.DAP)
	r.metrics.dispatches.Inc()
	if e := r.reqDebug(m.RequestID); e != nil { // the range would be boxed for nothing
		e.Str("dap", c.DAP).Uint64("portion", uint64(m.PortionID)).Uint32("attempt", m.Attempt).
			Stringer("range", m.Range).Uint64("pv", m.PurviewVersion).Uint64("rv", m.ReferenceVintage).Msg("dispatch")
	}
	r.publish(subject, h, &m)
}

// track tells the request's Agg, as the core dispatches and supersedes, which
// partials make its answer (core/track.go).
func (r *RC) track(c core.AggTrack) {
	p := r.expect(c.Request, c.Agg, c.Expect, c.Supersede, c.Sealed)
	if p != nil {
		p.trackSealed = c.Sealed
	}
}

// expect tells the request's Agg which partials make its answer; it returns the
// request, nil when the shell no longer holds it.
func (r *RC) expect(requestID, agg string, refs, supersede []messages.PortionRef, sealed bool) *pendingRequest {
	p := r.pending[requestID]
	if p == nil {
		return nil
	}
	p.aggSeq++
	m := messages.AggExpectation{
		RequestID: requestID, Seq: p.aggSeq, API: p.sub.Header.API,
		Expect: refs, Supersede: supersede, Sealed: sealed, ReplyTo: p.sub.ReplyTo, RCID: r.cfg.ID, Content: p.sub.Content,
		Deadline: p.sub.Deadline, LogCorr: p.sub.Header.Opts.LogCorr, Stream: p.sub.Stream, StreamStart: p.sub.StreamStart,
		AnswerID: p.sub.AnswerID,
	}
	m.SetArguments(p.sub.Arguments()) // and the version that carries them
	r.publish(r.cfg.Subjects.AggExpect(agg), m.Header(), &m)
	return p
}

// reply answers the caller from the RC itself: errors and timeouts.
func (r *RC) reply(c core.Reply) {
	p := r.pending[c.Request]
	if p == nil {
		r.reqLog(c.Request).Error().Msg("reply for a request the shell does not hold")
		return
	}
	st := replyStatus(c)
	if c.Kind == core.ReplyTimeout {
		r.metrics.timeouts.Inc()
	}
	// The Agg is told to drop the request by the core's CancelAgg.
	var h nats.Header
	if c.Kind == core.ReplyRateLimited {
		r.metrics.refused.WithLabelValues(c.Limit).Inc()
		h = nats.Header{}
		messages.SetString(h, messages.HdrLimit, c.Limit)
		messages.SetInt(h, messages.HdrRetryAfter, int64(c.RetryAfter))
	}
	r.answerWith(p.sub, st, nil, h)
	r.finish(c.Request, st, 0)
}

// publishCancel sends a cancel: no body, the request id in Sg-Request-Id and, to stop
// one portion only, its id in Sg-Portion-Id.
func (r *RC) publishCancel(subject, requestID string, portion messages.PortionID) {
	h := nats.Header{}
	messages.SetString(h, messages.HdrRequestID, requestID)
	if portion != 0 {
		messages.SetString(h, messages.HdrPortionID, portion.String())
	}
	if err := r.cfg.NC.PublishMsg(&nats.Msg{Subject: subject, Header: h}); err != nil {
		r.reqLog(requestID).Error().Err(err).Str("subject", subject).Msg("publish cancel")
	}
}

// replyStatus maps the core's answers to codes: TIMEOUT is the seed's rc 45
// with ac ERR 10; the others carry their own code as rc, with ac ERR.
func replyStatus(c core.Reply) messages.Status {
	rc := messages.CodeErr
	switch c.Kind {
	case core.ReplyTimeout:
		rc = messages.CodeTimeout
	case core.ReplyNoResources:
		rc = messages.CodeNoResources
	case core.ReplyMaxRetries:
		rc = messages.CodeRetryExhausted
	case core.ReplyBadRequest:
		rc = messages.CodeBadRequest
	case core.ReplyRateLimited:
		rc = messages.CodeRateLimited
	case core.ReplyInternal:
		rc = messages.CodeInternal
	}
	return messages.Status{RC: rc, AC: messages.CodeErr, AI: c.Text}
}

// answer sends a response to the submission's reply subject.
func (r *RC) answer(sub messages.RCSubmission, st messages.Status, payload []byte) {
	r.answerWith(sub, st, payload, nil)
}

// answerWith is answer with extra headers (Sg-Limit, Sg-Retry-After on a refusal).
func (r *RC) answerWith(sub messages.RCSubmission, st messages.Status, payload []byte, h nats.Header) {
	resp := messages.Response{
		Header: messages.ResponseHeader{V: messages.RequestVersion, RequestID: sub.RequestID, API: sub.Header.API,
			LogCorr: sub.Header.Opts.LogCorr, Status: st},
		Payload: payload, Content: sub.Content,
	}
	data, err := resp.Encode()
	if err != nil {
		r.reqLog(sub.RequestID).Error().Err(err).Msg("encode answer")
		return
	}
	if h == nil {
		h = nats.Header{}
	}
	messages.SetString(h, messages.HdrRequestID, sub.RequestID)
	messages.SetString(h, messages.HdrAPI, sub.Header.API)
	messages.SetString(h, messages.HdrContentType, string(resp.Content))
	if c := sub.Header.Opts.LogCorr; c != "" {
		messages.SetString(h, messages.HdrLogCorr, c)
	}
	st.Write(h)
	if err := r.cfg.NC.PublishMsg(&nats.Msg{Subject: sub.ReplyTo, Header: h, Data: data}); err != nil {
		r.reqLog(sub.RequestID).Error().Err(err).Msg("publish answer")
	}
	if !st.IsOK() {
		r.reqLog(sub.RequestID).Info().Stringer("rc", st.RC).Str("ai", st.AI).Msg("answered")
	}
}

// finish forgets a request once it has been answered (by the RC or the Agg).
func (r *RC) finish(requestID string, st messages.Status, held time.Duration) {
	p := r.pending[requestID]
	if p == nil {
		return
	}
	delete(r.pending, requestID)
	// The latency ends when the answer went out: the Agg's notice of it may
	// have waited (held) for others to this RC.
	took := r.cfg.Now().Sub(p.arrived)
	took -= min(max(held, 0), took)
	r.metrics.latency.WithLabelValues(st.RC.String()).Observe(took.Seconds())
	r.metrics.kxCompleteTime.Observe(took.Seconds())
}
