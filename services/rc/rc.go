// Package rc is the resource coordinator's NATS shell: it turns DAP events,
// GW submissions, DAP completions and Agg notices into events for the
// scheduling core (services/rc/core), and the core's commands into NATS
// messages. One goroutine owns the core (see Run).
//
// Several RCs share the fleet: each sees every DAP's events and owns some
// DAPs; a request that needs another RC's DAPs is run with this RC as primary
// and the owners as secondaries (peers.go). With Config.JetStream the RC
// rebuilds the fleet at start from the DAP state stream (fleetstate.go).
//
// A GW cancels a request on subjects.RCCancel (empty body, Sg-Request-Id); the core
// then tells the DAPs, secondaries and Agg to stop (cancel.go in the core). The RC
// watches the configured Aggs' heartbeats (aggs.go): a lost Agg's requests are driven
// again on another. Queue limits (Config.MaxQueued, MaxQueuedPerCaller, the caller from
// Sg-Caller) are decided by the core; over one the caller gets RATE_LIMITED with
// Sg-Limit and Sg-Retry-After.
package rc

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/sg-project/sg/messages"
	"github.com/sg-project/sg/services/loglimit"
	"github.com/sg-project/sg/services/rc/core"
	"github.com/sg-project/sg/services/stall"
)

// RC is one resource coordinator.
type RC struct {
	cfg     Config
	own     ownSubjects
	log     zerolog.Logger
	core    *core.Core
	metrics *metrics
	started time.Time

	// Owned by the Run goroutine alone:
	pending map[string]*pendingRequest // requests in flight, by id
	daps    map[string]*dapRecord      // last registration and heartbeat per DAP
	aggs    map[string]*aggRecord      // the configured Aggs, alive or not
	relayed map[string]*relayInfo      // peers' requests this RC relays as secondary
	peers   map[string]*peerRC         // other RCs, from their announcements
	stall   stall.Watch                // the loop's lateness, not counted as silence (stall.go)
	// lim limits the log lines that input from the network causes (a bad
	// or forged message, a loop stall): package loglimit.
	lim *loglimit.Limiter
	// wantWake: the period the wake ticker (and stall.Period) is to have (stall.go).
	wantWake time.Duration
	armed    int64 // the deadline the loop's timer is set for (unix ns); 0: none pending

	ready  chan struct{} // closed once subscribed and the fleet is rebuilt
	warmCh chan struct{} // closed once the fleet view is warm (warm.go)

	// Warm-up state, owned by the Run goroutine (warm.go).
	isWarm    bool
	warmUntil time.Time
	known     map[string]bool // DAPs named by the replay
	heard     map[string]bool // DAPs heard from live since start
	early     []input         // submissions held until warm
	recovered atomic.Int64    // DAPs rebuilt from the DAP state stream
}

// Ready is closed when the RC is subscribed and has rebuilt the fleet from
// the DAP state stream (if configured), just before it first announces.
func (r *RC) Ready() <-chan struct{} { return r.ready }

// RecoveredDAPs is the number of DAPs the RC knew from the DAP state stream
// alone, before any live event; valid once Ready is closed.
func (r *RC) RecoveredDAPs() int { return int(r.recovered.Load()) }

// ID is the RC's id.
func (r *RC) ID() string { return r.cfg.ID }

// pendingRequest is what the shell keeps of a request beside the core's state:
// what it needs to carry out commands about it.
type pendingRequest struct {
	sub messages.RCSubmission
	// log carries the request id, the caller's logCorr and the GW: built
	// where a line is first written about the request (reqLog), not for
	// every request, most of which log nothing above debug.
	log     *zerolog.Logger
	arrived time.Time
	aggSeq  uint32
	// trackSealed: the last expectation the Agg got from AggTrack sealed the set.
	trackSealed bool
	via         map[core.PortionID]viaPortion // portions relayed through secondary RCs
	// client and caller: the GW's Sg-Client-Request-Id and Sg-Caller, by
	// which a GW asks for the request's position (position.go).
	client, caller string
}

type dapRecord struct {
	reg      messages.DAPRegistration
	lastSeen time.Time
	interval time.Duration
}

// reqLog is the logger for lines about a request: with its id, and with the
// caller's logCorr and the GW while the RC holds it.
func (r *RC) reqLog(id string) *zerolog.Logger { return r.reqLogFrom(id, nil) }

// reqLogFrom is reqLog for a message about request id that may come after
// the RC let the request go (a DAP's completion can trail the Agg's answer,
// which now comes on the last partial): its log correlation id is then read
// from the message's routing header, bounded, so every line about a request
// carries it.
func (r *RC) reqLogFrom(id string, h nats.Header) *zerolog.Logger {
	if p := r.pending[id]; p != nil {
		if p.log == nil {
			l := r.requestLogger(&p.sub, p.caller)
			p.log = &l
		}
		return p.log
	}
	lc := r.log.With().Str("request_id", id)
	if corr := h.Get(messages.HdrLogCorr); corr != "" && len(corr) <= maxLogCorrLogged {
		lc = lc.Str("log_corr", corr)
	}
	l := lc.Logger()
	return &l
}

