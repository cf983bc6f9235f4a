// Package test holds sg's integration tests: the four services over a real
// NATS server (embedded, or a standalone process built from the module).
package test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/sg-project/sg/services/agg"
	"github.com/sg-project/sg/services/dap"
	"github.com/sg-project/sg/services/gw"
	"github.com/sg-project/sg/services/gw/client"
	"github.com/sg-project/sg/services/rc"
	"github.com/sg-project/sg/subjects"
	"github.com/sg-project/sg/test/natstest"
)

// system is GW, RC and Agg on one NATS server, plus whatever DAPs a test
// starts with its run function. Everything stops when the test ends.
type system struct {
	t      testing.TB
	nc     *nats.Conn
	s      subjects.Subjects
	gw     *gw.GW
	client *client.Client
	reg    *prometheus.Registry
	ctx    context.Context
	wg     *sync.WaitGroup
	errs   chan error
	log    zerolog.Logger
	url    string // the NATS server's
	// The GW runs under a context of its own, so a test can restart it
	// (restartGW, async_test.go).
	gwCfg  gw.Config
	stopGW context.CancelFunc
	gwDone chan struct{}
}

type systemOptions struct {
	url           string        // NATS URL; "" starts an embedded server
	gwTimeout     time.Duration // default request timeout
	timeoutMargin time.Duration
	log           *zerolog.Logger // every service's logger; default testLogger
	maxRetry      int             // RC; default 3
	announceEvery time.Duration   // RC announcements (the GW's expectation too); default 20 ms
	jobs          *gw.Jobs        // the GW's async job store; nil: none
	answerStore   *gw.AnswerStore // the GW's store of answers for callers that do not reassemble chunks; nil: none
	requestLog    *gw.Durability  // the GW's request log; nil: none
	rcMaxQueued   int             // the RC's queue limit; 0: its default
	// gwMaxHeld: the GW's MaxHeldBytes; 0: its default.
	gwMaxHeld int64
	rcNow     func() time.Time // the RC's clock; default time.Now
	// inProcess: the services' connection to the embedded server is in
	// process, as sg run's (cmd/sg inProcess); sys.url still takes TCP.
	inProcess bool
}

func startSystem(t testing.TB, o systemOptions) *system {
	t.Helper()
	var opts []nats.Option
	if o.url == "" {
		srv := natstest.Start(t)
		o.url = srv.ClientURL()
		if o.inProcess {
			opts = append(opts, nats.InProcessServer(srv))
		}
	}
	if o.announceEvery == 0 {
		o.announceEvery = 20 * time.Millisecond
	}
	nc, err := nats.Connect(o.url, append(opts, nats.Name(t.Name()))...)
	if err != nil {
		t.Fatalf("connect %s: %v", o.url, err)
	}
	s := subjects.Default()
	log := testLogger(t)
	if o.log != nil {
		log = *o.log
	}
	reg := prometheus.NewRegistry()
	ctx, cancel := context.WithCancel(context.Background())
	sys := &system{t: t, nc: nc, s: s, reg: reg, ctx: ctx, wg: &sync.WaitGroup{}, errs: make(chan error, 64), log: log, url: o.url}
	t.Cleanup(func() {
		bound, stopBound := context.WithTimeout(context.Background(), 15*time.Second)
		defer stopBound()
		// The GW first: stopped with the rest, it saw the RC drain and logged
		// "gw not ready" (once, as it should for a change of readiness) at
		// the end of every test, some eighty times a suite, as if each had
		// lost its RC.
		if sys.stopGW != nil {
			sys.stopGW()
			select {
			case <-sys.gwDone:
			case <-bound.Done():
				t.Error("GW did not stop within 15s")
			}
		}
		cancel()
		done := make(chan struct{})
		go func() { sys.wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-bound.Done():
			t.Error("services did not stop within 15s")
		}
		nc.Close()
		close(sys.errs)
		for err := range sys.errs {
			t.Errorf("service: %v", err)
		}
	})

	sys.gwCfg = gw.Config{ID: "gw-1", NC: nc, Subjects: s, Log: log, Timeout: o.gwTimeout,
		TimeoutMargin: o.timeoutMargin, AnnounceEvery: o.announceEvery, Registry: reg, Jobs: o.jobs, AnswerStore: o.answerStore, RequestLog: o.requestLog,
		MaxHeldBytes: o.gwMaxHeld}
	g, err := gw.New(sys.gwCfg)
	if err != nil {
		t.Fatal(err)
	}
	r, err := rc.New(rc.Config{ID: "rc-1", NC: nc, Subjects: s, Log: log, TickEvery: 200 * time.Millisecond,
		AnnounceEvery: o.announceEvery, AggIDs: []string{"agg-1"}, Registry: reg, MaxRetry: o.maxRetry, MaxQueued: o.rcMaxQueued, Now: o.rcNow,
		WarmUp: 500 * time.Millisecond}) // one heartbeat period of the test fleets (demoFleetConfig, startLiveSys)
	if err != nil {
		t.Fatal(err)
	}
	a, err := agg.New(agg.Config{ID: "agg-1", NC: nc, Subjects: s, Log: log})
	if err != nil {
		t.Fatal(err)
	}
	sys.gw = g
	sys.client = client.New(nc, s)
	sys.run("agg", a.Run)
	<-a.Ready()
	sys.run("rc", r.Run)
	sys.runGW(g)
	select {
	case <-g.Ready():
	case <-time.After(10 * time.Second):
		t.Fatal("GW not ready within 10s")
	}
	return sys
}

