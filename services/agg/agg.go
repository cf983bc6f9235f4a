package agg

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"
	"github.com/sg-project/sg/messages"
	"github.com/sg-project/sg/services/loglimit"
)

// Agg is one running aggregator. Create it with New, start it with Run.
type Agg struct {
	cfg Config
	log zerolog.Logger
	// lim limits the log lines that input from the network causes (a
	// malformed or forged message): package loglimit.
	lim *loglimit.Limiter

	mu       sync.Mutex
	requests map[string]*request
	finished map[string]time.Time  // answered, cancelled or expired ids -> when to forget them
	streams  map[string]*stream    // chunked partials being reassembled, by transfer id
	gates    map[string]*startGate // answer streams that may wait for the GW's start signal, by request id (start.go)
	closing  bool                  // Run is stopping: start no answer (answers.Add must precede Wait)
	held     int64                 // bytes of partial results held, all requests (Config.MaxHeldBytes)
	transit  int64                 // bytes of chunked partials still being reassembled (counted in MaxHeldBytes too)

	dones     *doneNotices   // done notices waiting to go to their RCs (done.go)
	answers   sync.WaitGroup // answers in progress; Run waits for them
	answerers answerers      // the goroutines that run them (answerers.go)
	// earlyDecodes: windows being decoded, and folds run on answerers, as they come (early.go, fold.go).
	earlyDecodes atomic.Int32
	// foldHook, for tests: given to each fold made after it is set (aggFold.hook).
	foldHook atomic.Pointer[func(n int)]
	// changed, for tests: called once an expectation, partial or cancel was
	// applied, a request finished or a done notice is held (noteChanged), so
	// that a test waits on that event instead of polling.
	changed atomic.Pointer[func()]
	// beforeAnswer, for tests: called on the answerer before an answer
	// taken out of the requests begins (its merge, its stream); a live
	// merge's once its first windows are fetched, before its first frame.
	beforeAnswer atomic.Pointer[func()]
	startedAt    int64         // unix nanoseconds, in heartbeats: a new value tells RCs we restarted
	hbSeq        uint64        // owned by Run
	ready        chan struct{} // closed once Run's subscriptions are live
	started      atomic.Bool
	stats        counters
	metrics      *metrics // metrics.go
}

// stream is one chunked partial in transit.
type stream struct {
	r         *messages.Reassembler
	requestID string
	since     time.Time
	bytes     int64 // what r holds (a.transit's share): its payload's room and chunks after a gap
}

type counters struct {
	expectations, partials, discarded, malformed, answered, errors, tooLarge, expired, cancelled, refused atomic.Uint64
	folded, foldedAtAnswer                                                                                atomic.Uint64
	// foldResets: supersedes that reset a fold which had folded a partial
	// (fold.go); not in Stats: the tests' proof that a reset was exercised.
	foldResets atomic.Uint64
	// refusals: messages refused to their RC (refuse.go).
	refusals atomic.Uint64
}

// Stats is a snapshot of the Agg's counters.
type Stats struct {
	Expectations uint64 // expectations received (valid)
	Partials     uint64 // partial results received whole (valid)
	Discarded    uint64 // partials that did not count in an answer: superseded, unexpected, duplicate, late, cancelled, too large
	Malformed    uint64 // messages that did not decode, validate or reassemble
	Answered     uint64 // requests taken for answering (each id once)
	Errors       uint64 // of which answered with an error status
	TooLarge     uint64 // of which answered TOO_LARGE
	Expired      uint64 // requests dropped at their deadline or after PartialTTL, unanswered
	Cancelled    uint64 // requests dropped on the RC's cancel (the RC answered them)
	Refused      uint64 // of the answered, RATE_LIMITED: the Agg held too much (MaxHeldBytes)
	RefusalsSent uint64 // messages that did not decode or validate, refused to the request's RC (of Malformed)
	// Folded: aggregate partials folded as they came (fold.go; one folded
	// again after a supersede reset its fold counts again); FoldedAtAnswer:
	// those the answer folded, not folded as they came.
	Folded, FoldedAtAnswer uint64
	Pending                int // requests held now
}

// New validates cfg and returns an Agg.
func New(cfg Config) (*Agg, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	m, err := newMetrics(cfg.Registry, cfg.ID)
	if err != nil {
		return nil, fmt.Errorf("agg %s: %w", cfg.ID, err)
	}
	a := &Agg{cfg: cfg, metrics: m, log: cfg.Log.With().Str("agg", cfg.ID).Logger(), lim: loglimit.Default(),
		ready: make(chan struct{}), requests: map[string]*request{}, finished: map[string]time.Time{}, streams: map[string]*stream{}}
	a.dones = newDoneNotices(a)
	return a, nil
}

