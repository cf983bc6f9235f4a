package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sg-project/sg/messages"
	"github.com/sg-project/sg/services/dap"
	"github.com/sg-project/sg/services/dap/demo"
	"github.com/sg-project/sg/services/dap/live"
	"github.com/sg-project/sg/services/gw"
	"github.com/sg-project/sg/services/gw/client"
	"github.com/sg-project/sg/subjects"
)

func cmdRun(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	gwc, err := loadGWConfig(os.LookupEnv)
	if err != nil {
		return err
	}
	rcc, err := loadRCConfig(os.LookupEnv)
	if err != nil {
		return err
	}
	aggc := loadAggConfig(os.LookupEnv)
	fs := newFlagSet("run", "[flags]", `
Runs everything in one process: an embedded NATS server with JetStream, a GW, an RC,
an Agg and the demo fleet of DAPs (regions eu, us, asia; tiers rdb, idb, hdb) with
seeded generated data. It answers a sample getData query at start, prints it, then
serves until interrupted. Query it with: sg query getData '{"table":"trade"}' --nats <url>

With --live (the default) the data moves: a demo feed writes trades and quotes to the
live stream at --feed-rate rows a second, the rdb DAPs ingest them, end of interval
(--eoi-every) moves the rdb's closed interval to the idb and end of day (--eod-every)
writes the idb's day as Parquet for the hdb, and an instrument update every
--ref-every changes a region's reference vintage. To watch rolls and retries:
  sg run --eoi-every 2s --eod-every 10s --feed-rate 500 --log-level debug`, stdout, stderr)
	listen := fs.String("nats-listen", "127.0.0.1:4222", "NATS client listen address HOST:PORT (port 0: a free port)")
	data := fs.String("data", "", "JetStream storage directory (default: a temporary directory, removed at exit)")
	seed := fs.Uint64("seed", 1, "seed of the demo data")
	replicas := fs.Int("replicas", 1, "demo DAPs per region and tier (with --live=false)")
	sample := fs.Bool("sample", true, "answer and print a sample getData query at start")
	logLevel := fs.String("log-level", "info", "log level: trace, debug, info, warn, error")
	natsLogs := fs.Bool("nats-logs", false, "print the NATS server's own logs")
	metrics := fs.String("metrics-listen", "", "HOST:PORT to serve Prometheus /metrics on (\"\" = off)")
	liveMode := fs.Bool("live", true, "live data: JetStream feed, ends of interval and of day (false: static demo data)")
	feed := fs.Bool("feed", true, "run the demo feed (with --live)")
	feedRate := fs.Int("feed-rate", 300, "demo feed rows per second over all regions")
	eoiEvery := fs.Duration("eoi-every", time.Minute, "end of interval period (rdb -> idb)")
	eodEvery := fs.Duration("eod-every", 24*time.Hour, "end of day period (idb -> hdb Parquet); cut at multiples of it, UTC")
	lateness := fs.Duration("lateness", live.DefaultLateness, "how late a row may arrive; automatic cuts lag the clock by this")
	refEvery := fs.Duration("ref-every", 30*time.Second, "demo reference (instrument) update period; 0: none")
	fs.DurationVar(&gwc.Timeout, "timeout", gwc.Timeout, "default request timeout (env SG_TIMEOUT)")
	fs.StringVar(&gwc.Affinity, "affinity", gwc.Affinity, "scope affinity: hard or soft (env SG_SCOPE_AFFINITY)")
	if done, err := parse(fs, args, stdout); done {
		return err
	}
	if err := checkAffinity(gwc.Affinity); err != nil {
		return err
	}
	log, err := newLogger(stderr, *logLevel)
	if err != nil {
		return err
	}
	dir := *data
	if dir == "" {
		if dir, err = os.MkdirTemp("", "sg-run-*"); err != nil {
			return err
		}
		defer os.RemoveAll(dir)
	}
	log.Info().Interface("gw", gwc).Interface("rc", rcc).Interface("agg", aggc).Str("data", dir).Uint64("seed", *seed).Msg("sg run starting")

	srv, err := startNATSServer(*listen, dir, *natsLogs)
	if err != nil {
		return err
	}
	defer func() { // services first, then the server
		srv.Shutdown()
		srv.WaitForShutdown()
	}()
	common := Common{NATSURL: srv.ClientURL(), Prefix: "sg", LogLevel: *logLevel}
	nc, s, stop, err := connect(common, "sg-run", log)
	if err != nil {
		return err
	}
	defer stop()
	reg := prometheus.NewRegistry()
	if err := serveMetrics(ctx, *metrics, reg, log); err != nil {
		return err
	}

	g, err := gw.New(gw.Config{ID: gwc.ID, NC: nc, Subjects: s, Log: log, Timeout: gwc.Timeout,
		TimeoutMargin: gwc.TimeoutMargin, Affinity: gwc.Affinity, MaxAnswerBytes: gwc.MaxAnswerBytes, MaxRequestBytes: gwc.MaxRequestBytes, Registry: reg})
	if err != nil {
		return err
	}
	rcc.AggIDs = []string{aggc.ID}
	r, err := newRC(rcc, nc, s, log, reg)
	if err != nil {
		return err
	}

	svcCtx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	errc := make(chan error, 5)
	start := func(name string, run func(context.Context) error) {
		wg.Go(func() {
			if err := run(svcCtx); err != nil && !errors.Is(err, context.Canceled) {
				errc <- fmt.Errorf("%s: %w", name, err)
			}
		})
	}
	start("agg", func(ctx context.Context) error { return runAgg(ctx, aggc, nc, s, log) })
	start("rc", r.Run)
	daps := len(demo.Regions) * 3 * *replicas
	if *liveMode {
		daps = live.DemoDAPs()
		rate := *feedRate
		if !*feed {
			rate = 0
		}
		start("live demo", func(ctx context.Context) error {
			return live.RunDemo(ctx, live.DemoConfig{NC: nc, Subjects: s, Log: log, RCID: rcc.ID, Dir: filepath.Join(dir, "live"),
				Seed: *seed, EOIEvery: *eoiEvery, EODEvery: *eodEvery, Lateness: *lateness, FeedRate: rate, RefEvery: *refEvery, Registry: reg})
		})
	} else {
		start("dap fleet", func(ctx context.Context) error {
			return dap.RunDemoFleet(ctx, dap.DemoFleetConfig{NC: nc, Subjects: s, Log: log, RCID: rcc.ID, Seed: *seed, Replicas: *replicas})
		})
	}
	start("gw", g.Run)
	stopAll := func() {
		cancel()
		wg.Wait()
	}

	select {
	case <-g.Ready():
	case err := <-errc:
		stopAll()
		return err
	case <-ctx.Done():
		stopAll()
		return nil
	}
	fmt.Fprintf(stdout, "sg run: NATS at %s (JetStream in %s); GW %s serves %s\n", srv.ClientURL(), dir, gwc.ID, s.GWAPIPattern())

	if *sample {
		if err := runSample(ctx, g, client.New(nc, s), daps, stdout, stderr); err != nil {
			fmt.Fprintf(stderr, "sg run: sample query: %v\n", err)
		}
	}
	fmt.Fprintf(stdout, "sg run: serving; try: sg query getData '{\"table\":\"trade\",\"groupBy\":[\"sym\"],\"agg\":[[\"n\",\"count\"]]}' --nats %s\n", srv.ClientURL())

	var runErr error
	select {
	case <-ctx.Done():
	case runErr = <-errc:
	}
	log.Info().Msg("sg run stopping: services, then the NATS server")
	stopAll()
	return runErr
}

