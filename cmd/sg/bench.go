package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/sg-project/sg/messages"
	"github.com/sg-project/sg/services/cputime"
	"github.com/sg-project/sg/services/dap"
	"github.com/sg-project/sg/services/dap/demo"
	"github.com/sg-project/sg/services/defaults"
	"github.com/sg-project/sg/services/gw"
	"github.com/sg-project/sg/services/gw/client"
	"github.com/sg-project/sg/services/logwriter"
	"github.com/sg-project/sg/subjects"
)

// sg bench measures what DESIGN.md section 9 asks for, always as a ratio to
// plain NATS measured in the same run on the same server: a small getData's
// latency (p50, p99) and requests per second at 1 and at many clients, and a
// large answer's MB/s against plain publish MB/s; for JSON callers (a plain
// NATS client with a JSON envelope) and msgpack callers (the sg client).

type benchConfig struct {
	requests  int           // sequential requests per latency run
	clients   int           // concurrent clients of the throughput run
	duration  time.Duration // bound of each throughput run
	large     int           // large answers per encoding (0: at least benchLargeMin, more while under benchLargeFor)
	largeLast time.Duration // large answer: the last this much of trade (0: the whole table)
	pubBytes  int           // plain publish: message size
	pubTotal  int64         // plain publish: bytes per run
	ownSystem bool
	// servicesTCP: the started sg's services connect to its server over
	// loopback TCP, as services run apart do, not in process as sg run's do.
	servicesTCP bool
	profiles    phaseProfiles
	// dialService connects to the server as the services connect (in
	// process when sg bench started it, unless servicesTCP): the relay
	// floor's hops (relayMBs). nil: over TCP to the URL, as callers do.
	dialService func() (*nats.Conn, error)
	// floorLog: the small request's floor writes a request log as sg's GW
	// does (smallFloor): the sg measured runs with one (true against a
	// running sg, as every deployment does).
	floorLog bool
}

// phaseProfiles, when dir is set (--phase-profiles), writes a CPU profile of
// each measured phase apart, as <dir>/<pass>-<phase>.pprof: one profile of
// the whole run mixes the callers, which take turns in slices. Within a
// phase, the profile labels below tell who the CPU was spent for.
type phaseProfiles struct{ dir, pass string }

// Profile labels, so that `go tool pprof -tags` (and -tagfocus) splits a
// profile's CPU by whom it was spent for. labelWork is on the goroutines
// that do a part's work: a service's (gw, rc, agg, dap: its loops and its
// subscriptions' handlers), the bench's callers' (caller), the plain echo
// responder's (responder) and the floors' subscribers' (floor). labelConn is
// on a connection's own goroutines, named by the part that owns it: nats.go's
// reader and flusher and, for a connection in process, the NATS server's
// loops that serve it. Unlabeled: the server's loops for TCP connections
// (the callers'), JetStream's goroutines (the server labels those by stream
// and account), the log writer's and the Go runtime's (the GC).
const (
	labelWork = "sg"
	labelConn = "sg_conn"
)

// dialAs connects with dial on a goroutine of its own labelled labelConn=as
// and nothing else: the connection's goroutines inherit exactly that label,
// whatever the caller's goroutine carries (and the caller's labels are not
// touched, as pprof.Do on its goroutine would reset them to its ctx's).
func dialAs(as string, dial func() (*nats.Conn, error)) (*nats.Conn, error) {
	var nc *nats.Conn
	var err error
	done := make(chan struct{})
	go pprof.Do(context.Background(), pprof.Labels(labelConn, as), func(context.Context) {
		defer close(done)
		nc, err = dial()
	})
	<-done
	return nc, err
}