// Stats returns the current counters.
func (a *Agg) Stats() Stats {
	a.mu.Lock()
	pending := len(a.requests)
	a.mu.Unlock()
	s := &a.stats
	return Stats{Expectations: s.expectations.Load(), Partials: s.partials.Load(), Discarded: s.discarded.Load(),
		Malformed: s.malformed.Load(), Answered: s.answered.Load(), Errors: s.errors.Load(),
		TooLarge: s.tooLarge.Load(), Expired: s.expired.Load(), Cancelled: s.cancelled.Load(), Refused: s.refused.Load(),
		RefusalsSent: s.refusals.Load(), Folded: s.folded.Load(), FoldedAtAnswer: s.foldedAtAnswer.Load(), Pending: pending}
}

// Ready is closed once Run's subscriptions are live at the server and its first
// heartbeat (what RCs know it by) is sent, so that a caller (a test, sg run) can
// send the first expectation without losing it.
func (a *Agg) Ready() <-chan struct{} { return a.ready }

// Run serves expectations and partials until ctx ends, then unsubscribes and waits for
// the answers in progress.
func (a *Agg) Run(ctx context.Context) error {
	if !a.started.CompareAndSwap(false, true) {
		return errors.New("agg: Run called twice")
	}
	nc, subj := a.cfg.NC, a.cfg.Subjects
	expect, err := nc.Subscribe(subj.AggExpect(a.cfg.ID), func(m *nats.Msg) { a.onExpect(m); a.noteChanged() })
	if err != nil {
		return fmt.Errorf("agg %s: subscribe expectations: %w", a.cfg.ID, err)
	}
	defer expect.Unsubscribe()
	partial, err := nc.Subscribe(subj.AggPartial(a.cfg.ID), func(m *nats.Msg) { a.onPartial(m); a.noteChanged() })
	if err != nil {
		return fmt.Errorf("agg %s: subscribe partials: %w", a.cfg.ID, err)
	}
	defer partial.Unsubscribe()
	cancel, err := nc.Subscribe(subj.AggCancel(a.cfg.ID), func(m *nats.Msg) { a.onCancel(m); a.noteChanged() })
	if err != nil {
		return fmt.Errorf("agg %s: subscribe cancels: %w", a.cfg.ID, err)
	}
	defer cancel.Unsubscribe()
	start, err := nc.Subscribe(subj.AggStart(a.cfg.ID), func(m *nats.Msg) { a.onStart(m); a.noteChanged() })
	if err != nil {
		return fmt.Errorf("agg %s: subscribe start signals: %w", a.cfg.ID, err)
	}
	defer start.Unsubscribe()
	// Whole answers' worth of chunks may be pending while one is merged: a slow
	// consumer would lose chunks and fail the transfer.
	pendingBytes := int(min(max(2*a.cfg.MaxAnswerBytes, 64<<20), 1<<40))
	for _, s := range []*nats.Subscription{expect, partial} {
		if err := s.SetPendingLimits(1<<20, pendingBytes); err != nil {
			return fmt.Errorf("agg %s: pending limits: %w", a.cfg.ID, err)
		}
	}
	if err := nc.Flush(); err != nil {
		return fmt.Errorf("agg %s: flush subscriptions: %w", a.cfg.ID, err)
	}
	a.startedAt = time.Now().UnixNano()
	a.heartbeat(false) // RCs learn of it: registered
	close(a.ready)
	a.log.Info().Int64("max_answer_bytes", a.cfg.MaxAnswerBytes).Dur("partial_ttl", a.cfg.PartialTTL).
		Dur("heartbeat", a.cfg.Heartbeat).Msg("Agg started")

	sweep := time.NewTicker(min(max(a.cfg.PartialTTL/4, 10*time.Millisecond), time.Second))
	defer sweep.Stop()
	beat := time.NewTicker(a.cfg.Heartbeat)
	defer beat.Stop()
	doneTimer := time.NewTimer(time.Hour)
	doneTimer.Stop()
	defer doneTimer.Stop()
	doneArmed := false
	for done := false; !done; {
		select {
		case <-ctx.Done():
			done = true
		case now := <-sweep.C:
			a.sweep(now)
		case <-beat.C:
			a.heartbeat(false)
		case <-a.dones.wake:
			switch {
			case a.dones.takeUrgent():
				doneTimer.Stop()
				doneArmed = false
				a.dones.flush()
			case !doneArmed:
				doneTimer.Reset(a.cfg.DoneDelay)
				doneArmed = true
			}
		case <-doneTimer.C:
			doneArmed = false
			a.dones.flush()
		}
	}
	// The requests answered are over at their RCs before this Agg is gone:
	// none is driven again elsewhere.
	a.dones.flush()
	// RCs drive what we hold again elsewhere now, rather than after missed beats.
	a.heartbeat(true)
	_ = expect.Unsubscribe()
	_ = partial.Unsubscribe()
	_ = cancel.Unsubscribe()
	_ = start.Unsubscribe()
	a.mu.Lock()
	a.closing = true
	a.stopLiveLocked()  // live.go: a stream waiting for windows ends now
	a.stopGatesLocked() // start.go: so does one waiting for its start signal
	for _, r := range a.requests {
		if r.fold != nil && !r.answering {
			r.fold.close() // never answered now: folds under way are let go, answers.Wait need not wait for them
		}
	}
	a.mu.Unlock()
	a.answers.Wait()
	a.answerers.stop()
	a.dones.flush() // the answers that were under way

	if err := nc.FlushTimeout(time.Second); err != nil && !errors.Is(err, nats.ErrConnectionClosed) {
		a.log.Warn().Err(err).Msg("flush on stop")
	}
	a.log.Info().Msg("Agg stopped")
	return nil
}

