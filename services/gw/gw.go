package gw

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"github.com/nats-io/nuid"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"github.com/sg-project/sg/messages"
	"github.com/sg-project/sg/services/gw/core"
	"github.com/sg-project/sg/services/loglimit"
	"github.com/sg-project/sg/subjects"
)

// RCInfo is what the GW knows of one RC, from its announcements and
// heartbeats (LastSeen and Period in nanoseconds).
type RCInfo = core.RCInfo

// GW is one gateway process. Create it with New and start it with Run.
//
// Its requests live in a core.Core, which one goroutine (the loop, shell.go)
// alone touches; NATS callbacks, the request log's workers and the sweeper
// hand it their inputs through a channel.
type GW struct {
	cfg Config
	log zerolog.Logger
	nc  *nats.Conn
	s   subjects.Subjects
	met *metrics

	ready   chan struct{} // closed when the endpoints are registered
	serving chan struct{} // closed when the GW first knows a warm RC (ready.go)
	runOnce sync.Once

	startedAt int64       // this incarnation, in GW heartbeats and log entries
	rlog      *requestLog // nil without Config.RequestLog
	jobs      *jobStore   // nil without Config.Jobs (jobs.go)
	peers     gwPeers
	sweeps    chan struct{} // a sweep of the request log is wanted

	in       chan input    // to the loop
	loopDone chan struct{} // closed when the loop returned: nobody reads in any more

	answers *answerStore // nil without Config.AnswerStore (answerstore.go)

	// lim limits the log lines that input from the network causes (a
	// malformed or forged message, a loop stall): package loglimit.
	lim *loglimit.Limiter

	// divertAck, a test hook: the reply subject a request log write's
	// acknowledgement goes to instead of reply (a test that delays it
	// passes it on later); nil: reply.
	divertAck func(w core.WriteLog, reply string) string
	// scopeWalk reads the scope of msgpack arguments their decoder refused,
	// by a walk of its own (messages.ScopeFromArgs); a test counts the
	// walks.
	scopeWalk func(c messages.Content, args []byte) (messages.Scope, bool, error)
	// newID makes a request's id (nuid.Next); a benchmark knows the ids
	// before the clock, to build the Agg's answers to them.
	newID func() string

	rcMu      sync.Mutex
	rcList    []RCInfo      // the core's RCs after its last step, for RCs and WaitRCs
	rcChanged chan struct{} // closed and replaced when rcList changes
	inFlight  int
	readiness Readiness // from rcList (ready.go)
}

// New checks cfg and builds a GW; it does not touch NATS until Run.
func New(cfg Config) (*GW, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	g := &GW{
		cfg:       cfg,
		log:       cfg.Log.With().Str("service", subjects.ServiceGW).Str("gw_id", cfg.ID).Logger(),
		nc:        cfg.NC,
		s:         cfg.Subjects,
		ready:     make(chan struct{}),
		serving:   make(chan struct{}),
		readiness: Readiness{Reason: reasonNoRC},
		peers:     gwPeers{m: map[string]*gwPeer{}, gone: map[string]int64{}},
		sweeps:    make(chan struct{}, 1),
		in:        make(chan input, 1024),
		loopDone:  make(chan struct{}),
		rcChanged: make(chan struct{}),
		scopeWalk: messages.ScopeFromArgs,
		newID:     nuid.Next,
		lim:       loglimit.Default(),
	}
	reg := cfg.Registry
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	if g.met, err = newMetrics(reg, func() int { return len(g.RCs()) }, g.inFlightNow); err != nil {
		return nil, fmt.Errorf("gw: register metrics: %w", err)
	}
	return g, nil
}

// Ready is closed once the endpoints are registered: the GW takes requests
// (and holds them until it can serve: see Serving).
func (g *GW) Ready() <-chan struct{} { return g.ready }

// RCs returns the RCs the GW currently sends new requests to, sorted by id.
func (g *GW) RCs() []RCInfo {
	g.rcMu.Lock()
	defer g.rcMu.Unlock()
	return slices.Clone(g.rcList)
}

func (g *GW) inFlightNow() int {
	g.rcMu.Lock()
	defer g.rcMu.Unlock()
	return g.inFlight
}