// run calls measure under a CPU profile of phase, or alone without a dir.
func (p phaseProfiles) run(phase string, measure func() error) error {
	if p.dir == "" {
		return measure()
	}
	f, err := os.Create(filepath.Join(p.dir, p.pass+"-"+phase+".pprof"))
	if err != nil {
		return fmt.Errorf("phase profile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		_ = f.Close()
		return fmt.Errorf("phase profile %s: %w", phase, err)
	}
	err = measure()
	pprof.StopCPUProfile()
	if cerr := f.Close(); cerr != nil && err == nil {
		err = fmt.Errorf("phase profile %s: %w", phase, cerr)
	}
	return err
}

// benchRow is one line of the table: a figure for plain NATS and for sg.
type benchRow struct {
	what      string
	unit      string
	plain     float64
	sgJSON    float64
	sgMsgpack float64
	higher    bool // higher is better (throughput); else lower (latency)
}

func cmdBench(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("bench", "[flags]", `
Measures sg against plain NATS on the same server, in the same run: small getData
latency (p50, p99) at 1 client, requests/s at 1 and --clients clients, and a large
answer's MB/s against plain NATS publish MB/s, for JSON and msgpack callers; and the
floors: a small getData's messages and a large answer's bytes passed on by plain NATS
subscribers doing no work (with the request log, the floor writes it too, on a stream
it makes and deletes). Without --nats it starts its own sg (embedded NATS, static
demo fleet) and measures it twice: with the GW's request log on (as every deployment
runs) and off. It prints the table and adds it, with the machine and the command,
as the newest section of --out (older sections are kept; a file sg bench did not
write is refused).`, stdout, stderr)
	url := fs.String("nats", "", "NATS URL of a running sg (\"\": start one in this process)")
	prefix := fs.String("prefix", subjects.DefaultPrefix, "subject prefix of the running sg")
	requests := fs.Int("requests", 2000, "sequential small requests per latency run")
	clients := fs.Int("clients", 50, "concurrent clients of the throughput run")
	duration := fs.Duration("duration", 3*time.Second, "length of each throughput run")
	large := fs.Int("large", 0, fmt.Sprintf("large answers per encoding (0: at least %d, more while under %s per encoding)", benchLargeMin, benchLargeFor))
	largeLast := fs.Duration("large-last", 0, "large answer: only the last this much of trade (0: the whole table)")
	pubMiB := fs.Int("publish-mib", 512, "plain publish: MiB to send")
	out := fs.String("out", "BENCHMARKS.md", "file to write the table to (\"\": none)")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the whole run (sg and the bench's callers) to this file")
	phaseDir := fs.String("phase-profiles", "", "write a CPU profile of each measured phase (each caller's slices at --clients, plain publish, each large row) into this directory, its samples labelled by whom they were spent for (go tool pprof -tags)")
	servicesTCP := fs.Bool("services-over-tcp", false, "the sg it starts connects its services over loopback TCP, as services run apart do (default: in process, as sg run does)")
	if done, err := parse(fs, args, stdout); done {
		return err
	}
	if *cpuProfile != "" && *phaseDir != "" {
		return errors.New("bench: --cpuprofile and --phase-profiles exclude each other")
	}
	if *phaseDir != "" {
		// Made before sg starts, so that a bad directory fails at once.
		if err := os.MkdirAll(*phaseDir, 0o755); err != nil {
			return fmt.Errorf("bench: --phase-profiles: %w", err)
		}
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return fmt.Errorf("bench: %w", err)
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return fmt.Errorf("bench: cpu profile: %w", err)
		}
		defer pprof.StopCPUProfile()
	}
	if *requests < 10 || *clients < 1 || *duration <= 0 || *large < 0 || *pubMiB < 1 {
		return errors.New("bench: want --requests >= 10, --clients >= 1, --duration > 0, --large >= 0, --publish-mib >= 1")
	}
	cfg := benchConfig{requests: *requests, clients: *clients, duration: *duration, large: *large, largeLast: *largeLast,
		pubBytes: 512 << 10, pubTotal: int64(*pubMiB) << 20, ownSystem: *url == "", servicesTCP: *servicesTCP,
		profiles: phaseProfiles{dir: *phaseDir, pass: "running"}}
	log, closeLog, err := benchLogger(stderr)
	if err != nil {
		return err
	}
	defer closeLog()

	type pass struct {
		name string
		res  benchResult
	}
	var passes []pass
	if *url != "" {
		res, err := benchAgainst(ctx, cfg, *url, *prefix, log, stderr)
		if err != nil {
			return err
		}
		passes = append(passes, pass{"running sg at " + maskURL(*url), res})
	} else {
		for _, withLog := range []bool{true, false} {
			name := "request log on"
			if !withLog {
				name = "request log off"
			}
			if cfg.servicesTCP {
				name += ", services over TCP"
			}
			fmt.Fprintf(stderr, "bench: %s ...\n", name)
			cfg := cfg
			cfg.profiles.pass = map[bool]string{true: "logon", false: "logoff"}[withLog]
			res, err := benchOwn(ctx, cfg, withLog, log, stderr)
			if err != nil {
				return fmt.Errorf("bench (%s): %w", name, err)
			}
			passes = append(passes, pass{name, res})
		}
	}
	var b strings.Builder
	for _, p := range passes {
		fmt.Fprintf(&b, "\n### sg, %s\n\n", p.name)
		writeBenchTable(&b, p.res.rows)
		for _, n := range p.res.notes {
			fmt.Fprintf(&b, "\n%s\n", n)
		}
	}
	fmt.Fprint(stdout, b.String())
	if *out == "" {
		return nil
	}
	old, err := os.ReadFile(*out)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("bench: read %s: %w", *out, err)
	}
	doc, err := benchDoc(old, append([]string{"sg", "bench"}, args...), cfg, b.String())
	if err != nil {
		return fmt.Errorf("bench: %s: %w", *out, err)
	}
	if err := os.WriteFile(*out, []byte(doc), 0o644); err != nil {
		return fmt.Errorf("bench: write %s: %w", *out, err)
	}
	fmt.Fprintf(stdout, "\nbench: written to %s (newest section first)\n", *out)
	return nil
}

// benchTitle opens every file sg bench writes; a file without it is not
// overwritten.
const benchTitle = "# sg benchmarks\n"

// benchDoc returns the file sg bench writes: the title and what the figures
// mean, this run as the newest section (its command, machine and date), then
// the sections of old (a file sg bench wrote before, or nil), kept as they
// were: a run adds to the record rather than replacing it.
func benchDoc(old []byte, cmd []string, cfg benchConfig, tables string) (string, error) {
	var kept string
	if len(old) > 0 {
		if !strings.HasPrefix(string(old), benchTitle) {
			return "", errors.New("exists and was not written by sg bench (it does not begin with \"# sg benchmarks\"); choose another --out")
		}
		if i := strings.Index(string(old), "\n## "); i >= 0 {
			kept = string(old[i+1:])
		}
	}
	var b strings.Builder
	b.WriteString(benchTitle)
	b.WriteString("\nWritten by `sg bench`, newest run first; every figure is measured in one run, sg beside plain\n")
	b.WriteString("NATS on the same server. Latency ratios are sg / plain (lower is better); throughput is sg as a\n")
	b.WriteString("percentage of plain. Plain NATS: request-reply to an echo responder, and publish of 512 KiB messages\n")
	b.WriteString("to one subscriber. sg JSON: a plain NATS client sending a JSON envelope; sg msgpack: the sg client\n")
	b.WriteString("library. Small getData: one minute of one label set, limit 1. Large answer: the whole demo `trade`\n")
	b.WriteString("table. Ratios compare within one run only: hosts differ (see each section's machine). CPU per MB\n")
	b.WriteString("(when sg bench starts its own sg, so that sg, its NATS server and the callers are one process):\n")
	b.WriteString("the process's CPU time, user and system, per MB received while the row ran; its ratio to plain\n")
	b.WriteString("publish's is how many plain crossings of CPU an sg answer costs. The large answer's floor: the\n")
	b.WriteString("same answer's bytes relayed unchanged through its three crossings (DAP -> Agg -> GW -> caller) by\n")
	b.WriteString("plain NATS subscribers, one answer at a time, no work done on them: a reference for sg's. The small\n")
	b.WriteString("getData's floor: the messages a small getData makes (8; 12 with the request log, whose two\n")
	b.WriteString("conditional writes it makes on a stream of the same configuration), passed on by plain NATS\n")
	b.WriteString("subscribers doing no work: what sg's protocol costs before sg's own work.\n\n")
	now := time.Now().UTC()
	fmt.Fprintf(&b, "## sg bench, %s\n\n", now.Format("2006-01-02 15:04 MST"))
	fmt.Fprintf(&b, "- command: `%s`\n", strings.Join(cmd, " "))
	fmt.Fprintf(&b, "- machine: %s, %d cores, %s memory, %s/%s, %s\n", cpuModel(), runtime.NumCPU(), memTotal(), runtime.GOOS, runtime.GOARCH, runtime.Version())
	fmt.Fprintf(&b, "- date: %s\n", now.Format(time.RFC3339))
	fmt.Fprintf(&b, "- runs: %d sequential requests; %d clients for %s (each in %d slices, plain and sg in turn); %s\n",
		cfg.requests, cfg.clients, cfg.duration, benchSlices, cfg.largeRuns())
	b.WriteString(tables)
	if kept != "" {
		b.WriteString("\n")
		b.WriteString(kept)
	}
	return b.String(), nil
}

