package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/rs/zerolog"
	"github.com/sg-project/sg/messages"
	"github.com/sg-project/sg/services/auth"
	"github.com/sg-project/sg/services/dap"
	"github.com/sg-project/sg/services/dap/demo"
	"github.com/sg-project/sg/services/dap/engine"
	"github.com/sg-project/sg/services/defaults"
	"github.com/sg-project/sg/services/gw"
	"github.com/sg-project/sg/services/logwriter"
	"github.com/sg-project/sg/services/rc"
	"github.com/sg-project/sg/services/retryafter"
	"github.com/sg-project/sg/subjects"
)

// parseLogLevel reads a log level as --log-level and SG_LOG_LEVEL take it:
// trace, debug, info, warn or error, in any case.
// The five names are matched here, not by zerolog.ParseLevel, which also
// takes numbers ("2" is warn, "-1" trace) and levels the help does not name.
func parseLogLevel(s string) (zerolog.Level, error) {
	switch strings.ToLower(s) {
	case "trace":
		return zerolog.TraceLevel, nil
	case "debug":
		return zerolog.DebugLevel, nil
	case "info":
		return zerolog.InfoLevel, nil
	case "warn":
		return zerolog.WarnLevel, nil
	case "error":
		return zerolog.ErrorLevel, nil
	}
	return zerolog.NoLevel, errors.New("want trace, debug, info, warn or error")
}

// newLogger logs JSON to stderr, or the console form when stderr is a
// terminal. JSON lines go out in batches from a goroutine of their own
// (package logwriter): a service does not wait on a write to log. closeLog
// writes what waits; the caller defers it.
func newLogger(stderr io.Writer, level string) (log zerolog.Logger, closeLog func(), err error) {
	lvl, err := parseLogLevel(level)
	if err != nil {
		return zerolog.Nop(), func() {}, fmt.Errorf("log level %q: %w", level, err)
	}
	if f, ok := stderr.(*os.File); ok {
		if fi, err := f.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
			// A person reading: every line at once, as it is logged.
			w := zerolog.ConsoleWriter{Out: f, TimeFormat: "15:04:05.000"}
			return zerolog.New(w).Level(lvl).With().Timestamp().Logger(), func() {}, nil
		}
	}
	w := logwriter.New(stderr, defaults.LogBuffer)
	return zerolog.New(w).Level(lvl).With().Timestamp().Logger(), func() { _ = w.Close() }, nil
}

func addCommonFlags(fs interface {
	StringVar(*string, string, string, string)
}, c *Common) {
	fs.StringVar(&c.NATSURL, "nats", c.NATSURL, "NATS URL(s), comma-separated (env SG_NATS_URL)")
	fs.StringVar(&c.Prefix, "prefix", c.Prefix, "subject prefix of the deployment (env SG_PREFIX)")
	fs.StringVar(&c.LogLevel, "log-level", c.LogLevel, "log level: trace, debug, info, warn, error (env SG_LOG_LEVEL)")
	fs.StringVar(&c.Creds, "creds", c.Creds, "credential file: an nkey seed made by sg auth, or a NATS .creds file (env SG_NATS_CREDS)")
	fs.StringVar(&c.InboxPrefix, "inbox-prefix", c.InboxPrefix, "inbox prefix; default: the one in the credential (env SG_NATS_INBOX_PREFIX)")
	fs.StringVar(&c.TLSCA, "tls-ca", c.TLSCA, "CA file that signs the server's certificate; turns TLS on (env SG_NATS_TLS_CA)")
	fs.StringVar(&c.TLSCert, "tls-cert", c.TLSCert, "client certificate file, for a server that verifies clients (env SG_NATS_TLS_CERT)")
	fs.StringVar(&c.TLSKey, "tls-key", c.TLSKey, "client certificate key file (env SG_NATS_TLS_KEY)")
}

// newCommonFlagSet is newFlagSet for a command that connects to NATS: c is
// read from the environment (an error names the variable, loadCommon) and
// the common flags, which override it, are added.
func newCommonFlagSet(c *Common, name, usageLine, description string, stdout, stderr io.Writer) (*flag.FlagSet, error) {
	var err error
	if *c, err = loadCommon(os.LookupEnv); err != nil {
		return nil, err
	}
	fs := newFlagSet(name, usageLine, description, stdout, stderr)
	addCommonFlags(fs, c)
	return fs, nil
}

