package test

// A deployment in one process for the multi-RC, restart and load tests:
// every GW, RC, Agg and DAP has its own NATS connection, so that one can be
// stopped (its context) or crashed (its connection closed first) alone.

import (
	"bytes"
	"context"
	"runtime/pprof"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/sg-project/sg/messages"
	"github.com/sg-project/sg/services/agg"
	"github.com/sg-project/sg/services/agg/merge"
	"github.com/sg-project/sg/services/dap"
	"github.com/sg-project/sg/services/dap/demo"
	"github.com/sg-project/sg/services/gw"
	"github.com/sg-project/sg/services/rc"
	"github.com/sg-project/sg/subjects"
	"github.com/sg-project/sg/test/natstest"
)

// deployEnd fixes the demo data's range so that answers are reproducible.
var deployEnd = time.Date(2026, 11, 20, 12, 0, 0, 0, time.UTC)

type deployment struct {
	t     testing.TB
	srv   *server.Server
	s     subjects.Subjects
	ctx   context.Context
	nc    *nats.Conn // the test's own connection (client, probes)
	log   zerolog.Logger
	fleet dap.DemoFleet

	mu    sync.Mutex
	procs map[string]*process
	gates map[string]*depGate   // per DAP id
	daps  map[string]dap.Config // per DAP id, with its gated source
}

// process is one running service.
type process struct {
	name   string
	nc     *nats.Conn
	closed chan struct{} // closed when nc is
	cancel context.CancelFunc
	done   chan error
	reg    *prometheus.Registry
	rc     *rc.RC
	gw     *gw.GW
}

func newDeployment(t testing.TB) *deployment {
	t.Helper()
	srv := natstest.Start(t)
	ctx, cancel := context.WithCancel(context.Background())
	d := &deployment{t: t, srv: srv, s: subjects.Default(), ctx: ctx, procs: map[string]*process{}, gates: map[string]*depGate{}, daps: map[string]dap.Config{}}
	d.log = testLogger(t)
	d.nc = d.connect("test")
	t.Cleanup(func() {
		d.mu.Lock()
		names := make([]string, 0, len(d.procs))
		for n := range d.procs {
			names = append(names, n)
		}
		d.mu.Unlock()
		for _, n := range names {
			d.stop(n)
		}
		cancel()
	})
	return d
}

func (d *deployment) logger(name string) zerolog.Logger {
	return d.log.With().Str("proc", name).Logger()
}

func (d *deployment) connect(name string) *nats.Conn {
	d.t.Helper()
	nc, _ := d.connectNotify(name)
	return nc
}

func (d *deployment) connectNotify(name string) (*nats.Conn, chan struct{}) {
	d.t.Helper()
	closed := make(chan struct{})
	nc, err := nats.Connect(d.srv.ClientURL(), nats.Name(name), nats.MaxReconnects(0),
		nats.ClosedHandler(func(*nats.Conn) { close(closed) }))
	if err != nil {
		d.t.Fatalf("connect %s: %v", name, err)
	}
	d.t.Cleanup(nc.Close)
	return nc, closed
}

// newProcess gives a service its own connection.
func (d *deployment) newProcess(name string) *process {
	nc, closed := d.connectNotify(name)
	return &process{name: name, nc: nc, closed: closed, reg: prometheus.NewRegistry()}
}

// start runs a service until stop or crash; run returns when ctx ends.
func (d *deployment) start(p *process, run func(ctx context.Context) error) {
	d.t.Helper()
	ctx, cancel := context.WithCancel(d.ctx)
	p.cancel, p.done = cancel, make(chan error, 1)
	d.mu.Lock()
	if _, dup := d.procs[p.name]; dup {
		d.mu.Unlock()
		d.t.Fatalf("%s is already running", p.name)
	}
	d.procs[p.name] = p
	d.mu.Unlock()
	go func() { p.done <- run(ctx) }()
}

func (d *deployment) take(name string) *process {
	d.mu.Lock()
	defer d.mu.Unlock()
	p := d.procs[name]
	delete(d.procs, name)
	return p
}

