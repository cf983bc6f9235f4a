package agg

import (
	"errors"
	"runtime"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nuid"
	"github.com/rs/zerolog"

	"github.com/sg-project/sg/messages"
	"github.com/sg-project/sg/services/limits"
	"github.com/sg-project/sg/services/retryafter"
	"github.com/sg-project/sg/subjects"
)

// envelopeSlack is room for the PartialResult fields around a payload of
// MaxAnswerBytes, so the reassembly limit refuses only what the request limit would.
const envelopeSlack = 64 << 10

// maxStreams bounds the chunked partials reassembled at once: each is a map
// and buffers, and a sender that opens transfers it never finishes must not
// grow the Agg without bound (PartialTTL frees them).
const maxStreams = 4096

func (a *Agg) onExpect(m *nats.Msg) {
	// m.Data is the Agg's own (nats.go's copy for this message), never
	// written: the arguments share it rather than being copied.
	e, err := messages.DecodeAggExpectation(m.Data)
	if err != nil {
		a.countMalformed()
		a.lim.Warn(&a.log, "malformed_expectation").Err(err).Str("request_id", m.Header.Get(messages.HdrRequestID)).Msg("malformed expectation")
		a.refuse(m.Header, "", messages.RefusalCodeRequest, err.Error()) // the error names the expectation
		return
	}
	a.stats.expectations.Add(1)
	// Built where a line is written: most expectations log nothing.
	log := func() *zerolog.Logger {
		l := a.log.With().Str("request_id", e.RequestID).Uint32("seq", e.Seq).Logger()
		return &l
	}
	now := time.Now()
	var after afterLock // run after the lock is let go (deferred first, so run last)
	defer after.run(a)
	a.mu.Lock()
	defer a.mu.Unlock()
	if e.Cancel {
		a.stopGateLocked(e.RequestID) // start.go: its stream, answering already, sends no more
	}
	if _, done := a.finished[e.RequestID]; done {
		log().Debug().Msg("expectation of a finished request ignored")
		return
	}
	if e.Cancel {
		// The RC answers (error or timeout): nothing of this request may be answered.
		log().Info().Msg("request cancelled by the RC")
		a.finishLocked(e.RequestID, e.Deadline, now)
		return
	}
	if now.UnixNano() >= e.Deadline {
		log().Info().Msg("expectation past its deadline: not answered")
		a.tellTimedOut(&e, "expectation received past the deadline", now) // timeout.go
		a.stats.expired.Add(1)
		a.finishLocked(e.RequestID, e.Deadline, now)
		return
	}
	r := a.requests[e.RequestID]
	if r == nil {
		r = newRequest(e.RequestID, now)
		a.requests[e.RequestID] = r
	}
	before := r.bytes
	r.expectation(e)
	a.held += r.bytes - before
	a.stats.discarded.Add(r.takeDropped())
	if after.answer, after.inline = a.answerSmallLocked(r, now); !after.inline {
		after.fn = a.foldExpectedLocked(r) // fold.go: run after the lock is let go too
	}
}

// onCancel: the RC answered the request itself (timeout, cancel, failure) and tells us
// to drop it (no body; the id in Sg-Request-Id): its partials, its chunk transfers, and
// any that come later, so that it is never answered a second time.
func (a *Agg) onCancel(m *nats.Msg) {
	id := m.Header.Get(messages.HdrRequestID)
	if err := subjects.Validate("request id", id); err != nil {
		a.countMalformed()
		a.lim.Warn(&a.log, "malformed_cancel").Err(err).Msg("malformed cancel")
		return
	}
	now := time.Now()
	a.mu.Lock()
	defer a.mu.Unlock()
	a.stopGateLocked(id) // start.go: its stream, answering already, sends no more
	if _, done := a.finished[id]; done {
		return
	}
	var deadline int64
	held := 0
	if r := a.requests[id]; r != nil {
		held = len(r.partials)
		if r.exp != nil {
			deadline = r.exp.Deadline
		}
	}
	for k, s := range a.streams {
		if s.requestID == id {
			a.dropStreamLocked(k, s)
		}
	}
	a.stats.cancelled.Add(1)
	a.finishLocked(id, deadline, now)
	a.log.Info().Str("request_id", id).Int("partials", held).Msg("request dropped on the RC's cancel")
}

