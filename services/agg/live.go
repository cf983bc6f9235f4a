package agg

import (
	"context"
	"errors"
	"fmt"
	"github.com/nats-io/nuid"
	"time"

	"github.com/rs/zerolog"
	"github.com/sg-project/sg/messages"
	"github.com/sg-project/sg/services/agg/merge"
	"github.com/sg-project/sg/subjects"
)

// Partials in windows (messages.PartialResult.Window, More; services/dap
// window.go). A DAP sends a large row partial as windows, each a row partial
// of its own in the portion's order, under the Agg's credit
// (messages.PartialCredit on subjects.DAPCredit): it may send
// messages.InitialPartialCredit windows before it hears from us.
//
// A request whose caller reads streams, for rows without sortCols (a k-way
// merge in time order), is merged live: once the set is sealed and every
// expected portion has its first window (or its whole partial), the Agg
// starts the answer's stream (liveMerge) and grants each portion a window
// for each one the merge has used up, so that it holds at most
// InitialPartialCredit windows of each portion beside the one merged, and a
// frame goes out as soon as every portion has a window or has ended. The
// request stays in Agg.requests while it streams, for the windows still to
// come. Any other request gathers the windows (credit as they arrive,
// bounded by MaxRequestBytes) and answers as before, each window a partial of
// the merge.
//
// Once the stream has begun, its frames cannot be taken back: a portion that
// fails, or is superseded, or a new one expected, ends the stream with an
// error frame (the DAP's status, or ERR naming the portion), as does the
// deadline (TIMEOUT) or a window that breaks the protocol. Before the merge
// begins, a superseded attempt's windows are dropped as a whole partial is.
//
// Hostile windows: a window sent without credit, out of order, from another
// DAP than the portion's first, or a first window that is not window 0, fails
// the request (ERR, its partials dropped); windows count against
// MaxRequestBytes and MaxHeldBytes like partials; a portion that never ends
// is bounded by the deadline.

// gatherCredit is how many windows ahead of those received a portion gathered
// whole is granted, once it is within InitialPartialCredit of its grant.
const gatherCredit = 16

// portionWindows is what a request holds of one portion sent in windows.
type portionWindows struct {
	dap     string                   // the DAP that sent window 0: credit goes there
	queue   []messages.PartialResult // received, not yet merged
	next    uint32                   // index of the window due next
	taken   uint32                   // windows the live merge has used
	granted uint32                   // windows the DAP may send
	ended   bool                     // the last window has come
	bytes   int64                    // payload bytes in queue
	// decoded: each queued window's decoding begun as it came (early.go),
	// nil for a window decoded with the answer; as long as queue, or empty.
	decoded []*decoding
}

// liveMerge is one answer streamed while its windows come.
type liveMerge struct {
	a       *Agg
	r       *request
	exp     messages.AggExpectation
	args    messages.GetDataArgs // the expectation's, as streamsLive decoded them
	sources []messages.PortionRef
	wake    chan struct{} // capacity 1: a window came, or err was set
	err     error         // set under Agg.mu: the stream must end with it
	frames  bool          // a frame went out (set by the answering goroutine)
	// gate: the start gate of its stream when the GW paces it (start.go),
	// registered as the merge starts, so that the RC's cancel from then on
	// ends a wait for the start signal too.
	gate *startGate
}

// errStopped: the request was cancelled or the Agg stops; nothing more is sent.
var errStopped = errors.New("the request was dropped while its answer streamed")

// statusError ends a live stream with a status.
type statusError struct{ st messages.Status }

func (e *statusError) Error() string { return e.st.AI }

// has reports whether ref is one of the live merge's portions (nil: none).
func (lm *liveMerge) has(ref messages.PortionRef) bool {
	if lm == nil {
		return false
	}
	for _, s := range lm.sources {
		if s == ref {
			return true
		}
	}
	return false
}

// fail ends the live stream with st (the first failure wins); Agg.mu held.
func (lm *liveMerge) fail(st messages.Status) { lm.stop(&statusError{st}) }