// WaitRCs blocks until ok holds for the known RCs, or ctx ends.
func (g *GW) WaitRCs(ctx context.Context, ok func([]RCInfo) bool) error {
	for {
		g.rcMu.Lock()
		ch, list := g.rcChanged, slices.Clone(g.rcList)
		g.rcMu.Unlock()
		if ok(list) {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Run subscribes to RC announcements and answers, registers the micro
// endpoints and serves until ctx ends. Then it stops the micro service,
// lets requests in flight finish for Config.ShutdownGrace, answers the rest
// UNAVAILABLE (or, with a request log, leaves them to be adopted) and
// removes its subscriptions. Nothing is answered after it returns. It does
// not close the connection.
func (g *GW) Run(ctx context.Context) error {
	first := false
	g.runOnce.Do(func() { first = true })
	if !first {
		return errors.New("gw: Run called twice")
	}
	start := time.Now()
	g.startedAt = start.UnixNano()
	g.peers.listening = start
	if g.cfg.RequestLog != nil {
		rl, err := g.openRequestLog(ctx)
		if err != nil {
			return err
		}
		g.rlog = rl
	}
	if g.cfg.Jobs != nil {
		js, err := g.openJobs(ctx)
		if err != nil {
			return err
		}
		g.jobs = js
	}
	if g.cfg.AnswerStore != nil {
		as, err := g.openAnswerStore(ctx)
		if err != nil {
			return err
		}
		g.answers = as
		// Writes still under way when Run returns are abandoned; their
		// callers are told the other ways.
		defer as.close()
	}

	var subs []*nats.Subscription
	unsubscribe := func() {
		for _, s := range subs {
			_ = s.Unsubscribe()
		}
	}
	for _, sub := range []struct {
		subject string
		cb      nats.MsgHandler
	}{
		{g.s.RCAnnouncePattern(), g.onAnnounce},
		{g.s.GWAnswerPattern(g.cfg.ID), g.onAnswer},
		{g.s.GWHeartbeatPattern(), g.onGWHeartbeat},
		{g.s.GWPosition(g.cfg.ID), g.onPosition},
	} {
		s, err := g.nc.Subscribe(sub.subject, sub.cb)
		if err != nil {
			unsubscribe()
			return fmt.Errorf("gw: subscribe %s: %w", sub.subject, err)
		}
		subs = append(subs, s)
	}
	// Answers can be large and chunked: a subscription that hits the default
	// pending limits becomes a slow consumer and loses chunks.
	if err := subs[2].SetPendingLimits(-1, int(min(4*g.cfg.MaxAnswerBytes, 1<<31-1))); err != nil {
		unsubscribe()
		return fmt.Errorf("gw: answer subscription limits: %w", err)
	}
	var lw *logWrites
	if g.rlog != nil {
		lw = newLogWrites(g.rlog, g.nc.NewInbox()+".")
		s, err := g.nc.ChanSubscribe(lw.prefix+"*", lw.acks)
		if err != nil {
			unsubscribe()
			return fmt.Errorf("gw: subscribe to request log acknowledgements: %w", err)
		}
		subs = append(subs, s)
	}
	if err := g.nc.Flush(); err != nil {
		unsubscribe()
		return fmt.Errorf("gw: flush subscriptions: %w", err)
	}

	svc, err := micro.AddService(g.nc, micro.Config{
		Name:        g.s.ServiceName(subjects.ServiceGW),
		Version:     g.cfg.Version,
		Description: "sg service gateway: getData, ping, getMeta, sql; cancel",
		Metadata:    map[string]string{"gw_id": g.cfg.ID, "affinity": g.cfg.Affinity},
		// $SRV.STATS: every endpoint's data is the GW's readiness.
		StatsHandler: func(*micro.Endpoint) any { return g.Readiness() },
	})
	if err != nil {
		unsubscribe()
		return fmt.Errorf("gw: add micro service: %w", err)
	}
	grp := svc.AddGroup(g.s.GWAPIGroup())
	for _, api := range subjects.APIs {
		if err := grp.AddEndpoint(api, endpoint{g: g, api: api}, micro.WithEndpointMetadata(map[string]string{"api": api})); err != nil {
			_ = svc.Stop()
			unsubscribe()
			return fmt.Errorf("gw: add endpoint %s: %w", api, err)
		}
	}
	// Every GW sees every cancel: only the one holding the request answers.
	if err := svc.AddEndpoint(APICancel, cancelEndpoint{g: g}, micro.WithEndpointSubject(g.s.GWCancel()),
		micro.WithEndpointQueueGroupDisabled()); err != nil {
		_ = svc.Stop()
		unsubscribe()
		return fmt.Errorf("gw: add endpoint %s: %w", APICancel, err)
	}
	if g.jobs != nil {
		// Any GW answers a poll: the job store is shared.
		if err := svc.AddEndpoint(APIJob, jobEndpoint{g: g}, micro.WithEndpointSubject(g.s.GWJob())); err != nil {
			_ = svc.Stop()
			unsubscribe()
			return fmt.Errorf("gw: add endpoint %s: %w", APIJob, err)
		}
	}
	// Ready means serving: the endpoints' subscriptions are known to the server.
	if err := g.nc.Flush(); err != nil {
		_ = svc.Stop()
		unsubscribe()
		return fmt.Errorf("gw: flush endpoint subscriptions: %w", err)
	}

	c := g.newCore(start)

	// The request log's workers and the sweeper run beside the loop and
	// stop after it.
	bgCtx, bgStop := context.WithCancel(context.Background())
	var bg sync.WaitGroup
	jobs := make(chan logJob)
	if g.rlog != nil {
		for range logWorkers {
			bg.Go(func() { g.rlog.worker(bgCtx, jobs) })
		}
		bg.Go(func() { g.sweeper(bgCtx) })
		g.requestSweep() // this GW's earlier incarnation
	}
	if g.jobs != nil {
		g.jobs.resume()
	}
	close(g.ready)
	g.log.Info().Str("subject", g.s.GWAPIPattern()).Str("answers", g.s.GWAnswerPattern(g.cfg.ID)).
		Dur("timeout", g.cfg.Timeout).Dur("timeout_margin", g.cfg.TimeoutMargin).
		Str("affinity", g.cfg.Affinity).Bool("request_log", g.rlog != nil).
		Dur("request_log_create_after", time.Duration(g.createAfter())).Msg("gw taking requests (held until an RC can serve)")

	g.loop(ctx, c, svc, jobs, lw)

	close(g.loopDone)
	if g.jobs != nil {
		g.jobs.wait() // the runners stopped with ctx
	}
	bgStop()
	bg.Wait()
	// Peers adopt what this GW left open at once, rather than after three
	// missed heartbeats.
	g.beat(true)
	unsubscribe()
	g.log.Info().Msg("gw stopped")
	return nil
}

// newCore is the core of the GW started at start: Run's, and a benchmark's
// that drives the shell without Run (small_bench_internal_test.go).
func (g *GW) newCore(start time.Time) *core.Core {
	return core.New(core.Config{Self: g.cfg.ID, Incarnation: g.startedAt, Start: start.UnixNano(),
		TimeoutMargin: int64(g.cfg.TimeoutMargin), Affinity: g.cfg.Affinity, StartupWait: int64(max(g.cfg.StartupWait, 0)), HoldUntilReady: g.cfg.StartupWait >= 0,
		AnnounceEvery: int64(g.cfg.AnnounceEvery), DeadAfter: int64(g.cfg.DeadAfter), MaxInFlight: g.cfg.MaxInFlight,
		MaxInFlightPerCaller: g.cfg.MaxInFlightPerCaller, MaxAnswerBytes: g.cfg.MaxAnswerBytes, MaxHeldBytes: g.cfg.MaxHeldBytes, MaxPayload: g.nc.MaxPayload(), RetryAfter: g.cfg.retryAfterSeconds(),
		Logged: g.rlog != nil, CreateAfter: g.createAfter(), LogRetry: int64(logRetry), LogSubject: g.s.RequestLogEntry, AnswerSubject: g.s.GWAnswer})
}

// createAfter is the core's CreateAfter: how long a request runs before its
// log entry is written.
func (g *GW) createAfter() int64 {
	if g.cfg.RequestLog == nil {
		return 0
	}
	return int64(g.cfg.RequestLog.CreateAfter)
}