func (a *Agg) onPartial(m *nats.Msg) {
	data := m.Data
	if m.Header.Get(messages.HdrChunkCount) != "" || m.Header.Get(messages.HdrChunkIndex) != "" {
		var ok bool
		if data, ok = a.chunk(m); !ok {
			return
		}
	}
	// data is this message's or its reassembled transfer's: the Agg's own.
	p, err := messages.DecodePartialResult(data)
	if err != nil {
		a.countMalformed()
		a.lim.Warn(&a.log, "malformed_partial").Err(err).Str("request_id", m.Header.Get(messages.HdrRequestID)).Msg("malformed partial result")
		// Refused only to the RC of an expectation that counts on it: never
		// to an RC the partial's own headers name (review4: a partial
		// carrying Sg-Rc-Id had the Agg vouch for what it did not check).
		if rc := a.partialRC(m.Header); rc != "" {
			a.refuse(m.Header, rc, messages.RefusalCodeOutput,
				"partial result of portion "+messages.CutText(m.Header.Get(messages.HdrPortionID), 64)+": "+err.Error())
		}
		return
	}
	a.stats.partials.Add(1)
	now := time.Now()
	var after afterLock // run after the lock is let go (deferred first, so run last)
	defer after.run(a)
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, done := a.finished[p.RequestID]; done {
		a.stats.discarded.Add(1)
		return
	}
	r := a.requests[p.RequestID]
	if r == nil {
		r = newRequest(p.RequestID, now)
		a.requests[p.RequestID] = r
	}
	if p.Windowed() || r.windows[p.Ref()] != nil || r.live != nil {
		before := r.bytes
		a.windowLocked(r, p) // live.go
		a.held += r.bytes - before
		a.stats.discarded.Add(r.takeDropped())
		after.answer, after.inline = a.answerSmallLocked(r, now)
		return
	}
	if !r.wants(p.Ref()) {
		a.stats.discarded.Add(1)
		a.log.Debug().Str("request_id", p.RequestID).Stringer("portion", p.Ref()).Str("dap", p.DAPID).Msg("partial discarded")
		return
	}
	before := r.bytes
	if n := int64(len(p.Payload)); a.held+n > a.cfg.MaxHeldBytes {
		// Over the Agg-wide bound: this request is refused, the others go on.
		a.log.Warn().Str("request_id", p.RequestID).Int64("held", a.held).Int64("limit", a.cfg.MaxHeldBytes).Msg("partial results over the Agg's limit: request refused")
		r.dropped++ // p itself
		r.refuse(a.retryAfterLocked())
	} else {
		r.add(p, a.cfg.MaxRequestBytes)
	}
	a.held += r.bytes - before
	a.decodeWholeEarlyLocked(r, &p) // early.go
	a.stats.discarded.Add(r.takeDropped())
	after.answer, after.inline = a.answerSmallLocked(r, now)
	if !after.inline && r.expected[p.Ref()] {
		// Counted: folded as it comes (fold.go), after the lock is let go.
		after.fn = a.foldArrivedLocked(r, p.Ref())
	}
}