// stop ends the live stream with err; Agg.mu held.
func (lm *liveMerge) stop(err error) {
	if lm == nil || lm.err != nil {
		return
	}
	lm.err = err
	lm.signal()
}

func (lm *liveMerge) signal() {
	if lm == nil {
		return
	}
	select {
	case lm.wake <- struct{}{}:
	default:
	}
}

// streamsLive reports whether the request is answered by a live merge when
// its portions come in windows: a stream reader's getData rows without
// sortCols. Decided once its expectation is known.
func (r *request) streamsLive() bool {
	if r.exp == nil {
		return false
	}
	if r.liveKind == 0 {
		r.liveKind = 2
		if r.exp.Stream && (r.exp.API == subjects.APIGetData || r.exp.API == subjects.APISQL) {
			if args, err := r.args.of(r.exp); err == nil && !args.Aggregating() && len(args.SortCols) == 0 {
				r.liveKind = 1
			}
		}
	}
	return r.liveKind == 1
}

// liveReady reports whether a ready request is answered by a live merge: some
// expected portion's windows are still to come.
func (r *request) liveReady() bool {
	if r.tooLarge || r.refused || r.failed != nil || !r.streamsLive() {
		return false
	}
	open := false
	for _, ref := range r.expect {
		if p, ok := r.partials[ref]; ok && !p.Status.IsOK() {
			return false
		}
		if w := r.windows[ref]; w != nil && !w.ended {
			open = true
		}
	}
	return open
}

// windowLocked takes one window of a portion in windows (or any partial of a
// request whose answer streams live); a.mu held.
func (a *Agg) windowLocked(r *request, p messages.PartialResult) {
	ref := p.Ref()
	w := r.windows[ref]
	discard := func(why string) {
		a.stats.discarded.Add(1)
		a.log.Debug().Str("request_id", p.RequestID).Stringer("portion", ref).Uint32("window", p.Window).Msg("window discarded: " + why)
	}
	switch {
	case !r.wants(ref):
		discard("not wanted")
		return
	case r.live != nil && (!r.live.has(ref) || w == nil):
		discard("not part of the answer's stream")
		return
	case !p.Status.IsOK():
		// The portion failed: its windows no longer count; its error does.
		if w != nil {
			r.bytes -= w.bytes
			r.dropped += len(w.queue)
			delete(r.windows, ref)
		}
		p.Payload = nil
		r.partials[ref] = p
		r.live.fail(p.Status)
		return
	}
	bad := func(format string, args ...any) {
		a.countMalformed()
		st := messages.Errorf(messages.CodeErr, messages.CodeErr, "DAP %s, portion %s: %s", p.DAPID, ref, fmt.Sprintf(format, args...))
		a.lim.Warn(&a.log, "bad_partial_window").Str("request_id", p.RequestID).Str("dap", p.DAPID).Msg(st.AI)
		r.dropped++ // p itself
		r.setFailed(st)
	}
	if w == nil {
		if p.Window != 0 {
			bad("window %d came first", p.Window)
			return
		}
		w = &portionWindows{dap: p.DAPID, granted: messages.InitialPartialCredit}
		if r.windows == nil {
			r.windows = map[messages.PortionRef]*portionWindows{}
		}
		r.windows[ref] = w
	}
	switch {
	case w.ended:
		bad("window %d after the last", p.Window)
		return
	case p.Window != w.next:
		bad("window %d where %d was due", p.Window, w.next)
		return
	case p.Window >= w.granted:
		bad("window %d sent without credit (%d granted)", p.Window, w.granted)
		return
	case p.DAPID != w.dap:
		bad("window %d from DAP %s, window 0 from %s", p.Window, p.DAPID, w.dap)
		return
	}
	n := int64(len(p.Payload))
	if a.held+n > a.cfg.MaxHeldBytes {
		a.log.Warn().Str("request_id", p.RequestID).Int64("held", a.held).Int64("limit", a.cfg.MaxHeldBytes).Msg("partial results over the Agg's limit: request refused")
		r.dropped++
		r.refuse(a.retryAfterLocked())
		return
	}
	if r.bytes+n > a.cfg.MaxRequestBytes {
		r.dropped++
		r.setTooLarge()
		return
	}
	w.queue = append(w.queue, p)
	if r.live == nil && r.exp != nil && !r.streamsLive() && len(p.Payload) >= earlyDecodeBytes {
		// Gathered whole: decoded now, while the other windows come.
		w.decoded = padDecodings(w.decoded, len(w.queue)-1)
		w.decoded = append(w.decoded, a.decodeEarlyLocked(p.Payload, a.held+n))
	}
	w.next++
	w.bytes += n
	r.bytes += n
	w.ended = !p.More
	if !w.ended && r.live == nil && !r.streamsLive() {
		// Gathered whole: credit as windows come, well ahead (MaxRequestBytes
		// bounds what is held), so that the DAP seldom waits for a grant.
		if w.next+messages.InitialPartialCredit > w.granted {
			w.granted = w.next + gatherCredit
			a.credit(r.id, ref, w, false)
		}
	}
	r.live.signal()
}