// benchLogger is the logger of the sg that sg bench starts: its services log
// as sg run's do (defaults.LogLevel, through the same batching writer,
// newLogger), so that what their lines cost is measured; the lines go to
// the null device, warnings and errors also to stderr.
func benchLogger(stderr io.Writer) (zerolog.Logger, func(), error) {
	lvl, err := parseLogLevel(defaults.LogLevel)
	if err != nil {
		return zerolog.Nop(), nil, err
	}
	null, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		return zerolog.Nop(), nil, fmt.Errorf("bench: the services' log: %w", err)
	}
	lines := logwriter.New(null, defaults.LogBuffer)
	w := zerolog.MultiLevelWriter(lines,
		&zerolog.FilteredLevelWriter{Writer: zerolog.LevelWriterAdapter{Writer: stderr}, Level: zerolog.WarnLevel})
	return zerolog.New(w).Level(lvl).With().Timestamp().Logger(), func() { _ = lines.Close(); _ = null.Close() }, nil
}

// benchOwn starts NATS, an RC, an Agg and the static demo fleet in this
// process, then a GW with or without the request log, and measures.
func benchOwn(ctx context.Context, cfg benchConfig, withLog bool, log zerolog.Logger, stderr io.Writer) (benchResult, error) {
	dir, err := os.MkdirTemp("", "sg-bench-*")
	if err != nil {
		return benchResult{}, err
	}
	defer os.RemoveAll(dir)
	srv, err := startNATSServer("127.0.0.1:0", dir, false)
	if err != nil {
		return benchResult{}, err
	}
	defer func() {
		srv.Shutdown()
		srv.WaitForShutdown()
	}()
	cfg.dialService = func() (*nats.Conn, error) {
		opts := []nats.Option{nats.Name("sg-bench-relay")}
		if !cfg.servicesTCP {
			opts = append(opts, inProcess(srv))
		}
		return nats.Connect(srv.ClientURL(), opts...)
	}
	cfg.floorLog = withLog
	return runBenchSystem(ctx, srv, cfg, withLog, log, func() (benchResult, error) {
		return benchAgainst(ctx, cfg, srv.ClientURL(), subjects.DefaultPrefix, log, stderr)
	})
}

// runBenchSystem runs an RC, an Agg, the static demo fleet and a GW (with or
// without the request log) on srv, connected as sg run connects them, and
// calls measure once every DAP is known to the GW; the services stop when
// it returns.
func runBenchSystem(ctx context.Context, srv *server.Server, cfg benchConfig, withLog bool, log zerolog.Logger, measure func() (benchResult, error)) (benchResult, error) {
	common := Common{NATSURL: srv.ClientURL(), Prefix: subjects.DefaultPrefix}
	// Connected as sg run connects its services: in process (inProcess),
	// unless asked for services run apart (over TCP); each on its own
	// connection (partConns).
	var opts []nats.Option
	if !cfg.servicesTCP {
		opts = append(opts, inProcess(srv))
	}
	parts := newPartConns("sg-bench", func(subjects.Role) Common { return common }, log, opts...)
	defer parts.close()
	for _, role := range []subjects.Role{subjects.RoleGW, subjects.RoleRC, subjects.RoleAgg, subjects.RoleDAP} {
		if _, err := dialAs(string(role), func() (*nats.Conn, error) { return parts.conn(role) }); err != nil {
			return benchResult{}, err
		}
	}
	conns := parts.conns // each role's, connected above
	s := parts.s
	rcc, err := loadRCConfig(func(string) (string, bool) { return "", false })
	if err != nil {
		return benchResult{}, err
	}
	aggc, err := loadAggConfig(func(string) (string, bool) { return "", false })
	if err != nil {
		return benchResult{}, err
	}
	rcc.AggIDs = []string{aggc.ID}
	reg := prometheus.NewRegistry()
	r, err := newRC(rcc, conns[subjects.RoleRC], s, log, reg)
	if err != nil {
		return benchResult{}, err
	}
	gwCfg := gw.Config{ID: "gw-bench", NC: conns[subjects.RoleGW], Subjects: s, Log: log, Registry: reg}
	if withLog {
		gwCfg.RequestLog = &gw.Durability{Replicas: 1, MaxAge: time.Hour}
	}
	g, err := gw.New(gwCfg)
	if err != nil {
		return benchResult{}, err
	}
	svcCtx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() {
		cancel()
		wg.Wait()
	}()
	errc := make(chan error, 4)
	start := func(name string, role subjects.Role, run func(context.Context) error) {
		wg.Go(func() {
			pprof.Do(svcCtx, pprof.Labels(labelWork, string(role)), func(ctx context.Context) {
				if err := run(ctx); err != nil && !errors.Is(err, context.Canceled) {
					errc <- fmt.Errorf("%s: %w", name, err)
				}
			})
		})
	}
	start("agg", subjects.RoleAgg, func(ctx context.Context) error { return runAgg(ctx, aggc, conns[subjects.RoleAgg], s, log, reg) })
	start("rc", subjects.RoleRC, r.Run)
	start("dap fleet", subjects.RoleDAP, func(ctx context.Context) error {
		return dap.RunDemoFleet(ctx, dap.DemoFleetConfig{NC: conns[subjects.RoleDAP], Subjects: s, Log: log, RCID: rcc.ID, Seed: 1, Replicas: 1})
	})
	start("gw", subjects.RoleGW, g.Run)
	daps := len(demo.Regions) * 3
	wctx, wcancel := context.WithTimeout(ctx, time.Minute)
	defer wcancel()
	if err := g.WaitRCs(wctx, func(rcs []gw.RCInfo) bool {
		return slices.ContainsFunc(rcs, func(rc gw.RCInfo) bool { return rc.DAPs >= daps })
	}); err != nil {
		select {
		case err := <-errc:
			return benchResult{}, err
		default:
		}
		return benchResult{}, fmt.Errorf("waiting for %d DAPs: %w", daps, err)
	}
	return measure()
}