// reqDebug is reqLog(id).Debug(), but nil (a line that writes nothing)
// without building the request's logger when debug lines are off: the RC
// writes one for every dispatch and every completion.
func (r *RC) reqDebug(id string) *zerolog.Event { return r.reqDebugFrom(id, nil) }

// reqDebugFrom is reqLogFrom(id, h).Debug() as reqDebug is.
func (r *RC) reqDebugFrom(id string, h nats.Header) *zerolog.Event {
	if r.log.GetLevel() > zerolog.DebugLevel || zerolog.GlobalLevel() > zerolog.DebugLevel {
		return nil
	}
	return r.reqLogFrom(id, h).Debug()
}

// maxLogCorrLogged bounds a log correlation id taken from a header.
const maxLogCorrLogged = 256

// New checks the configuration and builds an RC; Run starts it.
func New(cfg Config) (*RC, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	r := &RC{
		cfg: cfg,
		own: newOwnSubjects(cfg.Subjects, cfg.ID),
		log: cfg.Log.With().Str("service", "rc").Str("rc", cfg.ID).Logger(),
		core: core.New(core.Config{
			Self: cfg.ID, Addr: cfg.Addr, MaxRetry: cfg.MaxRetry,
			MultiRCMaxWait: cfg.MultiRCMaxWait, TickEvery: cfg.TickEvery,
			FirstPortion: core.PortionID(cfg.Now().UnixNano()), Aggs: cfg.AggIDs,
			MaxQueued: cfg.MaxQueued, MaxQueuedPerCaller: cfg.MaxQueuedPerCaller, RetryAfter: cfg.RetryAfter,
			LabelSetRetention: cfg.LabelSetRetention,
		}),
		pending: map[string]*pendingRequest{},
		daps:    map[string]*dapRecord{},
		aggs:    map[string]*aggRecord{},
		relayed: map[string]*relayInfo{},
		peers:   map[string]*peerRC{},
		ready:   make(chan struct{}),
		warmCh:  make(chan struct{}),
		lim:     loglimit.Default(),
	}
	r.metrics, err = newMetrics(cfg.Registry, cfg.ID)
	if err != nil {
		return nil, err
	}
	r.stall = stall.Watch{Period: cfg.AnnounceEvery, Stalls: r.metrics.stalls, Log: &r.log, Limit: r.lim,
		Warn: "rc loop stalled: not counted as silence of DAPs, Aggs and peer RCs"}
	r.wantWake = cfg.AnnounceEvery
	return r, nil
}

// input is one message for the core's goroutine, decoded where it arrived.
type input struct {
	subject string
	msg     *nats.Msg
}

// Run subscribes and runs the core until ctx ends, then unsubscribes.
func (r *RC) Run(ctx context.Context) error {
	r.started = r.cfg.Now()
	inbox := make(chan input, 4096)
	deliver := func(m *nats.Msg) {
		select {
		case inbox <- input{subject: m.Subject, msg: m}:
		case <-ctx.Done():
		}
	}
	s := r.cfg.Subjects
	var subs []*nats.Subscription
	for _, subj := range []string{s.DAPEventsPattern(), s.RCInbox(r.cfg.ID), s.RCAnnouncePattern(), s.AggHeartbeatPattern()} {
		sub, err := r.cfg.NC.Subscribe(subj, deliver)
		if err != nil {
			return fmt.Errorf("rc %s: subscribe %s: %w", r.cfg.ID, subj, err)
		}
		// A burst of answers must queue, not be dropped as a slow consumer.
		if err := sub.SetPendingLimits(1<<20, 1<<30); err != nil {
			return fmt.Errorf("rc %s: pending limits: %w", r.cfg.ID, err)
		}
		subs = append(subs, sub)
	}
	defer func() {
		for _, sub := range subs {
			_ = sub.Unsubscribe()
		}
	}()
	if err := r.cfg.NC.Flush(); err != nil {
		return fmt.Errorf("rc %s: flush subscriptions: %w", r.cfg.ID, err)
	}
	// Events that arrive during the replay wait in inbox and are applied
	// after it: they are newer.
	if r.cfg.JetStream != nil {
		n, err := r.recoverFleet(ctx)
		if err != nil {
			return err
		}
		r.recovered.Store(int64(n))
		r.metrics.recoveredDAPs.Set(float64(n))
		r.log.Info().Int("daps", n).Dur("took", r.cfg.Now().Sub(r.started)).Msg("fleet rebuilt from the DAP state stream")
	}
	// Until its first heartbeat says otherwise, a configured Agg is assumed alive.
	for _, id := range r.cfg.AggIDs {
		r.aggs[id] = &aggRecord{lastSeen: r.cfg.Now(), interval: defaultAggHeartbeat}
	}
	close(r.ready)
	r.startWarmUp(r.cfg.Now())
	warmTimer := time.NewTimer(max(r.cfg.WarmUp, 0))
	defer warmTimer.Stop()
	r.announce(false)
	r.observe()
	r.log.Info().Str("assembly", r.cfg.Assembly).Dur("timer", r.cfg.TickEvery).Int("max_retry", r.cfg.MaxRetry).Msg("rc started")

	tick := time.NewTicker(r.cfg.TickEvery)
	defer tick.Stop()
	announce := time.NewTicker(r.cfg.AnnounceEvery)
	defer announce.Stop()
	wake := time.NewTicker(r.stall.Period) // the loop's own pace, to measure its stalls (stall.go)
	defer wake.Stop()
	r.wantWake = r.wakePeriod() // the DAPs and Aggs known from the replay
	r.stall.Wake(r.cfg.Now())   // the first wake: the loop judges from now on
	deadline := time.NewTimer(time.Hour)
	defer deadline.Stop()

	for {
		select {
		case <-ctx.Done():
			r.announce(true)
			r.log.Info().Msg("rc stopping")
			return nil
		case in := <-inbox:
			r.onInput(in)
		case now := <-warmTimer.C:
			r.checkWarm(now)
		case <-deadline.C:
			r.armed = 0 // fired: the next deadline arms it again, even the same one
			r.step(core.Tick{At: r.cfg.Now().UnixNano()})
		case <-tick.C:
			r.onTick(inbox)
		case <-announce.C:
			r.onAnnounce()
		case <-wake.C:
			r.discountStall(r.cfg.Now())
		}
		r.armDeadline(deadline)
		r.armWake(wake)
	}
}