// stop ends a service the ordinary way, as the binaries do: its context
// ends, then its connection drains (messages already delivered to it are
// still handled) and closes.
func (d *deployment) stop(name string) {
	d.t.Helper()
	p := d.take(name)
	if p == nil {
		return
	}
	p.cancel()
	d.await(p)
	if err := p.nc.Drain(); err != nil {
		p.nc.Close()
		return
	}
	select {
	case <-p.closed:
	case <-time.After(10 * time.Second):
		d.t.Errorf("%s: connection did not drain within 10s", name)
		p.nc.Close()
	}
}

// crash closes the service's connection first: it can say nothing more,
// like a killed process.
func (d *deployment) crash(name string) {
	d.t.Helper()
	p := d.take(name)
	if p == nil {
		return
	}
	p.nc.Close()
	p.cancel()
	d.await(p)
}

// processStopBound bounds a service's stop: a GW may take its shutdown grace,
// then up to 3 x its request log timeout (5 s) for writes under way to settle,
// then a flush (services/gw shell.go), before Run returns.
const processStopBound = 30 * time.Second

func (d *deployment) await(p *process) {
	d.t.Helper()
	select {
	case err := <-p.done:
		if err != nil && !strings.Contains(err.Error(), "closed") {
			d.t.Errorf("%s: %v", p.name, err)
		}
	case <-time.After(processStopBound):
		// The goroutines say what the stop waits for.
		var b strings.Builder
		_ = pprof.Lookup("goroutine").WriteTo(&b, 1)
		d.t.Errorf("%s did not stop within %s; goroutines:\n%s", p.name, processStopBound, b.String())
	}
}

type rcOpts struct {
	assembly string
	durable  bool
}

func (d *deployment) startRC(id string, o rcOpts) *rc.RC {
	d.t.Helper()
	p := d.newProcess(id)
	cfg := rc.Config{ID: id, Assembly: o.assembly, NC: p.nc, Subjects: d.s, Log: d.logger(id),
		TickEvery: 100 * time.Millisecond, AnnounceEvery: 100 * time.Millisecond, AggIDs: []string{"agg-1"}, Registry: p.reg,
		WarmUp: 600 * time.Millisecond} // three heartbeat periods of the deployment's DAPs (startFleet): one is too tight under load
	if o.durable {
		cfg.JetStream = &rc.Durability{Replicas: 1}
	}
	r, err := rc.New(cfg)
	if err != nil {
		d.t.Fatal(err)
	}
	p.rc = r
	d.start(p, r.Run)
	select {
	case <-r.Ready():
	case <-time.After(10 * time.Second):
		d.t.Fatalf("%s not ready within 10s", id)
	}
	return r
}

type gwOpts struct {
	affinity string
	durable  bool
	// createAfter: the request log's CreateAfter (0, its default: every
	// request logged with its first drive).
	createAfter time.Duration
	margin      time.Duration
}

func (d *deployment) startGW(id string, o gwOpts) *gw.GW {
	d.t.Helper()
	p := d.newProcess(id)
	// DeadAfter is the GW's own (3 s here): an RC or a peer GW silent that
	// long is dead, its requests driven again or adopted, which every test
	// that is not about a silent death would see as a second drive. At 1 s a
	// loaded machine could leave a live process that silent; a restart or a
	// stop is acted on at once whatever DeadAfter is.
	cfg := gw.Config{ID: id, NC: p.nc, Subjects: d.s, Log: d.logger(id), Affinity: o.affinity,
		TimeoutMargin: o.margin, AnnounceEvery: 100 * time.Millisecond, ShutdownGrace: 20 * time.Millisecond,
		StartupWait: 2 * time.Second, Registry: p.reg}
	if cfg.TimeoutMargin == 0 {
		cfg.TimeoutMargin = 500 * time.Millisecond
	}
	if o.durable {
		cfg.RequestLog = &gw.Durability{Replicas: 1, CreateAfter: o.createAfter}
	}
	g, err := gw.New(cfg)
	if err != nil {
		d.t.Fatal(err)
	}
	p.gw = g
	d.start(p, g.Run)
	select {
	case <-g.Ready():
	case <-time.After(10 * time.Second):
		d.t.Fatalf("%s not ready within 10s", id)
	}
	return g
}

func (d *deployment) startAgg(id string) { d.startAggWith(id, nil) }