// benchResult is one pass's table and what it says beneath it.
type benchResult struct {
	rows  []benchRow
	notes []string
}

// benchAgainst measures plain NATS and sg on the server at url, its
// goroutines labelled as the callers' (labelWork).
func benchAgainst(ctx context.Context, cfg benchConfig, url, prefix string, log zerolog.Logger, stderr io.Writer) (res benchResult, err error) {
	pprof.Do(ctx, pprof.Labels(labelWork, "caller"), func(ctx context.Context) {
		res, err = benchCallers(ctx, cfg, url, prefix, log, stderr)
	})
	return res, err
}

// benchCallers is benchAgainst's work.
func benchCallers(ctx context.Context, cfg benchConfig, url, prefix string, log zerolog.Logger, stderr io.Writer) (benchResult, error) {
	s, err := subjects.New(prefix)
	if err != nil {
		return benchResult{}, err
	}
	conns := make([]*nats.Conn, 0, cfg.clients+2)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	dial := func(as string) (*nats.Conn, error) {
		c, err := dialAs(as, func() (*nats.Conn, error) { return nats.Connect(url, nats.Name("sg-bench")) })
		if err != nil {
			return nil, fmt.Errorf("connect %s: %w", maskURL(url), err)
		}
		conns = append(conns, c)
		return c, nil
	}
	// Clients get a connection each, as separate callers would.
	clientConns := make([]*nats.Conn, cfg.clients)
	for i := range clientConns {
		if clientConns[i], err = dial("caller"); err != nil {
			return benchResult{}, err
		}
	}
	responder, err := dial("responder")
	if err != nil {
		return benchResult{}, err
	}
	echoSubject := "_sg_bench.echo"
	pprof.Do(ctx, pprof.Labels(labelWork, "responder"), func(context.Context) {
		_, err = responder.Subscribe(echoSubject, func(m *nats.Msg) { _ = m.Respond(m.Data) })
	})
	if err != nil {
		return benchResult{}, err
	}
	if err := responder.Flush(); err != nil {
		return benchResult{}, err
	}

	// One sg client per connection, made once, as a caller keeps one: a
	// client per call subscribed a new inbox and started a rate-limit actor
	// every time (and left both behind), which measured the client's setup,
	// not a request.
	sgClients := make(map[*nats.Conn]*client.Client, len(clientConns))
	for _, c := range clientConns {
		cl := client.New(c, s)
		defer cl.Close()
		sgClients[c] = cl
	}

	small := smallArgs()
	smallJSON, err := small.MarshalJSON()
	if err != nil {
		return benchResult{}, err
	}
	// The floors' connections, made as the services' are.
	dialFloor := func() (*nats.Conn, error) { return dial("floor") }
	if cfg.dialService != nil {
		dialFloor = func() (*nats.Conn, error) { return dialAs("floor", cfg.dialService) }
	}
	var floor *smallFloor
	pprof.Do(ctx, pprof.Labels(labelWork, "floor"), func(ctx context.Context) {
		floor, err = startSmallFloor(ctx, dialFloor, cfg.floorLog)
	})
	if err != nil {
		return benchResult{}, fmt.Errorf("the small request's floor: %w", err)
	}
	defer floor.close()
	callers := map[string]func(c *nats.Conn) (int, error){
		"plain": func(c *nats.Conn) (int, error) {
			m, err := c.Request(echoSubject, smallJSON, 10*time.Second)
			if err != nil {
				return 0, err
			}
			return len(m.Data), nil
		},
		"floor": func(c *nats.Conn) (int, error) { return floor.call(c, smallJSON) },
		"json":  func(c *nats.Conn) (int, error) { return jsonCall(ctx, c, s, smallJSON) },
		"msgpack": func(c *nats.Conn) (int, error) {
			resp, err := sgClients[c].Do(ctx, subjects.APIGetData, small, messages.Opts{})
			if err != nil {
				return 0, err
			}
			if !resp.Header.Status.IsOK() {
				return 0, fmt.Errorf("getData: %s %s", resp.Header.RC, resp.Header.AI)
			}
			return len(resp.Payload), nil
		},
	}
	// Warm up every path (connections, caches, the RC's view of the fleet).
	for _, name := range []string{"plain", "floor", "json", "msgpack"} {
		for range 20 {
			if _, err := callers[name](clientConns[0]); err != nil {
				return benchResult{}, fmt.Errorf("warm-up %s: %w", name, err)
			}
		}
	}
	// Plain and sg take turns, in benchSlices slices of each measurement:
	// a change of the machine's load (other processes) then weighs on both
	// alike. Measured one after the other for 3 s each, plain request-reply
	// at 50 clients ranged from 16k to 57k requests/s across runs on this
	// project's 2-core machine, and the ratio with it.
	names := []string{"plain", "floor", "json", "msgpack"}
	lat := map[string][]float64{}
	n, seqTime, conTime := map[string]int64{}, map[string]time.Duration{}, map[string]time.Duration{}
	perSlice := max(cfg.requests/benchSlices, 1)
	fmt.Fprintf(stderr, "bench: %d sequential requests, then %d clients for %s, each caller in turn in %d slices\n",
		cfg.requests, cfg.clients, cfg.duration, benchSlices)
	for range benchSlices {
		for _, name := range names {
			l, elapsed, err := sequential(perSlice, cfg.duration*10/benchSlices, func() error { _, err := callers[name](clientConns[0]); return err })
			if err != nil {
				return benchResult{}, fmt.Errorf("%s: %w", name, err)
			}
			lat[name], seqTime[name] = append(lat[name], l...), seqTime[name]+elapsed
		}
	}
	for i := range benchSlices {
		for _, name := range names {
			var k int64
			var elapsed time.Duration
			err := cfg.profiles.run(fmt.Sprintf("clients-%s-%d", name, i), func() (err error) {
				k, elapsed, err = concurrent(clientConns, cfg.duration/benchSlices, func(c *nats.Conn) error { _, err := callers[name](c); return err })
				return err
			})
			if err != nil {
				return benchResult{}, fmt.Errorf("%s, %d clients: %w", name, cfg.clients, err)
			}
			n[name], conTime[name] = n[name]+k, conTime[name]+elapsed
		}
	}
	p50, p99, rps1, rpsN := map[string]float64{}, map[string]float64{}, map[string]float64{}, map[string]float64{}
	for _, name := range names {
		p50[name], p99[name] = percentile(lat[name], 0.50), percentile(lat[name], 0.99)
		rps1[name] = float64(len(lat[name])) / seqTime[name].Seconds()
		rpsN[name] = float64(n[name]) / conTime[name].Seconds()
	}

	fmt.Fprintf(stderr, "bench: plain publish of %d KiB messages, %d MiB\n", cfg.pubBytes>>10, cfg.pubTotal>>20)
	var pub measured
	err = cfg.profiles.run("publish", func() (err error) {
		pub, err = publishMBs(responder, clientConns[0], cfg.pubBytes, cfg.pubTotal, cfg.duration*10)
		return err
	})
	if err != nil {
		return benchResult{}, fmt.Errorf("plain publish: %w", err)
	}
	fmt.Fprintf(stderr, "bench: large answers (whole %s table), %s\n", demo.Trade, cfg.largeRuns())
	largeJSON, largeMsgpack, err := largeMBs(ctx, clientConns[0], s, cfg.large, cfg.largeLast, cfg.profiles)
	if err != nil {
		return benchResult{}, fmt.Errorf("large answer: %w", err)
	}
	fmt.Fprintf(stderr, "bench: large answers read as streams (Sg-Accept-Stream), %s\n", cfg.largeRuns())
	streamJSON, streamMsgpack, err := streamMBs(ctx, clientConns[0], s, cfg.large, cfg.largeLast, cfg.profiles)
	if err != nil {
		return benchResult{}, fmt.Errorf("large answer, streamed: %w", err)
	}
	fmt.Fprintf(stderr, "bench: the large answers' floor: their bytes relayed through three crossings with plain NATS, no work\n")
	var relayJSON, relayMsgpack measured
	pprof.Do(ctx, pprof.Labels(labelWork, "floor"), func(context.Context) {
		relayJSON, relayMsgpack, err = relayFloor(dialFloor, clientConns[0], largeJSON.answerBytes, largeMsgpack.answerBytes, cfg.large, cfg.profiles)
	})
	if err != nil {
		return benchResult{}, fmt.Errorf("relay floor: %w", err)
	}
	us := func(d float64) float64 { return d * 1e6 }
	res := benchResult{rows: []benchRow{
		{"small getData p50, 1 client", "µs", us(p50["plain"]), us(p50["json"]), us(p50["msgpack"]), false},
		{"small getData p99, 1 client", "µs", us(p99["plain"]), us(p99["json"]), us(p99["msgpack"]), false},
		{"small getData, 1 client", "req/s", rps1["plain"], rps1["json"], rps1["msgpack"], true},
		{fmt.Sprintf("small getData, %d clients", cfg.clients), "req/s", rpsN["plain"], rpsN["json"], rpsN["msgpack"], true},
		{smallFloorRow + ", p50, 1 client", "µs", us(p50["plain"]), us(p50["floor"]), us(p50["floor"]), false},
		{fmt.Sprintf("%s, %d clients", smallFloorRow, cfg.clients), "req/s", rpsN["plain"], rpsN["floor"], rpsN["floor"], true},
	}}
	msgs := 8
	if cfg.floorLog {
		msgs = 12
	}
	res.notes = append(res.notes, fmt.Sprintf("Small floor: the %d messages of a small getData of one portion (%s), "+
		"made by plain NATS subscribers that pass them on and do no work, one measurement shown under both encodings: "+
		"what sg's protocol costs on this machine before sg's own work (cmd/sg/bench_floor.go).", msgs, floorPath(cfg.floorLog)))
	res.addLarge(cfg.ownSystem, pub, largeJSON, largeMsgpack, streamJSON, streamMsgpack, relayJSON, relayMsgpack)
	return res, nil
}

