package dap

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

// DAP is one running data access process. Create it with New, start it with Run.
type DAP struct {
	cfg     Config // fixed after New; the mutable part of the registration is in state
	log     zerolog.Logger
	queue   fifo
	metrics *metrics // metrics.go
	// lim limits the log lines that input from the network causes (a
	// malformed or forged message, a flood of dispatches): package
	// loglimit.
	lim *loglimit.Limiter

	mu        sync.Mutex
	state     state
	seen      map[string]int64 // RC id -> StartedAt of its last announcement
	running   map[*running]struct{}
	cancelled cancels

	creditMu sync.Mutex
	credits  map[creditKey]*credit // portions being sent in windows (window.go)
	// windowBufs keep the buffers windows are encoded into, one a slot
	// (window.go): a large partial does not allocate and clear its own.
	windowBufs chan []byte

	started atomic.Bool
	ready   chan struct{} // closed once subscribed and registered
	stats   counters
}

// state is what SetAvailable, SetPurview and SetVintage change, and what a dispatch is
// checked against.
type state struct {
	available bool
	reason    string
	purview   messages.TimeRange
	pv, rv    uint64
	running   int
	hbSeq     uint64
	source    Source // what portions admitted now run on; Apply swaps it with the versions
	stopped   bool   // DAPLost sent: no more heartbeats
}

// counters are the DAP's metrics; Stats reads them.
type counters struct {
	received, malformed, retried, executed, failed, timedOut, cancelled, refused atomic.Uint64
	refusals                                                                     atomic.Uint64 // malformed dispatches refused to their RC
}

// Stats is a snapshot of the DAP's counters.
type Stats struct {
	Received  uint64 // messages on the portion subject
	Malformed uint64 // of which did not decode or validate
	Retried   uint64 // answered RETRY (version, vintage or availability mismatch)
	Executed  uint64 // ran to success
	Failed    uint64 // ran to an error other than the deadline
	TimedOut  uint64 // passed their deadline
	Cancelled uint64 // stopped (running) or dropped (queued) on the RC's cancel
	Refused   uint64 // refused RATE_LIMITED: the queue was full (Config.MaxQueue)
	// RefusalsSent: of the malformed, refused to the RC their headers named
	// (messages.Refusal).
	RefusalsSent uint64
	Running      int
	Queued       int
}

// New validates cfg and returns a DAP that is available with the configured purview,
// purview version and reference vintage.
func New(cfg Config) (*DAP, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	m, err := newMetrics(cfg.Registry, cfg.ID)
	if err != nil {
		return nil, fmt.Errorf("dap %s: %w", cfg.ID, err)
	}
	d := &DAP{
		metrics:    m,
		lim:        loglimit.Default(),
		cfg:        cfg,
		log:        cfg.Log.With().Str("dap", cfg.ID).Logger(),
		seen:       map[string]int64{},
		running:    map[*running]struct{}{},
		credits:    map[creditKey]*credit{},
		queue:      newFIFO(),
		windowBufs: make(chan []byte, cfg.Concurrency),
		ready:      make(chan struct{}),
		state: state{available: cfg.Unavailable == "", reason: cfg.Unavailable, purview: cfg.Purview,
			pv: cfg.PurviewVersion, rv: cfg.ReferenceVintage, source: cfg.Source},
	}
	return d, nil
}

// Ready is closed once the DAP is subscribed and has registered with the
// RCs: it can serve what they dispatch.
func (d *DAP) Ready() <-chan struct{} { return d.ready }

// ID returns the DAP's id.
func (d *DAP) ID() string { return d.cfg.ID }

// Stats returns the current counters.
func (d *DAP) Stats() Stats {
	d.mu.Lock()
	running := d.state.running
	d.mu.Unlock()
	return Stats{
		Received: d.stats.received.Load(), Malformed: d.stats.malformed.Load(),
		Retried: d.stats.retried.Load(), Executed: d.stats.executed.Load(),
		Failed: d.stats.failed.Load(), TimedOut: d.stats.timedOut.Load(), Cancelled: d.stats.cancelled.Load(), Refused: d.stats.refused.Load(),
		RefusalsSent: d.stats.refusals.Load(), Running: running, Queued: d.queue.len(),
	}
}

// Run registers the DAP, serves portions and sends heartbeats until ctx ends; then it
// stops taking portions, says DAPLost{Reason: "shutdown"}, waits for its goroutines and
// flushes. Portions cut short by the shutdown get no completion: the loss notice tells
// the RC to run them elsewhere.
func (d *DAP) Run(ctx context.Context) error {
	if !d.started.CompareAndSwap(false, true) {
		return errors.New("dap: Run called twice")
	}
	nc, subj := d.cfg.NC, d.cfg.Subjects
	portions, err := nc.Subscribe(subj.DAPPortion(d.cfg.ID), d.onPortion)
	if err != nil {
		return fmt.Errorf("dap %s: subscribe portions: %w", d.cfg.ID, err)
	}
	defer portions.Unsubscribe()
	// The callback only queues, but a burst of dispatches must never be dropped as a
	// slow consumer: the RC counts on a completion for each.
	if err := portions.SetPendingLimits(1<<20, 1<<30); err != nil {
		return fmt.Errorf("dap %s: pending limits: %w", d.cfg.ID, err)
	}
	cancel, err := nc.Subscribe(subj.DAPCancel(d.cfg.ID), d.onCancel)
	if err != nil {
		return fmt.Errorf("dap %s: subscribe cancels: %w", d.cfg.ID, err)
	}
	defer cancel.Unsubscribe()
	credits, err := nc.Subscribe(subj.DAPCredit(d.cfg.ID), d.onCredit)
	if err != nil {
		return fmt.Errorf("dap %s: subscribe credits: %w", d.cfg.ID, err)
	}
	defer credits.Unsubscribe()
	announces, err := nc.Subscribe(subj.RCAnnouncePattern(), d.onAnnounce)
	if err != nil {
		return fmt.Errorf("dap %s: subscribe RC announcements: %w", d.cfg.ID, err)
	}
	defer announces.Unsubscribe()
	// Subscriptions must be live at the server before the RC hears of us and dispatches.
	if err := nc.Flush(); err != nil {
		return fmt.Errorf("dap %s: flush subscriptions: %w", d.cfg.ID, err)
	}
	d.publishRegistration()
	d.log.Info().Str("tier", string(d.cfg.Tier)).Str("labels", d.cfg.Labels.Key()).
		Stringer("purview", d.cfg.Purview).Int("concurrency", d.cfg.Concurrency).Msg("DAP registered")
	close(d.ready)

	var wg sync.WaitGroup
	wg.Go(func() { d.heartbeats(ctx) })
	wg.Go(func() { d.dispatchLoop(ctx) })
	<-ctx.Done()

	_ = portions.Unsubscribe()
	_ = cancel.Unsubscribe()
	_ = credits.Unsubscribe()
	_ = announces.Unsubscribe()
	d.publishLost("shutdown")
	wg.Wait()
	if err := nc.FlushTimeout(time.Second); err != nil && !errors.Is(err, nats.ErrConnectionClosed) {
		d.log.Warn().Err(err).Msg("flush on shutdown")
	}
	d.log.Info().Msg("DAP stopped")
	return nil
}