// startAggWith starts an Agg whose configuration mutate changes.
func (d *deployment) startAggWith(id string, mutate func(*agg.Config)) {
	d.t.Helper()
	p := d.newProcess(id)
	cfg := agg.Config{ID: id, NC: p.nc, Subjects: d.s, Log: d.logger(id), Registry: p.reg}
	if mutate != nil {
		mutate(&cfg)
	}
	a, err := agg.New(cfg)
	if err != nil {
		d.t.Fatal(err)
	}
	d.start(p, a.Run)
	select {
	case <-a.Ready():
	case <-time.After(10 * time.Second):
		d.t.Fatalf("%s not ready within 10s", id)
	}
}

// fleetOwner assigns each region's DAPs an owning RC and an assembly.
type fleetOwner func(region string) (rcID, assembly string)

// startFleet runs the demo fleet (3 regions x 3 tiers), each DAP behind a
// gate that the test may close to hold its portions.
func (d *deployment) startFleet(owner fleetOwner) {
	d.t.Helper()
	info, err := dap.DemoFleetInfo(dap.DemoFleetConfig{Subjects: d.s, Seed: 7, End: deployEnd,
		Start: deployEnd.Add(-48 * time.Hour), TradesPerDay: 300, QuotesPerDay: 300, Heartbeat: 200 * time.Millisecond})
	if err != nil {
		d.t.Fatal(err)
	}
	d.fleet = info
	for _, sh := range info.Shards {
		store, err := info.Store(sh)
		if err != nil {
			d.t.Fatal(err)
		}
		c := sh.Config
		c.RCID, c.Assembly = owner(sh.Shard.Region)
		p := d.newProcess(c.ID)
		g := newDepGate()
		d.gates[c.ID] = g
		c.NC, c.Log, c.Source = p.nc, d.logger(c.ID), depGatedSource{g: g, src: dap.EngineSource{Store: store}}
		d.daps[c.ID] = c
		x, err := dap.New(c)
		if err != nil {
			d.t.Fatal(err)
		}
		d.start(p, x.Run)
	}
}

// restartDAP runs DAP id again, with the same data and gate.
func (d *deployment) restartDAP(id string) {
	d.t.Helper()
	p := d.newProcess(id)
	c := d.daps[id]
	c.NC = p.nc
	x, err := dap.New(c)
	if err != nil {
		d.t.Fatal(err)
	}
	d.start(p, x.Run)
}

// waitAnnouncedDAPs waits until RC rcID announces exactly n DAPs.
func (d *deployment) waitAnnouncedDAPs(rcID string, n int) {
	d.t.Helper()
	sub, err := d.nc.SubscribeSync(d.s.RCAnnounce(rcID))
	if err != nil {
		d.t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		m, err := sub.NextMsg(time.Until(deadline))
		if err != nil {
			d.t.Fatalf("%s did not announce %d DAPs within 10s", rcID, n)
		}
		if a, err := messages.DecodeValid[messages.RCAnnouncement](m.Data); err == nil && a.DAPs == n {
			return
		}
	}
}

// dapIDs lists the fleet's DAP ids of one region, sorted.
func (d *deployment) dapIDs(region string) []string {
	var out []string
	for _, sh := range d.fleet.Shards {
		if sh.Shard.Region == region {
			out = append(out, sh.Config.ID)
		}
	}
	return out
}

// gate holds a DAP's portions while closed, and says when one arrives.
type depGate struct {
	mu      sync.Mutex
	open    chan struct{}
	entered chan string
	stuck   bool // held portions ignore their deadline (a DAP stuck in a computation)
}

func newDepGate() *depGate {
	g := &depGate{open: make(chan struct{}), entered: make(chan string, 1024)}
	close(g.open)
	return g
}

// holdStuck holds portions even past their deadline.
func (g *depGate) holdStuck() {
	g.hold()
	g.mu.Lock()
	g.stuck = true
	g.mu.Unlock()
}

func (g *depGate) hold() {
	g.mu.Lock()
	defer g.mu.Unlock()
	select {
	case <-g.open:
		g.open = make(chan struct{})
	default:
	}
}