// heartbeat tells the RCs we are alive (or, stopping, that we are gone).
func (a *Agg) heartbeat(stopping bool) {
	a.mu.Lock()
	pending := len(a.requests)
	held := a.held
	a.mu.Unlock()
	a.hbSeq++
	hb := messages.AggHeartbeat{V: messages.AggVersion, AggID: a.cfg.ID, Seq: a.hbSeq, SentAt: time.Now().UnixNano(),
		StartedAt: a.startedAt, IntervalMS: a.cfg.Heartbeat.Milliseconds(), Pending: pending, HeldBytes: held, Stopping: stopping}
	b, err := messages.Encode(&hb)
	if err == nil {
		err = a.cfg.NC.Publish(a.cfg.Subjects.AggHeartbeat(a.cfg.ID), b)
	}
	if err != nil {
		a.log.Warn().Err(err).Msg("heartbeat not sent")
	}
}

// finishLocked forgets request id and drops anything about it that arrives later; a.mu
// held. Partials still held count as discarded, unless they are being answered.
func (a *Agg) finishLocked(id string, deadline int64, now time.Time) {
	defer a.noteChanged()
	if r := a.requests[id]; r != nil {
		a.held -= r.bytes
		if !r.answering {
			a.stats.discarded.Add(uint64(len(r.partials)))
			if r.fold != nil {
				r.fold.close() // folds under way are let go
			}
		}
		// Its DAPs still sending windows stop; a live stream ends (live.go).
		a.stopWindowsLocked(r)
		r.live.stop(errStopped)
	}
	delete(a.requests, id)
	// Remember the id past the deadline: a late expectation or partial must not open
	// a new request that could be answered a second time.
	until := now
	if d := time.Unix(0, deadline); d.After(until) {
		until = d
	}
	a.finished[id] = until.Add(a.cfg.PartialTTL)
}

// sweep drops requests past their deadline (the RC answers the timeout), partials
// whose expectation never came, stale chunk transfers and old finished ids.
func (a *Agg) sweep(now time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for id, r := range a.requests {
		if r.live != nil {
			continue // its stream ends itself at the deadline (live.go)
		}
		switch {
		case r.exp != nil && now.UnixNano() >= r.exp.Deadline:
			a.log.Info().Str("request_id", id).Int("partials", len(r.partials)).Msg("deadline passed before every partial came: not answered")
			a.tellTimedOut(r.exp, "deadline passed before every partial came", now) // timeout.go
		case r.exp == nil && now.Sub(r.created) >= a.cfg.PartialTTL:
			a.log.Info().Str("request_id", id).Int("partials", len(r.partials)).Msg("no expectation within PartialTTL: partials dropped")
		default:
			continue
		}
		a.stats.expired.Add(1)
		var deadline int64
		if r.exp != nil {
			deadline = r.exp.Deadline
		}
		a.finishLocked(id, deadline, now)
	}
	for k, s := range a.streams {
		if now.Sub(s.since) >= a.cfg.PartialTTL {
			a.log.Info().Str("request_id", s.requestID).Int("missing_chunks", s.r.Missing()).Msg("chunked partial incomplete within PartialTTL: dropped")
			a.dropStreamLocked(k, s)
		}
	}
	for id, until := range a.finished {
		if now.After(until) {
			delete(a.finished, id)
		}
	}
}

// noteChanged calls the test hook Agg.changed, if one is set.
func (a *Agg) noteChanged() {
	if f := a.changed.Load(); f != nil {
		(*f)()
	}
}
