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
	"github.com/sg-project/sg/services/auth"
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
	aggc, err := loadAggConfig(os.LookupEnv)
	if err != nil {
		return err
	}
	httpc, err := loadHTTPConfig(os.LookupEnv)
	if err != nil {
		return err
	}
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
  sg run --eoi-every 2s --eod-every 10s --feed-rate 500 --log-level debug

With --auth DIR the server admits only the users of DIR (made by sg auth init, and
made here if DIR has none yet), and every service connects with its role's
credential: query it with --creds DIR/client.nk.`, stdout, stderr)
	listen := fs.String("nats-listen", "127.0.0.1:4222", "NATS client listen address HOST:PORT (port 0: a free port)")
	data := fs.String("data", "", "JetStream storage directory (default: a temporary directory, removed at exit)")
	seed := fs.Uint64("seed", 1, "seed of the demo data")
	replicas := fs.Int("replicas", 1, "demo DAPs per region and tier (with --live=false)")
	throttle := fs.Float64("throttle", 0, "with --live=false: demo DAPs call a rate-limited test endpoint (one per replica, the seed's ad platform at a tenth of its time) allowing this many calls a second; 0: off")
	sample := fs.Bool("sample", true, "answer and print a sample getData query at start")
	logLevel := fs.String("log-level", gwc.LogLevel, "log level: trace, debug, info, warn, error (env SG_LOG_LEVEL)")
	natsLogs := fs.Bool("nats-logs", false, "print the NATS server's own logs")
	authDir := fs.String("auth", envString(os.LookupEnv, envAuthDir, ""), "credential directory: authentication and per-role permissions on; made if it has no users (env SG_AUTH_DIR)")
	metrics := fs.String("metrics-listen", "", "HOST:PORT to serve Prometheus /metrics on (\"\" = off)")
	httpListen := fs.String("http-listen", defaultHTTPListen, "HOST:PORT to serve the HTTP API (/v1) on (\"\" = off; port 0: a free port)")
	liveMode := fs.Bool("live", true, "live data: JetStream feed, ends of interval and of day (false: static demo data)")
	feed := fs.Bool("feed", true, "run the demo feed (with --live)")
	feedRate := fs.Int("feed-rate", 300, "demo feed rows per second over all regions")
	eoiEvery := fs.Duration("eoi-every", time.Minute, "end of interval period (rdb -> idb)")
	eodEvery := fs.Duration("eod-every", 24*time.Hour, "end of day period (idb -> hdb Parquet); cut at multiples of it, UTC")
	lateness := fs.Duration("lateness", live.DefaultLateness, "how late a row may arrive; automatic cuts lag the clock by this")
	refEvery := fs.Duration("ref-every", 30*time.Second, "demo reference (instrument) update period; 0: none")
	fs.DurationVar(&gwc.Timeout, "timeout", gwc.Timeout, "default request timeout (env SG_TIMEOUT)")
	fs.StringVar(&gwc.Affinity, "affinity", gwc.Affinity, "scope affinity: hard or soft (env SG_SCOPE_AFFINITY)")
	jc, err := loadJobsConfig(os.LookupEnv)
	if err != nil {
		return err
	}
	addJobsFlags(fs, &jc)
	if done, err := parse(fs, args, stdout); done {
		return err
	}
	if err := checkAffinity(gwc.Affinity); err != nil {
		return err
	}
	if err := jc.RetryAfter.Check(); err != nil {
		return err
	}
	log, closeLog, err := newLogger(stderr, *logLevel)
	if err != nil {
		return err
	}
	defer closeLog()
	dir := *data
	if dir == "" {
		if dir, err = os.MkdirTemp("", "sg-run-*"); err != nil {
			return err
		}
		defer os.RemoveAll(dir)
	}
	log.Info().Interface("gw", gwc).Interface("rc", rcc).Interface("agg", aggc).Interface("jobs", jc).Str("data", dir).Uint64("seed", *seed).Msg("sg run starting")

	if *authDir != "" {
		if _, err := auth.Load(*authDir); err != nil {
			m, ierr := auth.Init(*authDir, subjects.DefaultPrefix)
			if ierr != nil {
				return fmt.Errorf("--auth %s: %w", *authDir, errors.Join(err, ierr))
			}
			fmt.Fprintf(stdout, "sg run: made %d credentials in %s\n", len(m.Users), *authDir)
		}
	}
	srv, _, err := startNATSServerWith(natsServerConfig{Listen: *listen, DataDir: dir, Logs: *natsLogs, AuthDir: *authDir})
	if err != nil {
		return err
	}
	defer func() { // services first, then the server
		srv.Shutdown()
		srv.WaitForShutdown()
	}()
	// Every part on its own connection (partConns), as its role when
	// --auth is on.
	parts := newPartConns("sg-run", func(role subjects.Role) Common {
		common := Common{NATSURL: srv.ClientURL(), Prefix: subjects.DefaultPrefix, LogLevel: *logLevel}
		if *authDir != "" {
			common.Creds = auth.SeedFile(*authDir, string(role))
		}
		return common
	}, log, inProcess(srv))
	defer parts.close()
	nc, err := parts.conn(subjects.RoleGW) // the GW's
	if err != nil {
		return err
	}
	rcNC, err := parts.conn(subjects.RoleRC)
	if err != nil {
		return err
	}
	aggNC, err := parts.conn(subjects.RoleAgg)
	if err != nil {
		return err
	}
	dapRole := subjects.RoleDAP
	if *liveMode {
		dapRole = subjects.RoleDemo // the live demo runs its DAPs and its feed on one connection
	}
	dapNC, err := parts.conn(dapRole)
	if err != nil {
		return err
	}
	clientNC, err := parts.conn(subjects.RoleClient)
	if err != nil {
		return err
	}
	s := parts.s
	reg := prometheus.NewRegistry()
	if err := serveMetrics(ctx, *metrics, reg, log); err != nil {
		return err
	}

	g, err := gw.New(gw.Config{ID: gwc.ID, NC: nc, Subjects: s, Log: log, Timeout: gwc.Timeout,
		TimeoutMargin: gwc.TimeoutMargin, Affinity: gwc.Affinity, MaxAnswerBytes: gwc.MaxAnswerBytes, MaxRequestBytes: gwc.MaxRequestBytes, Registry: reg,
		MaxHeldBytes: gwc.MaxHeldBytes,
		// The request log on, as every deployment runs it (SG_JETSTREAM=off: none).
		RequestLog: gwc.Durability.gw(),
		Jobs:       jc.gw(gwc.Durability, clientNC),
		// Answers above the max payload for callers that do not reassemble
		// chunks are written there (README, Large answers).
		AnswerStore: gwc.Durability.answerStore()})
	if err != nil {
		return err
	}
	rcc.AggIDs = []string{aggc.ID}
	rcc.RetryAfter = &jc.RetryAfter // the same parameters for the RC's refusals
	r, err := newRC(rcc, rcNC, s, log, reg)
	if err != nil {
		return err
	}

	svcCtx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var throttled func(dap.DemoShard, dap.Source) dap.Source
	if *throttle > 0 {
		if *liveMode {
			return errors.New("--throttle needs --live=false")
		}
		if throttled, err = dap.ThrottleDemo(svcCtx, *throttle, reg, log); err != nil {
			return err
		}
	}
	var wg sync.WaitGroup
	errc := make(chan error, 5)
	start := func(name string, run func(context.Context) error) {
		wg.Go(func() {
			if err := run(svcCtx); err != nil && !errors.Is(err, context.Canceled) {
				errc <- fmt.Errorf("%s: %w", name, err)
			}
		})
	}
	a, err := newAgg(aggc, aggNC, s, log, reg)
	if err != nil {
		return err
	}
	start("agg", a.Run)
	start("rc", r.Run)
	daps := len(demo.Regions) * 3 * *replicas
	if *liveMode {
		daps = live.DemoDAPs()
		rate := *feedRate
		if !*feed {
			rate = 0
		}
		start("live demo", func(ctx context.Context) error {
			return live.RunDemo(ctx, live.DemoConfig{NC: dapNC, Subjects: s, Log: log, RCID: rcc.ID, Dir: filepath.Join(dir, "live"),
				Seed: *seed, EOIEvery: *eoiEvery, EODEvery: *eodEvery, Lateness: *lateness, FeedRate: rate, RefEvery: *refEvery, Registry: reg})
		})
	} else {
		nc := dapNC // the fleet's
		start("dap fleet", func(ctx context.Context) error {
			return dap.RunDemoFleet(ctx, dap.DemoFleetConfig{NC: nc, Subjects: s, Log: log, RCID: rcc.ID, Seed: *seed, Replicas: *replicas, Wrap: throttled, Registry: reg})
		})
	}
	start("gw", g.Run)
	stopAll := func() {
		cancel()
		wg.Wait()
	}

	// Ready means able to serve: the Agg subscribed, the RC's fleet view
	// warm (it has heard from the DAPs, or one heartbeat period passed) and
	// the GW knows it (a warm RC).
	for _, ready := range []<-chan struct{}{a.Ready(), r.Warm(), g.Serving()} {
		select {
		case <-ready:
		case err := <-errc:
			stopAll()
			return err
		case <-ctx.Done():
			stopAll()
			return nil
		}
	}
	fmt.Fprintf(stdout, "sg run: NATS at %s (JetStream in %s); GW %s serves %s\n", srv.ClientURL(), dir, gwc.ID, s.GWAPIPattern())
	httpAddr, httpDone, err := serveHTTPAPI(svcCtx, *httpListen, httpc, clientNC, s, g, log)
	if err != nil {
		stopAll()
		return err
	}
	defer func() { <-httpDone }()
	if httpAddr != "" {
		fmt.Fprintf(stdout, "sg run: HTTP API at http://%s/v1 (try: curl -s -X POST http://%s/v1/getData -d '{\"table\":\"trade\",\"limit\":3}')\n", httpAddr, httpAddr)
	}

	if *sample {
		if err := runSample(ctx, g, client.New(clientNC, s), daps, stdout, stderr); err != nil {
			fmt.Fprintf(stderr, "sg run: sample query: %v\n", err)
		}
	}
	creds := ""
	if *authDir != "" {
		creds = " --creds " + auth.SeedFile(*authDir, string(subjects.RoleClient))
	}
	rd, known := g.Readiness(), 0
	for _, rc := range g.RCs() {
		known = max(known, rc.DAPs)
	}
	fmt.Fprintf(stdout, "sg run: serving (GW %s ready: %d warm RC, %d DAPs registered); try: sg query getData '{\"table\":\"trade\",\"groupBy\":[\"sym\"],\"agg\":[[\"n\",\"count\"]]}' --nats %s%s\n",
		gwc.ID, rd.WarmRCs, known, srv.ClientURL(), creds)

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