// chunk adds one chunk to its transfer and returns the whole payload once complete.
func (a *Agg) chunk(m *nats.Msg) ([]byte, bool) {
	key := m.Header.Get(messages.HdrChunkStream)
	reqID := m.Header.Get(messages.HdrRequestID)
	var refuse func() // a broken transfer's refusal (refuse.go), once the lock is let go
	defer func() {
		if refuse != nil {
			refuse()
		}
	}()
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, done := a.finished[reqID]; done && reqID != "" {
		if s := a.streams[key]; s != nil {
			a.dropStreamLocked(key, s)
		}
		return nil, false // the request is over: do not buffer its chunks
	}
	s := a.streams[key]
	if s == nil {
		if key == "" {
			a.countMalformed()
			a.lim.Warn(&a.log, "chunk_without_transfer").Str("request_id", reqID).Msg("chunk without a transfer id")
			return nil, false
		}
		if len(a.streams) >= maxStreams {
			a.countMalformed()
			a.lim.Warn(&a.log, "too_many_transfers").Str("request_id", reqID).Int("transfers", len(a.streams)).Msg("too many chunked partials in transit: chunk dropped")
			return nil, false
		}
		s = &stream{r: messages.NewReassembler(min(a.cfg.MaxAnswerBytes, a.cfg.MaxRequestBytes) + envelopeSlack), requestID: reqID, since: time.Now()}
		a.streams[key] = s
	}
	// Bytes in transit count against the Agg-wide bound like partials held:
	// over it the transfer is dropped and its request refused, as a whole
	// partial would be. Checked with the chunk's bytes before it is taken,
	// and with what the reassembler holds after (it reserves the payload's
	// room ahead of the bytes: messages.Reassembler.Held).
	if a.held+a.transit+int64(len(m.Data)) > a.cfg.MaxHeldBytes {
		a.chunkedOverLimitLocked(key, s, reqID)
		return nil, false
	}
	before := s.r.Held()
	done, err := s.r.Add(m.Header, m.Data)
	held := s.r.Held() - before
	s.bytes += held
	a.transit += held
	if err == nil && !done {
		if a.held+a.transit > a.cfg.MaxHeldBytes {
			a.chunkedOverLimitLocked(key, s, reqID)
		}
		return nil, false
	}
	a.dropStreamLocked(key, s)
	if err != nil {
		refuse = a.refuseTransferLocked(m.Header, err)
		a.badTransferLocked(reqID, err)
		return nil, false
	}
	payload, err := s.r.Payload()
	if err != nil {
		refuse = a.refuseTransferLocked(m.Header, err)
		a.badTransferLocked(reqID, err)
		return nil, false
	}
	return payload, true
}

// chunkedOverLimitLocked drops transfer key, which took the Agg past its
// bound, and refuses its request.
func (a *Agg) chunkedOverLimitLocked(key string, s *stream, reqID string) {
	a.dropStreamLocked(key, s)
	// Any publisher can send chunks naming any request: within the limit.
	a.lim.Warn(&a.log, "chunked_over_limit").Str("request_id", reqID).Int64("held", a.held).Int64("in_transit", a.transit).Int64("limit", a.cfg.MaxHeldBytes).
		Msg("chunked partial over the Agg's limit: request refused")
	if reqID == "" {
		return
	}
	r := a.requests[reqID]
	if r == nil {
		r = newRequest(reqID, time.Now())
		a.requests[reqID] = r
	}
	before := r.bytes
	r.dropped++
	r.refuse(a.retryAfterLocked())
	a.held += r.bytes - before
	a.stats.discarded.Add(r.takeDropped())
	a.answerIfReadyLocked(r, time.Now())
}

// retryAfterLocked is when a caller refused over the Agg-wide bound should
// come back: the requests held, drained at the Agg's nominal rate.
func (a *Agg) retryAfterLocked() int {
	return limits.RetryAfter(len(a.requests), retryafter.NominalRate(runtime.NumCPU(), retryafter.DefaultNominalAgg), retryafter.Params{})
}

// dropStreamLocked forgets a chunk transfer and the bytes it buffered.
func (a *Agg) dropStreamLocked(key string, s *stream) {
	delete(a.streams, key)
	a.transit -= s.bytes
	s.bytes = 0
}