// credit grants w's DAP its windows, or tells it to stop.
func (a *Agg) credit(requestID string, ref messages.PortionRef, w *portionWindows, stop bool) {
	c := messages.PartialCredit{V: messages.PortionVersion, RequestID: requestID, PortionID: ref.PortionID, Attempt: ref.Attempt,
		AggID: a.cfg.ID, Windows: w.granted, Stop: stop}
	b, err := messages.Encode(&c)
	if err == nil {
		err = a.cfg.NC.Publish(a.cfg.Subjects.DAPCredit(w.dap), b)
	}
	if err != nil {
		a.log.Warn().Err(err).Str("request_id", requestID).Stringer("portion", ref).Msg("credit not sent")
	}
}

// stopWindowsLocked tells the DAPs of r's unfinished windows to stop sending.
func (a *Agg) stopWindowsLocked(r *request) {
	for ref, w := range r.windows {
		if !w.ended {
			w.ended = true
			a.credit(r.id, ref, w, true)
		}
	}
}

// startLiveLocked starts the live merge of a ready request, exactly once; the
// request stays in a.requests for the windows to come.
func (a *Agg) startLiveLocked(r *request) {
	lm := &liveMerge{a: a, r: r, exp: *r.exp, args: r.args.args, sources: append([]messages.PortionRef(nil), r.expect...), wake: make(chan struct{}, 1)}
	r.live = lm
	r.answering = true
	if lm.exp.StreamStart {
		lm.gate = a.openGateLocked(r.id, nuid.Next())
	}
	a.stats.answered.Add(1)
	a.answers.Add(1)
	a.answerers.run(func() {
		defer a.answers.Done()
		a.answerLive(lm)
	})
}

// next is the merge's fetch of ref's next window: it waits for it until the
// deadline, and grants the DAP one more window for the one taken.
func (lm *liveMerge) next(ctx context.Context, ref messages.PortionRef) (merge.Partial, bool, error) {
	a, r := lm.a, lm.r
	a.mu.Lock()
	for {
		if lm.err != nil {
			err := lm.err
			a.mu.Unlock()
			return merge.Partial{}, false, err
		}
		var (
			p     messages.PartialResult
			found bool
		)
		if q, ok := r.partials[ref]; ok { // a portion in one piece
			p, found = q, true
			delete(r.partials, ref)
		} else if w := r.windows[ref]; w != nil && len(w.queue) > 0 {
			p, found = w.queue[0], true
			w.queue[0] = messages.PartialResult{}
			w.queue = w.queue[1:]
			w.bytes -= int64(len(p.Payload))
			w.taken++
			if g := w.taken + messages.InitialPartialCredit; !w.ended && g > w.granted {
				w.granted = g
				a.credit(r.id, ref, w, false)
			}
		}
		if found {
			r.bytes -= int64(len(p.Payload))
			a.held -= int64(len(p.Payload))
			a.mu.Unlock()
			part, err := merge.DecodePartial(p.Payload)
			if err != nil {
				return merge.Partial{}, false, &statusError{messages.Errorf(messages.CodeErr, messages.CodeErr,
					"partial result of portion %s from DAP %s, window %d: %v", ref, p.DAPID, p.Window, err)}
			}
			return part, p.More, nil
		}
		a.mu.Unlock()
		select {
		case <-lm.wake:
		case <-ctx.Done():
			return merge.Partial{}, false, ctx.Err()
		}
		a.mu.Lock()
	}
}