// addLarge adds the large-answer rows: MB/s, and CPU per MB when sg runs in
// this process (only then is its CPU this process's: against a running sg
// the services' CPU is elsewhere, and the figure would count the callers
// alone), and says how many answers ran.
func (r *benchResult) addLarge(inProcess bool, pub, wholeJSON, wholeMsgpack, streamJSON, streamMsgpack, relayJSON, relayMsgpack measured) {
	r.rows = append(r.rows,
		benchRow{"large answer (plain: publish)", "MB/s", pub.mbs, wholeJSON.mbs, wholeMsgpack.mbs, true},
		benchRow{"large answer, streamed (plain: publish)", "MB/s", pub.mbs, streamJSON.mbs, streamMsgpack.mbs, true},
		benchRow{relayFloorRow, "MB/s", pub.mbs, relayJSON.mbs, relayMsgpack.mbs, true})
	if inProcess && pub.cpuMs > 0 {
		r.rows = append(r.rows,
			benchRow{"large answer, CPU (plain: publish)", "core-ms/MB", pub.cpuMs, wholeJSON.cpuMs, wholeMsgpack.cpuMs, false},
			benchRow{"large answer, streamed, CPU (plain: publish)", "core-ms/MB", pub.cpuMs, streamJSON.cpuMs, streamMsgpack.cpuMs, false},
			benchRow{relayFloorRow + ", CPU", "core-ms/MB", pub.cpuMs, relayJSON.cpuMs, relayMsgpack.cpuMs, false})
	} else if inProcess {
		r.notes = append(r.notes, "CPU per MB: not reported, the process's CPU time cannot be read on this system.")
	} else {
		r.notes = append(r.notes, "CPU per MB: not reported, the services' CPU is not in the bench's process (it is when sg bench starts its own sg).")
	}
	r.notes = append(r.notes, fmt.Sprintf("Large answers run: %d JSON, %d msgpack whole; %d JSON, %d msgpack streamed.",
		wholeJSON.n, wholeMsgpack.n, streamJSON.n, streamMsgpack.n))
	r.notes = append(r.notes, fmt.Sprintf("Floor: each whole answer's bytes (%.2f MB JSON, %.2f MB msgpack), relayed unchanged by plain NATS "+
		"subscribers through the three crossings an answer makes (DAP -> Agg -> GW -> caller), one answer at a time; "+
		"the same hops with no work: a reference, not sg (%d and %d relayed).",
		float64(wholeJSON.answerBytes)/1e6, float64(wholeMsgpack.answerBytes)/1e6, relayJSON.n, relayMsgpack.n))
}