// badTransferLocked: a partial too large for the limit fails its request TOO_LARGE (the
// answer could not be smaller than the limit allows); other broken transfers are
// counted, and refused to the request's RC if it counted on them
// (refuseTransferLocked).
func (a *Agg) badTransferLocked(reqID string, err error) {
	if !errors.Is(err, messages.ErrTooLarge) || reqID == "" {
		a.countMalformed()
		a.lim.Warn(&a.log, "bad_chunked_partial").Err(err).Str("request_id", reqID).Msg("bad chunked partial")
		return
	}
	a.lim.Warn(&a.log, "partial_too_large").Err(err).Str("request_id", reqID).Msg("partial above MaxAnswerBytes")
	r := a.requests[reqID]
	if r == nil {
		r = newRequest(reqID, time.Now())
		a.requests[reqID] = r
	}
	a.held -= r.bytes
	r.setTooLarge()
	a.stats.discarded.Add(r.takeDropped())
	a.answerIfReadyLocked(r, time.Now())
}

// answerIfReadyLocked hands a complete request to an answer goroutine, exactly once:
// the request leaves the map and its id is remembered as finished in the same step.
func (a *Agg) answerIfReadyLocked(r *request, now time.Time) {
	if j, ok := a.takeReadyLocked(r, now); ok {
		a.answerers.run(a.answerJob(j))
	}
}

// inlineAnswerBytes: an answer whose partials hold at most this much is
// merged and sent by the goroutine that completed it (answerSmallLocked):
// small enough that its merge (tens of microseconds) holds up the partials
// queued behind it less than a goroutine hand-off would.
const inlineAnswerBytes = 16 << 10

// answerSmallLocked is answerIfReadyLocked for the subscription callbacks: a
// small whole answer is returned (inline) to be run by the caller once it
// has let the lock go (afterLock), rather than handed to an answerer (one
// goroutine wake-up fewer on every small request's path; its merge takes
// microseconds). Large and streamed answers still go to an answerer, so that
// they do not hold up the partials behind them.
func (a *Agg) answerSmallLocked(r *request, now time.Time) (j job, inline bool) {
	j, ok := a.takeReadyLocked(r, now)
	if !ok {
		return job{}, false
	}
	if j.exp.Stream || partialBytes(j) > inlineAnswerBytes {
		a.answerers.run(a.answerJob(j))
		return job{}, false
	}
	return j, true
}

// afterLock is what a subscription callback runs once it has let Agg.mu
// go: a small answer it took (answerSmallLocked), or else fn (a fold's
// run), if any. The answer is held here, on the callback's stack, not in a
// closure: two allocations less on every small request.
type afterLock struct {
	answer job
	inline bool
	fn     func()
}

func (x *afterLock) run(a *Agg) {
	switch {
	case x.inline:
		a.runAnswer(x.answer)
	case x.fn != nil:
		x.fn()
	}
}

// takeReadyLocked takes a complete request out to be answered, exactly once.
func (a *Agg) takeReadyLocked(r *request, now time.Time) (job, bool) {
	if a.closing || r.live != nil || !r.ready() {
		return job{}, false
	}
	if r.liveReady() {
		a.startLiveLocked(r) // live.go
		return job{}, false
	}
	j := r.job()
	// Partials outside the answered set (a lost DAP's, a duplicate dispatch's).
	a.stats.discarded.Add(uint64(j.unused))
	r.answering = true
	a.finishLocked(r.id, j.exp.Deadline, now)
	if j.exp.StreamStart && streams(j) {
		// Now, not once its stream begins: the RC's cancel from here on
		// finds its request neither held nor gated otherwise, and is lost.
		j.gate = a.openGateLocked(r.id, nuid.Next())
		j.gate.bytes = int64(partialBytes(j))
		a.held += j.gate.bytes
	}
	a.stats.answered.Add(1)
	a.answers.Add(1)
	return j, true
}

// answerJob is the answer of j, counted in a.answers until it is sent.
func (a *Agg) answerJob(j job) func() {
	return func() { a.runAnswer(j) }
}

// runAnswer answers j, taken out to be answered (takeReadyLocked, which
// counted it in a.answers until it is sent).
func (a *Agg) runAnswer(j job) {
	defer a.answers.Done()
	if j.gate != nil {
		defer a.closeGate(j.gate)
	}
	if f := a.beforeAnswer.Load(); f != nil {
		(*f)()
	}
	a.answer(j)
}