// runGW runs the GW under a context that stopGW ends; gwDone closes when
// it returned.
func (sys *system) runGW(g *gw.GW) {
	ctx, stop := context.WithCancel(sys.ctx)
	done := make(chan struct{})
	sys.stopGW, sys.gwDone = stop, done
	sys.run("gw", func(context.Context) error {
		defer close(done)
		return g.Run(ctx)
	})
}

// run starts a service that stops with the system.
func (sys *system) run(name string, fn func(context.Context) error) {
	sys.wg.Go(func() {
		if err := fn(sys.ctx); err != nil && !errors.Is(err, context.Canceled) {
			sys.errs <- errors.Join(errors.New(name), err)
		}
	})
}

// waitDAPs waits until the RC announces at least n DAPs.
func (sys *system) waitDAPs(n int) {
	sys.t.Helper()
	ctx, cancel := context.WithTimeout(sys.ctx, 30*time.Second)
	defer cancel()
	if err := sys.gw.WaitRCs(ctx, func(rcs []gw.RCInfo) bool {
		return len(rcs) > 0 && rcs[0].DAPs >= n
	}); err != nil {
		sys.t.Fatalf("waiting for %d DAPs: %v", n, err)
	}
}

// waitQueued waits until the RC announces at least n queued portions.
func (sys *system) waitQueued(n int) {
	sys.t.Helper()
	ctx, cancel := context.WithTimeout(sys.ctx, 10*time.Second)
	defer cancel()
	if err := sys.gw.WaitRCs(ctx, func(rcs []gw.RCInfo) bool {
		return len(rcs) > 0 && rcs[0].Queued >= n
	}); err != nil {
		sys.t.Fatalf("waiting for %d queued portions: %v", n, err)
	}
}

// startDAP runs one DAP in the system and returns it.
func (sys *system) startDAP(cfg dap.Config) *dap.DAP {
	sys.t.Helper()
	cfg.NC, cfg.Subjects, cfg.Log = sys.nc, sys.s, sys.log
	d, err := dap.New(cfg)
	if err != nil {
		sys.t.Fatal(err)
	}
	sys.run("dap "+cfg.ID, d.Run)
	return d
}

// counter reads a counter from the system's registry (0 if absent).
func (sys *system) counter(name string) float64 {
	sys.t.Helper()
	mfs, err := sys.reg.Gather()
	if err != nil {
		sys.t.Fatal(err)
	}
	total := 0.0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			total += m.GetCounter().GetValue()
		}
	}
	return total
}