// largeRuns says how many large answers a run asks for.
func (c benchConfig) largeRuns() string {
	if c.large > 0 {
		return fmt.Sprintf("%d large answers per encoding", c.large)
	}
	return fmt.Sprintf("large answers: at least %d per encoding, more while under %s", benchLargeMin, benchLargeFor)
}

// Without --large, each large-answer row asks for at least benchLargeMin
// answers and goes on while under benchLargeFor: three whole answers took
// about 0.3 s per encoding, too few to tell a 10% change apart on a shared
// 2-core machine.
const (
	benchLargeMin = 3
	benchLargeFor = 2 * time.Second
)

// benchSlices: how many slices each small-request measurement is taken in,
// the callers (plain, JSON, msgpack) in turn.
const benchSlices = 6

// smallArgs is the small request: one minute of one label set, limit 1,
// half an hour back: inside the demo fleet's rdb (its last hour), so one
// portion on one DAP. The minute an hour back that it used to ask for
// crossed the rdb/idb boundary while the minute the fleet started in was
// current, and then went to two DAPs.
func smallArgs() messages.GetDataArgs {
	start := time.Now().UTC().Truncate(time.Minute).Add(-30 * time.Minute)
	return messages.GetDataArgs{Table: demo.Trade, StartTS: start, EndTS: start.Add(time.Minute), Limit: 1,
		Labels: messages.LabelSelector{demo.LabelKey: {demo.Regions[0]}}}
}

// jsonCall is what any NATS client does: a JSON envelope to sg.api.getData,
// one reply (a small answer always fits one message).
func jsonCall(ctx context.Context, c *nats.Conn, s subjects.Subjects, args []byte) (int, error) {
	body, err := messages.Request{Header: messages.RequestHeader{API: subjects.APIGetData}, Payload: args, Content: messages.ContentJSON}.Encode()
	if err != nil {
		return 0, err
	}
	h := nats.Header{}
	messages.SetString(h, messages.HdrContentType, string(messages.ContentJSON))
	m, err := c.RequestMsgWithContext(ctx, &nats.Msg{Subject: s.GWAPI(subjects.APIGetData), Header: h, Data: body})
	if err != nil {
		return 0, err
	}
	st, err := messages.ReadStatus(m.Header)
	if err != nil {
		return 0, err
	}
	if !st.IsOK() {
		return 0, fmt.Errorf("getData: %s %s", st.RC, st.AI)
	}
	return len(m.Data), nil
}

// sequential runs call n times (or until limit) and returns each latency.
func sequential(n int, limit time.Duration, call func() error) ([]float64, time.Duration, error) {
	lat := make([]float64, 0, n)
	start := time.Now()
	for range n {
		t := time.Now()
		if err := call(); err != nil {
			return nil, 0, err
		}
		lat = append(lat, time.Since(t).Seconds())
		if time.Since(start) > limit {
			break
		}
	}
	return lat, time.Since(start), nil
}

// concurrent runs call in a loop on every connection for d; it returns the
// calls completed. The first error stops the run.
func concurrent(conns []*nats.Conn, d time.Duration, call func(*nats.Conn) error) (int64, time.Duration, error) {
	var done atomic.Int64
	var first atomic.Pointer[error]
	stop := time.Now().Add(d)
	start := time.Now()
	var wg sync.WaitGroup
	for _, c := range conns {
		wg.Go(func() {
			for time.Now().Before(stop) && first.Load() == nil {
				if err := call(c); err != nil {
					first.CompareAndSwap(nil, &err)
					return
				}
				done.Add(1)
			}
		})
	}
	wg.Wait()
	if e := first.Load(); e != nil {
		return 0, 0, *e
	}
	return done.Load(), time.Since(start), nil
}

// publishWindow bounds the bytes of plain publish in flight (publishMBs).
const publishWindow = 32 << 20