// answerLive streams the answer of lm as its windows come, then ends the
// request: its DAPs told to stop, its id finished.
func (a *Agg) answerLive(lm *liveMerge) {
	e := &lm.exp
	log := a.log.With().Str("request_id", e.RequestID).Str("api", e.API).Str("log_corr", e.LogCorr).Logger()
	content := e.Content
	if content == "" {
		content = messages.ContentMsgpack
	}
	defer a.endLive(lm)
	if lm.gate != nil {
		defer a.closeGate(lm.gate)
	}
	ctx, cancel := context.WithDeadline(context.Background(), time.Unix(0, e.Deadline))
	defer cancel()
	start := time.Now()
	fetch := make([]merge.Fetch, len(lm.sources))
	for i, ref := range lm.sources {
		fetch[i] = func() (merge.Partial, bool, error) { return lm.next(ctx, ref) }
	}
	w, err := merge.NewMerger(lm.args).Stream(fetch)
	if err != nil {
		a.endLiveEarly(lm, content, log, err)
		return
	}
	// Each window is decoded for the merge alone (next): once copied into a
	// frame, the next windows decode into its storage.
	w.ReleaseFetched()
	if f := a.beforeAnswer.Load(); f != nil {
		(*f)()
	}
	st, ok := a.streamWindows(e, w, content, log, start, len(lm.sources), lm, lm.gate) // stream.go
	if !ok {
		a.endLiveEarly(lm, content, log, &statusError{st})
	}
}

// endLiveEarly: the live merge failed before its first frame went out.
func (a *Agg) endLiveEarly(lm *liveMerge, content messages.Content, log zerolog.Logger, err error) {
	e := &lm.exp
	switch st := liveStatus(err); {
	case errors.Is(err, errStopped):
		log.Info().Err(err).Msg("answer stream not begun: request dropped")
	case errors.Is(err, context.DeadlineExceeded):
		a.stats.expired.Add(1)
		log.Warn().Msg("deadline passed before the answer's stream began: not answered")
		a.tellTimedOut(e, "deadline passed before every window came", time.Now()) // timeout.go
	default:
		a.answerWhole(job{exp: *e}, content, st)
	}
}

// liveStatus is the status a live stream ends with for err.
func liveStatus(err error) messages.Status {
	var se *statusError
	switch {
	case errors.As(err, &se):
		return se.st
	case errors.Is(err, context.DeadlineExceeded):
		return messages.Errorf(messages.CodeTimeout, messages.CodeErr, "the deadline passed while the answer streamed: the answer is cut")
	}
	return mergeStatus(err)
}

// endLive ends lm's request: the DAPs still sending told to stop, what it
// holds dropped, its id finished (unless a cancel finished it first).
func (a *Agg) endLive(lm *liveMerge) {
	a.mu.Lock()
	defer a.mu.Unlock()
	// finishLocked stops the DAPs and lm; a request no longer in
	// a.requests went through it already (finishLocked is the only way out).
	if r := lm.r; a.requests[r.id] == r {
		a.finishLocked(r.id, lm.exp.Deadline, time.Now())
	}
}

// stopLiveLocked ends every live merge (the Agg stops); a.mu held.
func (a *Agg) stopLiveLocked() {
	for _, r := range a.requests {
		r.live.fail(messages.Errorf(messages.CodeErr, messages.CodeErr, "Agg %s stopped while the answer streamed: the answer is cut, ask again", a.cfg.ID))
	}
}