// securityOptions are the credential and TLS options of c.
func securityOptions(c Common) ([]nats.Option, error) {
	var opts []nats.Option
	if c.Creds != "" {
		o, err := auth.ConnectOptions(c.Creds)
		if err != nil {
			return nil, err
		}
		opts = append(opts, o...)
	}
	if c.InboxPrefix != "" { // after the credential's, so it wins
		opts = append(opts, nats.CustomInboxPrefix(c.InboxPrefix))
	}
	if c.TLSCA != "" {
		opts = append(opts, nats.RootCAs(c.TLSCA))
	}
	if (c.TLSCert == "") != (c.TLSKey == "") {
		return nil, errors.New("--tls-cert and --tls-key go together")
	}
	if c.TLSCert != "" {
		opts = append(opts, nats.ClientCert(c.TLSCert, c.TLSKey))
	}
	return opts, nil
}

// connect dials NATS, retrying in the background if it is not up yet (a
// compose cluster starts in any order).
// The returned stop drains the connection (pending messages go out) and
// waits, bounded, until it is closed. extra are further options (a
// process that embeds the server connects in process: inProcess).
func connect(c Common, name string, log zerolog.Logger, extra ...nats.Option) (nc *nats.Conn, s subjects.Subjects, stop func(), err error) {
	s, err = subjects.New(c.Prefix)
	if err != nil {
		return nil, s, nil, err
	}
	sec, err := securityOptions(c)
	if err != nil {
		return nil, s, nil, err
	}
	closed := make(chan struct{})
	opts := append([]nats.Option{nats.Name(name), nats.MaxReconnects(-1), nats.RetryOnFailedConnect(true),
		nats.ClosedHandler(func(nc *nats.Conn) {
			if err := nc.LastError(); err != nil { // e.g. an authorization violation: a bad or revoked credential
				log.Error().Err(err).Str("creds", c.Creds).Msg("NATS connection closed")
			}
			close(closed)
		}),
		nats.ReconnectWait(500 * time.Millisecond),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil { // nil on a deliberate close
				log.Warn().Err(err).Msg("NATS disconnected")
			}
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) { log.Info().Str("url", nc.ConnectedUrlRedacted()).Msg("NATS reconnected") }),
		// A permissions violation arrives here, not as a Publish error: log it
		// loudly, it means this credential lacks a subject the service uses.
		nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
			ev := log.Error().Err(err)
			if sub != nil {
				ev = ev.Str("subject", sub.Subject)
			}
			if errors.Is(err, nats.ErrPermissionViolation) {
				ev.Str("creds", c.Creds).Msg("NATS permissions violation: the server refused a publish or subscription of this credential")
				return
			}
			ev.Msg("NATS async error")
		})}, sec...)
	opts = append(opts, extra...)
	nc, err = nats.Connect(c.NATSURL, opts...)
	if err != nil {
		return nil, s, nil, fmt.Errorf("connect to NATS at %s: %w", maskURL(c.NATSURL), err)
	}
	stop = func() {
		if err := nc.Drain(); err != nil {
			nc.Close()
			return
		}
		select {
		case <-closed:
		case <-time.After(30 * time.Second):
			log.Warn().Msg("NATS drain did not finish in 30s; closing")
			nc.Close()
		}
	}
	return nc, s, stop, nil
}

// partConns connects the parts of a one-process sg (sg run, sg bench) to its
// NATS server, each part on a connection of its own, as the services of a
// deployment connect. On one shared connection, one nats.go flusher and read
// loop and one server read and write loop carried every hop of every request:
// with 50 callers that made about a quarter fewer requests/s (BENCHMARKS.md,
// fourteenth session).
type partConns struct {
	name   string                     // connection names are <name>-<role>
	common func(subjects.Role) Common // how a role connects (its credential)
	log    zerolog.Logger
	opts   []nats.Option
	conns  map[subjects.Role]*nats.Conn
	stops  []func()
	s      subjects.Subjects
}

func newPartConns(name string, common func(subjects.Role) Common, log zerolog.Logger, opts ...nats.Option) *partConns {
	return &partConns{name: name, common: common, log: log, opts: opts, conns: map[subjects.Role]*nats.Conn{}}
}

// conn returns role's connection, connecting it on first use.
func (p *partConns) conn(role subjects.Role) (*nats.Conn, error) {
	if nc := p.conns[role]; nc != nil {
		return nc, nil
	}
	nc, s, stop, err := connect(p.common(role), p.name+"-"+string(role), p.log.With().Str("conn", string(role)).Logger(), p.opts...)
	if err != nil {
		return nil, err
	}
	p.s = s
	p.conns[role] = nc
	p.stops = append(p.stops, stop)
	return nc, nil
}

// close drains every connection, in the order they were made.
func (p *partConns) close() {
	for _, stop := range p.stops {
		stop()
	}
}