// onTick judges liveness and moves the core's clock. What is already in the
// inbox is heard first: after a stall (GC, a starved CPU) the ticker and the
// heartbeats queued during it are ready together, select picks either, and
// judging first dropped every DAP whose heartbeat was waiting (requests then
// got NO_RESOURCES, or answers without those DAPs' label sets).
func (r *RC) onTick(inbox <-chan input) {
	for range len(inbox) {
		r.onInput(<-inbox)
	}
	now := r.cfg.Now()
	r.discountStall(now)
	r.checkHeartbeats()
	r.checkAggs(now)
	r.forgetRelayed(now)
	r.step(core.Tick{At: now.UnixNano()})
}

// onAnnounce announces the RC and judges its peer RCs' silence, after
// discounting its own stall (stall.go).
func (r *RC) onAnnounce() {
	r.announce(false)
	now := r.cfg.Now()
	r.discountStall(now)
	r.checkPeers(now)
	r.observe()
	r.wantWake = r.wakePeriod() // DAPs and Aggs that left or slowed down
}

// armDeadline sets the timer to the core's next deadline, so a timeout is
// answered on time rather than at the next periodic tick. It is re-armed only
// when that deadline changed (armed): most inputs leave it as it was.
func (r *RC) armDeadline(t *time.Timer) {
	at, ok := r.core.NextDeadline()
	if !ok || at == r.armed {
		return
	}
	r.armed = at
	// No stale fire can be received after Reset (Go 1.23 timers).
	t.Reset(max(time.Unix(0, at).Sub(r.cfg.Now()), 0))
}

// step feeds one event to the core and carries out its commands.
func (r *RC) step(ev core.Event) {
	for _, cmd := range r.core.Step(ev) {
		r.carryOut(cmd)
	}
}

// observe sets the gauges read from the whole core (queue length, requests
// by status, DAPs), at every announcement: after every step, counting the
// requests by status cost a fifth of the RC's CPU with 50 callers.
func (r *RC) observe() {
	r.metrics.observe(r.core)
	r.metrics.kxConnectedDAPs.Set(float64(len(r.daps)))
}

func (r *RC) announce(draining bool) {
	st, _ := r.core.Stats()
	m := messages.RCAnnouncement{
		V: messages.RCVersion, RCID: r.cfg.ID, Assembly: r.cfg.Assembly, Addr: r.cfg.Addr, Labels: r.cfg.Labels,
		Outstanding: len(r.pending), Queued: st.QueueLength, DAPs: len(r.daps),
		Draining: draining, StartedAt: r.started.UnixNano(), Warming: !r.isWarm,
	}
	r.publish(r.cfg.Subjects.RCAnnounce(r.cfg.ID), nil, &m)
}

// publish encodes and sends (from a pooled buffer: messages.WithEncoded); a
// failure is logged (the request it concerns then times out with a precise
// message rather than hanging).
func (r *RC) publish(subject string, h nats.Header, v any) {
	var sendErr error
	err := messages.WithEncoded(v, func(data []byte) error {
		sendErr = r.cfg.NC.PublishMsg(&nats.Msg{Subject: subject, Header: h, Data: data})
		return nil
	})
	switch {
	case err != nil:
		r.log.Error().Err(err).Str("subject", subject).Msg("encode")
	case sendErr != nil:
		r.log.Error().Err(sendErr).Str("subject", subject).Msg("publish")
	}
}