// publishMBs is plain NATS's throughput from one publisher to one
// subscriber on another connection: bytes received per second, and the
// process's CPU per MB.
func publishMBs(pub, subConn *nats.Conn, size int, total int64, limit time.Duration) (measured, error) {
	if int64(size) > pub.MaxPayload() {
		size = int(pub.MaxPayload()) - 1024
	}
	var got atomic.Int64
	all := make(chan struct{})
	want := total / int64(size)
	var n atomic.Int64
	// At most publishWindow bytes in flight: a publisher with no bound can
	// outrun a subscriber starved of CPU past the server's max pending for it
	// (64 MiB), which then drops it as a slow consumer, and the run fails
	// with messages lost (seen at load average 10). A window far above one
	// message keeps the publisher from waiting while the subscriber keeps up.
	inFlight := make(chan struct{}, max(1, publishWindow/size))
	sub, err := subConn.Subscribe("_sg_bench.pub", func(m *nats.Msg) {
		got.Add(int64(len(m.Data)))
		<-inFlight
		if n.Add(1) == want {
			close(all)
		}
	})
	if err != nil {
		return measured{}, err
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := sub.SetPendingLimits(-1, -1); err != nil {
		return measured{}, err
	}
	if err := subConn.Flush(); err != nil {
		return measured{}, err
	}
	payload := make([]byte, size)
	cpu := startCPU()
	start := time.Now()
	deadline := time.After(limit)
	for range want {
		select {
		case inFlight <- struct{}{}:
		case <-deadline:
			return measured{}, fmt.Errorf("only %d of %d messages arrived within %s", n.Load(), want, limit)
		}
		if err := pub.Publish("_sg_bench.pub", payload); err != nil {
			return measured{}, err
		}
	}
	if err := pub.Flush(); err != nil {
		return measured{}, err
	}
	select {
	case <-all:
	case <-deadline:
		return measured{}, fmt.Errorf("only %d of %d messages arrived within %s", n.Load(), want, limit)
	}
	mb := float64(got.Load()) / 1e6
	return measured{mbs: mb / time.Since(start).Seconds(), cpuMs: cpu.msPer(mb), n: int(want)}, nil
}

// largeArgs is the large request: the whole trade table, or its last `last`.
func largeArgs(last time.Duration) (messages.GetDataArgs, []byte, error) {
	args := messages.GetDataArgs{Table: demo.Trade}
	if last > 0 {
		args.StartTS = time.Now().UTC().Add(-last)
	}
	argsJSON, err := args.MarshalJSON()
	return args, argsJSON, err
}

// measured is one throughput row's figure: MB per second, the process's CPU
// per MB (core-ms; 0: not read), and how many messages or answers ran.
type measured struct {
	mbs   float64
	cpuMs float64
	n     int
	// answerBytes: the mean bytes per answer (timedMBs).
	answerBytes int64
}

// cpuMark is the process's CPU time at a point.
type cpuMark struct {
	at time.Duration
	ok bool
}

func startCPU() cpuMark {
	at, ok := cputime.Process()
	return cpuMark{at, ok}
}

// msPer is the CPU since m, in core-ms per mb megabytes (0: not read).
func (m cpuMark) msPer(mb float64) float64 {
	now, ok := cputime.Process()
	if !m.ok || !ok || mb <= 0 {
		return 0
	}
	return float64(now-m.at) / float64(time.Millisecond) / mb
}

// timedMBs calls read k times, or with k 0 at least atLeast times and more
// while under window (benchLargeMin, benchLargeFor), and returns the bytes
// read per second, in MB, and the process's CPU per MB.
func timedMBs(k, atLeast int, window time.Duration, read func() (int64, error)) (measured, error) {
	var total int64
	cpu := startCPU()
	start := time.Now()
	n := 0
	for ; n < k || (k == 0 && (n < atLeast || time.Since(start) < window)); n++ {
		b, err := read()
		if err != nil {
			return measured{}, err
		}
		total += b
	}
	mb := float64(total) / 1e6
	return measured{mbs: mb / time.Since(start).Seconds(), cpuMs: cpu.msPer(mb), n: n, answerBytes: total / int64(max(n, 1))}, nil
}

// timedMBs is timedMBs (benchLargeMin, benchLargeFor) under phase's profile.
func (p phaseProfiles) timedMBs(phase string, k int, read func() (int64, error)) (m measured, err error) {
	err = p.run(phase, func() (err error) {
		m, err = timedMBs(k, benchLargeMin, benchLargeFor, read)
		return err
	})
	return m, err
}

// largeMBs asks for the whole trade table k times per encoding and returns
// answer bytes per second: JSON as a plain NATS client would (a subscription
// that reassembles chunks), msgpack through the sg client.
func largeMBs(ctx context.Context, c *nats.Conn, s subjects.Subjects, k int, last time.Duration, prof phaseProfiles) (jsonMBs, msgpackMBs measured, err error) {
	args, argsJSON, err := largeArgs(last)
	if err != nil {
		return measured{}, measured{}, err
	}
	jsonMBs, err = prof.timedMBs("whole-json", k, func() (int64, error) {
		n, err := jsonLarge(ctx, c, s, argsJSON)
		return int64(n), err
	})
	if err != nil {
		return measured{}, measured{}, err
	}
	cl := client.New(c, s)
	msgpackMBs, err = prof.timedMBs("whole-msgpack", k, func() (int64, error) {
		resp, err := cl.Do(ctx, subjects.APIGetData, args, messages.Opts{})
		if err != nil {
			return 0, err
		}
		if !resp.Header.Status.IsOK() {
			return 0, fmt.Errorf("getData: %s %s", resp.Header.RC, resp.Header.AI)
		}
		return int64(len(resp.Payload)), nil
	})
	return jsonMBs, msgpackMBs, err
}

// streamMBs is largeMBs with the answer read as a stream of frames: JSON as a
// plain NATS client would (its own inbox, frames until Sg-Stream-End), msgpack
// through the sg client's GetDataStream. Bytes are the frames' (JSON) and the
// whole answer's msgpack size (msgpack, as largeMBs counts them).
func streamMBs(ctx context.Context, c *nats.Conn, s subjects.Subjects, k int, last time.Duration, prof phaseProfiles) (jsonMBs, msgpackMBs measured, err error) {
	args, argsJSON, err := largeArgs(last)
	if err != nil {
		return measured{}, measured{}, err
	}
	body, err := messages.Request{Header: messages.RequestHeader{API: subjects.APIGetData}, Payload: argsJSON, Content: messages.ContentJSON}.Encode()
	if err != nil {
		return measured{}, measured{}, err
	}
	jsonMBs, err = prof.timedMBs("stream-json", k, func() (int64, error) { return jsonStream(ctx, c, s, body) })
	if err != nil {
		return measured{}, measured{}, err
	}
	cl := client.New(c, s)
	whole, err := cl.Do(ctx, subjects.APIGetData, args, messages.Opts{})
	if err != nil {
		return measured{}, measured{}, err
	}
	msgpackMBs, err = prof.timedMBs("stream-msgpack", k, func() (int64, error) {
		rows := 0
		hdr, err := cl.GetDataStream(ctx, client.GetDataQuery{Args: args}, func(t messages.Table) error {
			rows += t.NumRows()
			return nil
		})
		if err != nil {
			return 0, err
		}
		if !hdr.Status.IsOK() || rows == 0 {
			return 0, fmt.Errorf("getData stream: %s %s, %d rows", hdr.RC, hdr.AI, rows)
		}
		return int64(len(whole.Payload)), nil
	})
	return jsonMBs, msgpackMBs, err
}

// jsonStream reads one answer stream as any NATS client can and returns its bytes.
func jsonStream(ctx context.Context, c *nats.Conn, s subjects.Subjects, body []byte) (int64, error) {
	inbox := c.NewInbox()
	sub, err := c.SubscribeSync(inbox)
	if err != nil {
		return 0, err
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := sub.SetPendingLimits(-1, 64<<20); err != nil {
		return 0, err
	}
	h := nats.Header{}
	messages.SetString(h, messages.HdrAcceptStream, "1")
	if err := c.PublishMsg(&nats.Msg{Subject: s.GWAPI(subjects.APIGetData), Reply: inbox, Header: h, Data: body}); err != nil {
		return 0, err
	}
	var n int64
	for seq := 0; ; seq++ {
		m, err := sub.NextMsgWithContext(ctx)
		if err != nil {
			return 0, err
		}
		if st, err := messages.ReadStatus(m.Header); err == nil && !st.IsOK() {
			return 0, fmt.Errorf("getData stream: %s %s", st.RC, st.AI)
		}
		if !messages.IsStreamFrame(m.Header) {
			return 0, fmt.Errorf("getData stream: a whole answer of %d bytes", len(m.Data))
		}
		f, err := messages.ReadStreamFrame(m.Header)
		if err != nil || f.Seq != seq {
			return 0, fmt.Errorf("getData stream: frame %d after %d (%v)", f.Seq, seq-1, err)
		}
		n += int64(len(m.Data))
		if f.End {
			return n, nil
		}
	}
}

func jsonLarge(ctx context.Context, c *nats.Conn, s subjects.Subjects, args []byte) (int, error) {
	body, err := messages.Request{Header: messages.RequestHeader{API: subjects.APIGetData}, Payload: args, Content: messages.ContentJSON}.Encode()
	if err != nil {
		return 0, err
	}
	inbox := c.NewInbox()
	sub, err := c.SubscribeSync(inbox)
	if err != nil {
		return 0, err
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := sub.SetPendingLimits(-1, -1); err != nil {
		return 0, err
	}
	h := nats.Header{}
	messages.SetString(h, messages.HdrContentType, string(messages.ContentJSON))
	messages.SetString(h, messages.HdrAcceptChunks, "1") // ReceiveChunked reassembles
	if err := c.PublishMsg(&nats.Msg{Subject: s.GWAPI(subjects.APIGetData), Reply: inbox, Header: h, Data: body}); err != nil {
		return 0, err
	}
	cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	payload, hdr, err := messages.ReceiveChunked(cctx, sub, 0)
	if err != nil {
		return 0, err
	}
	if st, err := messages.ReadStatus(hdr); err != nil || !st.IsOK() {
		return 0, fmt.Errorf("getData: %v %+v", err, st)
	}
	return len(payload), nil
}

func percentile(v []float64, q float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	i := int(q * float64(len(s)-1))
	return s[i]
}

func writeBenchTable(w io.Writer, rows []benchRow) {
	fmt.Fprintln(w, "| what | unit | plain NATS | sg JSON | sg / plain | sg msgpack | sg / plain |")
	fmt.Fprintln(w, "| --- | --- | ---: | ---: | ---: | ---: | ---: |")
	ratio := func(r benchRow, v float64) string {
		if r.plain == 0 || v == 0 {
			return "-"
		}
		if r.higher {
			return fmt.Sprintf("%.1f%%", 100*v/r.plain)
		}
		return fmt.Sprintf("%.1fx", v/r.plain)
	}
	for _, r := range rows {
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s |\n", r.what, r.unit, num(r.plain), num(r.sgJSON), ratio(r, r.sgJSON), num(r.sgMsgpack), ratio(r, r.sgMsgpack))
	}
}

func num(v float64) string {
	switch {
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	case v >= 10:
		return fmt.Sprintf("%.1f", v)
	}
	return fmt.Sprintf("%.2f", v)
}

// benchHeader says what the figures are and where they come from.
func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return "unknown CPU"
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown CPU"
}

func memTotal() string {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return "unknown"
	}
	var kb int64
	for line := range strings.SplitSeq(string(b), "\n") {
		if _, err := fmt.Sscanf(line, "MemTotal: %d kB", &kb); err == nil {
			return fmt.Sprintf("%.0f GiB", float64(kb)/(1<<20))
		}
	}
	return "unknown"
}