// serveMetrics serves reg on addr/metrics until ctx ends ("" = not at all).
func serveMetrics(ctx context.Context, addr string, reg *prometheus.Registry, log zerolog.Logger) error {
	if addr == "" {
		return nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("metrics listen %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	log.Info().Str("addr", ln.Addr().String()).Msg("metrics at /metrics")
	return nil
}

// natsServerConfig is what sg nats and sg run start a server with.
type natsServerConfig struct {
	Listen  string // HOST:PORT; port 0 picks a free port
	DataDir string // JetStream storage
	Logs    bool   // the server's own logs, to stderr
	// AuthDir turns authentication on: the users of <AuthDir>/nats-server.conf
	// (sg auth init); "" lets anyone connect, as before.
	AuthDir string
	// TLS for client connections: certificate and key of the server; with
	// TLSCA, clients must also present a certificate signed by that CA.
	TLSCert, TLSKey, TLSCA string
}

// serverOptions builds the options of an embedded server from c.
func serverOptions(c natsServerConfig) (*server.Options, error) {
	host, portStr, err := net.SplitHostPort(c.Listen)
	if err != nil {
		return nil, fmt.Errorf("listen address %q: want HOST:PORT: %w", c.Listen, err)
	}
	port, err := strconv.Atoi(portStr)
	if err != nil || port < 0 || port > 65535 {
		return nil, fmt.Errorf("listen address %q: bad port", c.Listen)
	}
	if port == 0 {
		port = server.RANDOM_PORT
	}
	if c.DataDir == "" {
		return nil, errors.New("a data directory is required for JetStream (--data)")
	}
	// SyncInterval: see defaultSyncInterval (what a power loss can lose).
	opts := &server.Options{ServerName: "sg-nats", Host: host, Port: port, JetStream: true, StoreDir: c.DataDir,
		NoSigs: true, NoLog: !c.Logs, SyncInterval: natsSyncInterval}
	if c.AuthDir != "" {
		if opts.Nkeys, err = auth.LoadConf(filepath.Join(c.AuthDir, auth.ConfFile)); err != nil {
			return nil, err
		}
	}
	if (c.TLSCert == "") != (c.TLSKey == "") {
		return nil, errors.New("--tls-cert and --tls-key go together")
	}
	if c.TLSCA != "" && c.TLSCert == "" {
		return nil, errors.New("--tls-ca (verify clients) needs the server's --tls-cert and --tls-key")
	}
	if c.TLSCert != "" {
		tc, err := server.GenTLSConfig(&server.TLSConfigOpts{CertFile: c.TLSCert, KeyFile: c.TLSKey, CaFile: c.TLSCA,
			Verify: c.TLSCA != "", Timeout: 2})
		if err != nil {
			return nil, fmt.Errorf("nats-server TLS: %w", err)
		}
		opts.TLSConfig, opts.TLS, opts.TLSVerify, opts.TLSTimeout = tc, true, c.TLSCA != "", 2
	}
	return opts, nil
}

// inProcess connects the services of a process that embeds the server
// (sg run, sg bench) to it through memory, not through its TCP listener:
// over loopback TCP every message between two services cost a write and a
// read system call each way through the kernel, most of a hop's time on a
// small request. Callers outside the process still connect over TCP.
func inProcess(srv *server.Server) nats.Option { return nats.InProcessServer(srv) }

// startNATSServer starts an embedded nats-server with JetStream in dataDir,
// open to anyone (tests, sg bench). Port 0 picks a free port.
func startNATSServer(listen, dataDir string, logs bool) (*server.Server, error) {
	srv, _, err := startNATSServerWith(natsServerConfig{Listen: listen, DataDir: dataDir, Logs: logs})
	return srv, err
}

// startNATSServerWith starts an embedded nats-server with JetStream, and
// returns the options it runs with (reloadAuth changes them).
func startNATSServerWith(c natsServerConfig) (*server.Server, *server.Options, error) {
	opts, err := serverOptions(c)
	if err != nil {
		return nil, nil, err
	}
	srv, err := server.NewServer(opts)
	if err != nil {
		return nil, nil, fmt.Errorf("nats-server: %w", err)
	}
	if c.Logs {
		srv.ConfigureLogger()
	}
	go srv.Start()
	if !srv.ReadyForConnections(15 * time.Second) {
		srv.Shutdown()
		return nil, nil, fmt.Errorf("nats-server on %s did not become ready", c.Listen)
	}
	return srv, opts, nil
}

// reloadAuth re-reads the users of dir into a running server: a rotated or
// removed credential stops working, and its connections are closed.
func reloadAuth(srv *server.Server, opts *server.Options, dir string) error {
	users, err := auth.LoadConf(filepath.Join(dir, auth.ConfFile))
	if err != nil {
		return err
	}
	next := opts.Clone()
	next.Nkeys = users
	if err := srv.ReloadOptions(next); err != nil {
		return fmt.Errorf("reload %s: %w", filepath.Join(dir, auth.ConfFile), err)
	}
	*opts = *next
	return nil
}

func cmdNATS(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("nats", "--listen HOST:PORT --data DIR [--auth DIR] [--tls-cert F --tls-key F [--tls-ca F]]", `
Runs the NATS server alone, with JetStream, built from the embedded nats-server
module: the bus of a multi-process deployment (sg gw, rc, agg, dap).

With --auth DIR (made by sg auth init) only sg's users connect, each limited to
the subjects of its role; SIGHUP re-reads DIR/nats-server.conf after sg auth
add, rotate or remove. With --tls-cert and --tls-key clients connect over TLS;
with --tls-ca too, they must present a certificate signed by that CA.`, stdout, stderr)
	var c natsServerConfig
	fs.StringVar(&c.Listen, "listen", "127.0.0.1:4222", "client listen address HOST:PORT (port 0: a free port)")
	fs.StringVar(&c.DataDir, "data", "", "JetStream storage directory (required)")
	fs.StringVar(&c.AuthDir, "auth", envString(os.LookupEnv, envAuthDir, ""), "credential directory (sg auth init): authentication and per-role permissions on (env SG_AUTH_DIR)")
	fs.StringVar(&c.TLSCert, "tls-cert", "", "server certificate file: TLS for client connections")
	fs.StringVar(&c.TLSKey, "tls-key", "", "server certificate key file")
	fs.StringVar(&c.TLSCA, "tls-ca", "", "CA file: clients must present a certificate it signed (mutual TLS)")
	sync, err := envDuration(os.LookupEnv, envNATSSyncPeriod, natsSyncInterval)
	if err != nil {
		return err
	}
	fs.DurationVar(&sync, "sync-interval", sync, "how often JetStream files are fsynced: at most this much acknowledged data is lost on a power loss (env SG_NATS_SYNC_INTERVAL)")
	if done, err := parse(fs, args, stdout); done {
		return err
	}
	if sync <= 0 {
		return fmt.Errorf("--sync-interval %s: want a positive duration", sync)
	}
	natsSyncInterval = sync
	c.Logs = true
	srv, opts, err := startNATSServerWith(c)
	if err != nil {
		return err
	}
	mode := "no authentication"
	if c.AuthDir != "" {
		mode = fmt.Sprintf("%d users from %s", len(opts.Nkeys), filepath.Join(c.AuthDir, auth.ConfFile))
	}
	fmt.Fprintf(stdout, "sg nats: listening at %s, JetStream in %s, %s\n", srv.ClientURL(), c.DataDir, mode)
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	for {
		select {
		case <-hup:
			if c.AuthDir == "" {
				continue
			}
			if err := reloadAuth(srv, opts, c.AuthDir); err != nil {
				fmt.Fprintf(stderr, "sg nats: %v; keeping the previous users\n", err)
				continue
			}
			fmt.Fprintf(stdout, "sg nats: reloaded %d users from %s\n", len(opts.Nkeys), c.AuthDir)
		case <-ctx.Done():
			srv.Shutdown()
			srv.WaitForShutdown()
			return nil
		}
	}
}

func cmdGW(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg, err := loadGWConfig(os.LookupEnv)
	if err != nil {
		return err
	}
	fs := newFlagSet("gw", "[flags]", `
Runs a gateway: clients call it on <prefix>.api.<api> (getData, ping, getMeta, sql);
it picks an RC by scope, submits, and forwards the answer or times the request out.`, stdout, stderr)
	addCommonFlags(fs, &cfg.Common)
	fs.StringVar(&cfg.ID, "id", cfg.ID, "GW id (a subject token, unique per GW)")
	fs.DurationVar(&cfg.Timeout, "timeout", cfg.Timeout, "default request timeout (env SG_TIMEOUT)")
	fs.DurationVar(&cfg.TimeoutMargin, "timeout-margin", cfg.TimeoutMargin, "wait after a deadline for the RC's own timeout (env SG_TIMEOUT_MARGIN)")
	fs.StringVar(&cfg.Affinity, "affinity", cfg.Affinity, "scope affinity: hard or soft (env SG_SCOPE_AFFINITY)")
	fs.StringVar(&cfg.AssemblyKey, "assembly-key", cfg.AssemblyKey, "the RC label that names its assembly (env SG_ASSEMBLY_KEY)")
	fs.Int64Var(&cfg.MaxAnswerBytes, "max-answer-bytes", cfg.MaxAnswerBytes, "largest answer forwarded")
	fs.IntVar(&cfg.MaxRequestBytes, "max-request-bytes", cfg.MaxRequestBytes, "largest request accepted, else TOO_LARGE (env SG_MAX_REQUEST_BYTES)")
	fs.StringVar(&cfg.MetricsListen, "metrics-listen", cfg.MetricsListen, "HOST:PORT to serve Prometheus /metrics on (\"\" = off)")
	httpListen := fs.String("http-listen", "", "HOST:PORT to serve the HTTP API (/v1) on, as a client of this deployment's GWs (\"\" = off)")
	addDurabilityFlags(fs, &cfg.Durability)
	jc, err := loadJobsConfig(os.LookupEnv)
	if err != nil {
		return err
	}
	httpc, err := loadHTTPConfig(os.LookupEnv)
	if err != nil {
		return err
	}
	addJobsFlags(fs, &jc)
	fs.DurationVar(&cfg.Durability.RequestLogTTL, "request-log-max-age", cfg.Durability.RequestLogTTL, "request log retention; a request whose timeout plus --timeout-margin is not below it is refused (env SG_REQUEST_LOG_MAX_AGE)")
	if done, err := parse(fs, args, stdout); done {
		return err
	}
	if err := checkAffinity(cfg.Affinity); err != nil {
		return err
	}
	if err := jc.RetryAfter.Check(); err != nil {
		return err
	}
	if err := cfg.Durability.check(); err != nil {
		return err
	}
	log, closeLog, err := newLogger(stderr, cfg.LogLevel)
	if err != nil {
		return err
	}
	defer closeLog()
	printed := cfg
	printed.NATSURL = maskURL(cfg.NATSURL)
	log.Info().Interface("config", printed).Interface("jobs", jc).Msg("sg gw starting")
	nc, s, stop, err := connect(cfg.Common, "sg-gw-"+cfg.ID, log)
	if err != nil {
		return err
	}
	defer stop()
	reg := prometheus.NewRegistry()
	if err := serveMetrics(ctx, cfg.MetricsListen, reg, log); err != nil {
		return err
	}
	// Under NATS auth the GW's credential may not call the GW API: its
	// async jobs run on a client credential's connection.
	var jobsNC *nats.Conn
	if jobsCreds := jc.clientCreds(cfg.Creds); cfg.Durability.JetStream && jobsCreds != "" {
		jcom := cfg.Common
		jcom.Creds, jcom.InboxPrefix = jobsCreds, ""
		var stopJobs func()
		if jobsNC, _, stopJobs, err = connect(jcom, "sg-gw-"+cfg.ID+"-jobs", log); err != nil {
			return fmt.Errorf("async jobs' client connection: %w", err)
		}
		defer stopJobs()
		log.Info().Str("creds", jobsCreds).Msg("async jobs run on this client credential")
	} else if cfg.Durability.JetStream && cfg.Creds != "" {
		log.Warn().Str("creds", cfg.Creds).Msg("no client credential for async jobs (--jobs-creds, or client.nk beside --creds): under NATS auth they fail")
	}
	g, err := gw.New(gw.Config{ID: cfg.ID, NC: nc, Subjects: s, Log: log, Timeout: cfg.Timeout,
		TimeoutMargin: cfg.TimeoutMargin, Affinity: cfg.Affinity, MaxAnswerBytes: cfg.MaxAnswerBytes, MaxRequestBytes: cfg.MaxRequestBytes, Registry: reg,
		AssemblyKey: cfg.AssemblyKey, MaxHeldBytes: cfg.MaxHeldBytes,
		RequestLog: cfg.Durability.gw(), Jobs: jc.gw(cfg.Durability, jobsNC), AnswerStore: cfg.Durability.answerStore()})
	if err != nil {
		return err
	}
	_, httpDone, err := serveHTTPAPI(ctx, *httpListen, httpc, nc, s, g, log)
	if err != nil {
		return err
	}
	defer func() { <-httpDone }()
	return g.Run(ctx)
}

func cmdRC(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg, err := loadRCConfig(os.LookupEnv)
	if err != nil {
		return err
	}
	aggs := strings.Join(cfg.AggIDs, ",")
	fs := newFlagSet("rc", "[flags]", `
Runs a resource coordinator: it takes requests from GWs, cuts them into portions,
schedules them on its DAPs, tells the Agg what to expect, retries and times out.`, stdout, stderr)
	addCommonFlags(fs, &cfg.Common)
	fs.StringVar(&cfg.ID, "id", cfg.ID, "RC id (a subject token)")
	fs.StringVar(&cfg.Addr, "addr", cfg.Addr, "address shown in timeout messages (default: the id)")
	fs.StringVar(&cfg.Assembly, "assembly", cfg.Assembly, "assembly of this RC; empty for a global RC (env SG_ASSEMBLY_NAME)")
	fs.StringVar(&cfg.AssemblyKey, "assembly-key", cfg.AssemblyKey, "the label that names the assembly: the RC's is its value (env SG_ASSEMBLY_KEY)")
	fs.StringVar(&cfg.Labels, "labels", cfg.Labels, "the RC's labels k=v,k2=v2, announced to GWs (env SG_RC_LABELS)")
	fs.IntVar(&cfg.MaxRetry, "max-retry", cfg.MaxRetry, "retries per request before it fails; 0: none (env SG_MAX_RETRY)")
	fs.DurationVar(&cfg.Timer, "timer", cfg.Timer, "RC timer period (env SG_RC_TIMER)")
	fs.IntVar(&cfg.MultiRCMaxWait, "multi-rc-wait", cfg.MultiRCMaxWait, "timer periods to wait for secondary RCs' status (env SG_MULTI_RC_TO_MAX_WAIT)")
	fs.StringVar(&aggs, "aggs", aggs, "comma-separated Agg ids to hand requests to")
	fs.StringVar(&cfg.MetricsListen, "metrics-listen", cfg.MetricsListen, "HOST:PORT to serve Prometheus /metrics on (\"\" = off)")
	addDurabilityFlags(fs, &cfg.Durability)
	if done, err := parse(fs, args, stdout); done {
		return err
	}
	if err := cfg.Durability.check(); err != nil {
		return err
	}
	cfg.AggIDs = splitList(aggs)
	log, closeLog, err := newLogger(stderr, cfg.LogLevel)
	if err != nil {
		return err
	}
	defer closeLog()
	printed := cfg
	printed.NATSURL = maskURL(cfg.NATSURL)
	log.Info().Interface("config", printed).Msg("sg rc starting")
	nc, s, stop, err := connect(cfg.Common, "sg-rc-"+cfg.ID, log)
	if err != nil {
		return err
	}
	defer stop()
	reg := prometheus.NewRegistry()
	if err := serveMetrics(ctx, cfg.MetricsListen, reg, log); err != nil {
		return err
	}
	r, err := newRC(cfg, nc, s, log, reg)
	if err != nil {
		return err
	}
	return r.Run(ctx)
}

func newRC(cfg RCConfig, nc *nats.Conn, s subjects.Subjects, log zerolog.Logger, reg *prometheus.Registry) (*rc.RC, error) {
	if cfg.MaxRetry < 0 {
		return nil, fmt.Errorf("rc: max retry %d: want 0 (no retries) or more", cfg.MaxRetry)
	}
	// A user's 0 means no retries; rc.Config's 0 means "the default".
	maxRetry := cfg.MaxRetry
	if maxRetry == 0 {
		maxRetry = defaults.NoRetry
	}
	var labels map[string]string
	if cfg.Labels != "" {
		ls, err := parseLabels(cfg.Labels)
		if err != nil {
			return nil, fmt.Errorf("rc: labels: %w", err)
		}
		labels = ls
	}
	c := rc.Config{ID: cfg.ID, Addr: cfg.Addr, Assembly: cfg.Assembly, NC: nc, Subjects: s, Log: log,
		Labels: labels, AssemblyKey: cfg.AssemblyKey,
		MaxRetry: maxRetry, TickEvery: cfg.Timer, MultiRCMaxWait: cfg.MultiRCMaxWait, AggIDs: cfg.AggIDs, Registry: reg,
		JetStream: cfg.Durability.rc()}
	var err error
	if cfg.RetryAfter != nil {
		c.RetryAfter = *cfg.RetryAfter
	} else if c.RetryAfter, err = retryafter.FromEnv(retryafter.Config{}, os.LookupEnv); err != nil { // SG_RETRY_*
		return nil, err
	}
	if err := c.LimitsFromEnv(os.LookupEnv); err != nil { // SG_RC_MAX_QUEUED...
		return nil, err
	}
	return rc.New(c)
}

func cmdAgg(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg, err := loadAggConfig(os.LookupEnv)
	if err != nil {
		return err
	}
	fs := newFlagSet("agg", "[flags]", `
Runs an aggregator: it merges the partial results of a request's portions and
sends the answer to the GW.`, stdout, stderr)
	addCommonFlags(fs, &cfg.Common)
	fs.StringVar(&cfg.ID, "id", cfg.ID, "Agg id (a subject token)")
	fs.Int64Var(&cfg.MaxAnswerBytes, "max-answer-bytes", cfg.MaxAnswerBytes, "largest answer built")
	metricsListen := fs.String("metrics-listen", "", "HOST:PORT to serve Prometheus /metrics on (\"\" = off)")
	if done, err := parse(fs, args, stdout); done {
		return err
	}
	log, closeLog, err := newLogger(stderr, cfg.LogLevel)
	if err != nil {
		return err
	}
	defer closeLog()
	printed := cfg
	printed.NATSURL = maskURL(cfg.NATSURL)
	log.Info().Interface("config", printed).Msg("sg agg starting")
	nc, s, stop, err := connect(cfg.Common, "sg-agg-"+cfg.ID, log)
	if err != nil {
		return err
	}
	defer stop()
	reg := prometheus.NewRegistry()
	if err := serveMetrics(ctx, *metricsListen, reg, log); err != nil {
		return err
	}
	return runAgg(ctx, cfg, nc, s, log, reg)
}

func cmdDAP(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg, err := loadDAPConfig(os.LookupEnv)
	if err != nil {
		return err
	}
	fs := newFlagSet("dap", "[--demo] [flags]", `
Runs a data access process. With --demo it runs the whole demo fleet instead:
a DAP per region (eu, us, asia) and tier (rdb, idb, hdb) with seeded generated data.

Without --demo it runs one DAP whose data is, for now, an in-memory engine loaded
from the demo generator for its region (the "region" label) over --data-range
(default: its purview, or the 3 days ending now when the purview is unbounded).`, stdout, stderr)
	addCommonFlags(fs, &cfg.Common)
	fs.BoolVar(&cfg.Demo, "demo", cfg.Demo, "run the demo fleet (every region and tier)")
	fs.StringVar(&cfg.ID, "id", cfg.ID, "DAP id (a subject token); with --demo the prefix of the ids")
	fs.StringVar(&cfg.RCID, "rc", cfg.RCID, "id of the RC that owns this DAP (\"\" = any RC)")
	fs.StringVar(&cfg.Assembly, "assembly", cfg.Assembly, "assembly (env SG_ASSEMBLY_NAME)")
	fs.StringVar(&cfg.Labels, "labels", cfg.Labels, "label set, k=v[,k=v]; the demo data needs region=eu|us|asia")
	fs.StringVar(&cfg.Tier, "tier", cfg.Tier, "tier: rdb, idb or hdb")
	fs.StringVar(&cfg.Purview, "purview", cfg.Purview, "temporal purview START,END in RFC 3339; empty or - for an open end")
	fs.StringVar(&cfg.Data, "data-range", cfg.Data, "range of generated data START,END in RFC 3339 (default: see above)")
	fs.StringVar(&cfg.Tables, "tables", cfg.Tables, "tables served: trade, quote (partitioned), instrument (sharded)")
	fs.Uint64Var(&cfg.Seed, "seed", cfg.Seed, "seed of the generated data")
	fs.IntVar(&cfg.Replicas, "replicas", cfg.Replicas, "with --demo: DAPs per region and tier")
	fs.IntVar(&cfg.Concurrency, "concurrency", cfg.Concurrency, "portions run at once per DAP")
	metricsListen := fs.String("metrics-listen", "", "HOST:PORT to serve Prometheus /metrics on (\"\" = off)")
	if done, err := parse(fs, args, stdout); done {
		return err
	}
	log, closeLog, err := newLogger(stderr, cfg.LogLevel)
	if err != nil {
		return err
	}
	defer closeLog()
	printed := cfg
	printed.NATSURL = maskURL(cfg.NATSURL)
	log.Info().Interface("config", printed).Msg("sg dap starting")
	var dcfg dap.Config
	if !cfg.Demo {
		if dcfg, err = buildDAPConfig(cfg, time.Now().UTC()); err != nil {
			return err
		}
	}
	nc, s, stop, err := connect(cfg.Common, "sg-dap-"+cfg.ID, log)
	if err != nil {
		return err
	}
	defer stop()
	maxQueue, err := dap.MaxQueueFromEnv(os.LookupEnv) // SG_DAP_MAX_QUEUE
	if err != nil {
		return err
	}
	reg := prometheus.NewRegistry()
	if err := serveMetrics(ctx, *metricsListen, reg, log); err != nil {
		return err
	}
	if cfg.Demo {
		return dap.RunDemoFleet(ctx, dap.DemoFleetConfig{NC: nc, Subjects: s, Log: log, RCID: cfg.RCID,
			Assembly: cfg.Assembly, Seed: cfg.Seed, Replicas: cfg.Replicas, IDPrefix: cfg.ID, Concurrency: cfg.Concurrency, MaxQueue: maxQueue,
			Registry: reg})
	}
	dcfg.NC, dcfg.Subjects, dcfg.Log, dcfg.MaxQueue, dcfg.Registry = nc, s, log, maxQueue, reg
	d, err := dap.New(dcfg)
	if err != nil {
		return err
	}
	return d.Run(ctx)
}

// buildDAPConfig turns the flags of a non-demo DAP into its config and loads
// its data from the demo generator.
func buildDAPConfig(c DAPConfig, now time.Time) (dap.Config, error) {
	labels, err := parseLabels(c.Labels)
	if err != nil {
		return dap.Config{}, err
	}
	region := labels[demo.LabelKey]
	if len(demo.Syms(region)) == 0 {
		return dap.Config{}, fmt.Errorf("--labels %q: the demo data needs %s=eu, us or asia", c.Labels, demo.LabelKey)
	}
	tier := messages.Tier(c.Tier)
	if !tier.Valid() {
		return dap.Config{}, fmt.Errorf("--tier %q: want rdb, idb or hdb", c.Tier)
	}
	purview, err := parseRange(c.Purview, messages.Unbounded)
	if err != nil {
		return dap.Config{}, fmt.Errorf("--purview: %w", err)
	}
	dataDefault := messages.TimeRange{Start: now.Add(-72 * time.Hour).UnixNano(), End: now.UnixNano()}
	if purview.Start != messages.TSMin {
		dataDefault.Start = purview.Start
	}
	if purview.End != messages.TSMax {
		dataDefault.End = purview.End
	}
	data, err := parseRange(c.Data, dataDefault)
	if err != nil {
		return dap.Config{}, fmt.Errorf("--data-range: %w", err)
	}
	if data.Start == messages.TSMin || data.End == messages.TSMax || !data.Valid() {
		return dap.Config{}, errors.New("--data-range must be bounded, with START before END")
	}
	var tables []messages.TableInfo
	names := splitList(c.Tables)
	for _, t := range names {
		switch t {
		case demo.Trade, demo.Quote:
			tables = append(tables, messages.TableInfo{Name: t, Kind: messages.TablePartitioned})
		case demo.Instrument:
			tables = append(tables, messages.TableInfo{Name: t, Kind: messages.TableSharded})
		default:
			return dap.Config{}, fmt.Errorf("--tables: unknown table %q (the demo data has trade, quote, instrument)", t)
		}
	}
	store := engine.NewStore()
	if err := (demo.Config{Seed: c.Seed}).LoadTables(store, region, time.Unix(0, data.Start).UTC(), time.Unix(0, data.End).UTC(), names...); err != nil {
		return dap.Config{}, fmt.Errorf("load demo data: %w", err)
	}
	return dap.Config{ID: c.ID, RCID: c.RCID, Assembly: c.Assembly, Labels: labels, Tier: tier, Purview: purview,
		Tables: tables, PurviewVersion: 1, ReferenceVintage: 1, Concurrency: c.Concurrency,
		Source: dap.EngineSource{Store: store}}, nil
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// parseLabels reads k=v[,k=v].
func parseLabels(s string) (messages.LabelSet, error) {
	out := messages.LabelSet{}
	for _, kv := range splitList(s) {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" || v == "" {
			return nil, fmt.Errorf("--labels %q: want k=v[,k=v]", s)
		}
		out[strings.TrimSpace(k)] = strings.TrimSpace(v)
	}
	if len(out) == 0 {
		return nil, errors.New("--labels: at least one label is required")
	}
	return out, nil
}

// parseRange reads START,END (RFC 3339; empty or "-" for an open end).
func parseRange(s string, def messages.TimeRange) (messages.TimeRange, error) {
	if strings.TrimSpace(s) == "" {
		return def, nil
	}
	a, b, ok := strings.Cut(s, ",")
	if !ok {
		return def, fmt.Errorf("%q: want START,END", s)
	}
	r := messages.Unbounded
	for i, part := range []string{a, b} {
		part = strings.TrimSpace(part)
		if part == "" || part == "-" {
			continue
		}
		t, err := time.Parse(time.RFC3339Nano, part)
		if err != nil {
			return def, fmt.Errorf("%q: %w", part, err)
		}
		if i == 0 {
			r.Start = t.UnixNano()
		} else {
			r.End = t.UnixNano()
		}
	}
	if !r.Valid() {
		return def, fmt.Errorf("%q: START must be before END", s)
	}
	return r, nil
}