func (g *depGate) release() {
	g.mu.Lock()
	defer g.mu.Unlock()
	select {
	case <-g.open:
	default:
		close(g.open)
	}
}

func (g *depGate) wait() (<-chan struct{}, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.open, g.stuck
}

type depGatedSource struct {
	g   *depGate
	src dap.EngineSource
}

func (s depGatedSource) Execute(ctx context.Context, api string, args messages.Args, labels messages.LabelSet, rng messages.TimeRange) ([]byte, error) {
	open, stuck := s.g.wait()
	select {
	case s.g.entered <- api:
	default:
	}
	done := ctx.Done()
	if stuck {
		done = nil
	}
	select {
	case <-open:
	case <-done:
		return nil, ctx.Err()
	}
	return s.src.Execute(ctx, api, args, labels, rng)
}

// waitEntered waits until a portion reaches the DAP's source.
func (d *deployment) waitEntered(dapID string) {
	d.t.Helper()
	select {
	case <-d.gates[dapID].entered:
	case <-time.After(10 * time.Second):
		d.t.Fatalf("no portion reached %s within 10s", dapID)
	}
}

// waitFleet waits until every listed RC announces at least n DAPs.
func (d *deployment) waitFleet(n int, rcIDs ...string) {
	d.t.Helper()
	sub, err := d.nc.SubscribeSync(d.s.RCAnnouncePattern())
	if err != nil {
		d.t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	want := map[string]bool{}
	for _, id := range rcIDs {
		want[id] = true
	}
	deadline := time.Now().Add(10 * time.Second)
	for len(want) > 0 {
		m, err := sub.NextMsg(time.Until(deadline))
		if err != nil {
			d.t.Fatalf("RCs %v did not announce %d DAPs within 10s", want, n)
		}
		a, err := messages.DecodeValid[messages.RCAnnouncement](m.Data)
		if err == nil && a.DAPs >= n {
			delete(want, a.RCID)
		}
	}
}

// waitGWs waits until GW g knows the listed RCs.
func depWaitGWRCs(t testing.TB, g *gw.GW, rcIDs ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := g.WaitRCs(ctx, func(rcs []gw.RCInfo) bool {
		n := 0
		for _, r := range rcs {
			for _, id := range rcIDs {
				if r.ID == id && !r.Draining {
					n++
				}
			}
		}
		return n == len(rcIDs)
	})
	if err != nil {
		t.Fatalf("GW does not know RCs %v: %v", rcIDs, err)
	}
}

// tradeArgs: sum of size and count per region and sym over the whole range:
// every DAP of every tier contributes, and the merge must be exact.
func tradeArgs() messages.GetDataArgs {
	return messages.GetDataArgs{Table: demo.Trade, StartTS: deployEnd.Add(-48 * time.Hour), EndTS: deployEnd.Add(time.Hour),
		GroupBy: []string{demo.LabelKey, "sym"}, Agg: []messages.AggSpec{{Name: "n", Func: messages.AggCount}, {Name: "size", Func: messages.AggSum, Column: "size"}},
		SortCols: []string{demo.LabelKey, "sym"}}
}

// want is the answer computed directly on all the data of the given regions.
func (d *deployment) want(args messages.GetDataArgs, regions ...string) messages.Table {
	d.t.Helper()
	st, err := d.fleet.LoadAll()
	if err != nil {
		d.t.Fatal(err)
	}
	if len(regions) > 0 {
		args.Labels = messages.LabelSelector{demo.LabelKey: regions}
	}
	p, err := st.Execute(args, time.Time{}, time.Time{})
	if err != nil {
		d.t.Fatal(err)
	}
	w, err := merge.Merge(args, []merge.Partial{p})
	if err != nil {
		d.t.Fatal(err)
	}
	return w
}

// request is a getData request with its own id and reply subject.
type depRequest struct {
	id    string
	reply string
	msg   *nats.Msg
}

func (d *deployment) newRequest(id string, args messages.GetDataArgs, scope messages.Scope, timeout time.Duration) depRequest {
	d.t.Helper()
	payload, err := messages.Encode(args)
	if err != nil {
		d.t.Fatal(err)
	}
	hdr := messages.RequestHeader{API: subjects.APIGetData, Scope: scope, Opts: messages.Opts{TimeoutMS: timeout.Milliseconds()}}
	body, err := messages.Request{Header: hdr, Payload: payload, Content: messages.ContentMsgpack}.Encode()
	if err != nil {
		d.t.Fatal(err)
	}
	h := nats.Header{}
	messages.SetString(h, messages.HdrContentType, string(messages.ContentMsgpack))
	messages.SetString(h, messages.HdrRequestID, id)
	reply := "_INBOX.sgtest." + id
	return depRequest{id: id, reply: reply, msg: &nats.Msg{Subject: d.s.GWAPI(subjects.APIGetData), Reply: reply, Header: h, Data: body}}
}

// answers collects every answer sent to the test's reply subjects, by
// request id, so that a second answer is seen.
type depAnswers struct {
	mu   sync.Mutex
	got  map[string][]*nats.Msg
	more chan struct{}
	sub  *nats.Subscription
}

func (d *deployment) collect() *depAnswers {
	d.t.Helper()
	a := &depAnswers{got: map[string][]*nats.Msg{}, more: make(chan struct{}, 1)}
	sub, err := d.nc.Subscribe("_INBOX.sgtest.*", func(m *nats.Msg) {
		id := m.Subject[strings.LastIndexByte(m.Subject, '.')+1:]
		a.mu.Lock()
		a.got[id] = append(a.got[id], m)
		a.mu.Unlock()
		select {
		case a.more <- struct{}{}:
		default:
		}
	})
	if err != nil {
		d.t.Fatal(err)
	}
	if err := sub.SetPendingLimits(-1, -1); err != nil {
		d.t.Fatal(err)
	}
	a.sub = sub
	if err := d.nc.Flush(); err != nil {
		d.t.Fatal(err)
	}
	d.t.Cleanup(func() { _ = sub.Unsubscribe() })
	return a
}

func (d *deployment) send(r depRequest) {
	d.t.Helper()
	if err := d.nc.PublishMsg(r.msg); err != nil {
		d.t.Fatal(err)
	}
}

// wait returns the first answer of id, waiting at most limit.
func (a *depAnswers) wait(t testing.TB, id string, limit time.Duration) *nats.Msg {
	t.Helper()
	return a.waitN(t, id, 1, limit)[0]
}

// waitN returns the first n messages to id, waiting at most limit.
func (a *depAnswers) waitN(t testing.TB, id string, n int, limit time.Duration) []*nats.Msg {
	t.Helper()
	deadline := time.After(limit)
	for {
		a.mu.Lock()
		ms := a.got[id]
		a.mu.Unlock()
		if len(ms) >= n {
			return ms
		}
		select {
		case <-a.more:
		case <-deadline:
			t.Fatalf("%d messages to %s within %s, want %d", len(ms), id, limit, n)
		}
	}
}

func (a *depAnswers) count(id string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.got[id])
}