// runSample waits until the RC has the whole demo fleet, then answers and
// prints a sample query: trades per symbol in eu over the last hour.
func runSample(ctx context.Context, g *gw.GW, cl *client.Client, daps int, stdout, stderr io.Writer) error {
	wctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	if err := g.WaitRCs(wctx, func(rcs []gw.RCInfo) bool {
		for _, rc := range rcs {
			if rc.DAPs >= daps {
				return true
			}
		}
		return false
	}); err != nil {
		return fmt.Errorf("waiting for %d DAPs to register: %w", daps, err)
	}
	end := time.Now().UTC().Truncate(time.Minute)
	args := messages.GetDataArgs{Table: demo.Trade, StartTS: end.Add(-time.Hour), EndTS: end,
		Labels: messages.LabelSelector{demo.LabelKey: {"eu"}}, GroupBy: []string{"sym"},
		Agg: []messages.AggSpec{{Name: "trades", Func: messages.AggCount}, {Name: "avgPrice", Func: messages.AggAvg, Column: "price"},
			{Name: "volume", Func: messages.AggSum, Column: "size"}}}
	fmt.Fprintf(stdout, "sg run: sample getData: trades per symbol in region eu, %s to %s\n",
		args.StartTS.Format(time.RFC3339), args.EndTS.Format(time.RFC3339))
	return callWith(wctx, cl, "table", subjects.APIGetData, mustJSON(args), messages.Opts{TimeoutMS: 20000}, stdout, stderr)
}

func mustJSON(a messages.GetDataArgs) []byte {
	b, err := a.MarshalJSON()
	if err != nil {
		panic(err)
	}
	return b
}