// status decodes an answer's status and, when OK, its table.
func depStatus(t testing.TB, m *nats.Msg) (messages.Status, messages.Table) {
	t.Helper()
	if m.Header.Get(messages.HdrChunkCount) != "" {
		t.Fatalf("unexpected chunked answer")
	}
	resp, err := messages.DecodeResponse(m.Header, m.Data)
	if err != nil {
		t.Fatalf("decode answer: %v", err)
	}
	var tbl messages.Table
	if resp.Header.Status.IsOK() {
		if err := msgpack.Unmarshal(resp.Payload, &tbl); err != nil {
			t.Fatalf("decode table: %v", err)
		}
	}
	if id := m.Header.Get(messages.HdrRequestID); id != resp.Header.RequestID {
		t.Fatalf("answer header id %q, body id %q", id, resp.Header.RequestID)
	}
	return resp.Header.Status, tbl
}

func depTablesEqual(t *testing.T, got, want messages.Table) bool {
	t.Helper()
	g, err := msgpack.Marshal(&got)
	if err != nil {
		t.Fatal(err)
	}
	w, err := msgpack.Marshal(&want)
	if err != nil {
		t.Fatal(err)
	}
	return bytes.Equal(g, w)
}

func (d *deployment) proc(name string) *process {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.procs[name]
}
