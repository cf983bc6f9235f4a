package test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/sg-project/sg/messages"
	"github.com/sg-project/sg/services/dap"
	"github.com/sg-project/sg/services/dap/engine"
	"github.com/sg-project/sg/test/natstest"
)

// gatedSource wraps a source: each Execute reports that it started and waits
// until the test opens the gate.
type gatedSource struct {
	inner   dap.Source
	started chan string
	gate    chan struct{}
	once    sync.Once
}

func newGatedSource(inner dap.Source) *gatedSource {
	return &gatedSource{inner: inner, started: make(chan string, 16), gate: make(chan struct{})}
}

func (g *gatedSource) Execute(ctx context.Context, api string, args messages.Args, labels messages.LabelSet, rng messages.TimeRange) ([]byte, error) {
	g.started <- rng.String()
	select {
	case <-g.gate:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return g.inner.Execute(ctx, api, args, labels, rng)
}

func (g *gatedSource) open() { g.once.Do(func() { close(g.gate) }) }

// oneDAP is a single rdb DAP for region eu over the demo's trade data.
// It beats at the deployed period (2 s), not the 200 ms it had: the RC drops a
// DAP it has not heard from for three periods and requeues its portions, and on
// a loaded machine a 600 ms stall did (TestMessagesPerSmallRequest counted 102
// portions for 100 requests). No test of it is about losing a DAP.
func oneDAP(src dap.Source, pv uint64) dap.Config {
	return dap.Config{ID: "d1", RCID: "rc-1", Labels: messages.LabelSet{"region": "eu"}, Tier: messages.TierRDB,
		Tables: []messages.TableInfo{{Name: "trade", Kind: messages.TablePartitioned}}, PurviewVersion: pv,
		ReferenceVintage: 1, Concurrency: 1, Heartbeat: dap.DefaultHeartbeat, Source: src}
}

func engineSource(t testing.TB, sys *system) (dap.EngineSource, dap.DemoFleet) {
	t.Helper()
	fleet, err := dap.DemoFleetInfo(demoFleetConfig(sys, 2000))
	if err != nil {
		t.Fatal(err)
	}
	st := engine.NewStore()
	if err := fleet.Data.Load(st, "eu", fleet.Layout.Start, fleet.Layout.End, false); err != nil {
		t.Fatal(err)
	}
	return dap.EngineSource{Store: st}, fleet
}

type answer struct {
	resp messages.Response
	err  error
}

func (sys *system) getDataAsync(args messages.GetDataArgs, opts messages.Opts) <-chan answer {
	ch := make(chan answer, 1)
	go func() {
		ctx, cancel := context.WithTimeout(sys.ctx, 60*time.Second)
		defer cancel()
		resp, err := sys.client.Do(ctx, "getData", args, opts)
		ch <- answer{resp, err}
	}()
	return ch
}

// A busy DAP queues the next request, which runs when the first completes.
func TestBusyDAPQueuesTheNextRequest(t *testing.T) {
	sys := startSystem(t, systemOptions{})
	src, fleet := engineSource(t, sys)
	gated := newGatedSource(src)
	sys.startDAP(oneDAP(gated, 1))
	sys.waitDAPs(1)

	args := messages.GetDataArgs{Table: "trade", GroupBy: []string{"sym"}, Agg: []messages.AggSpec{{Name: "n", Func: messages.AggCount}}}
	first := sys.getDataAsync(args, messages.Opts{})
	natstest.Receive(t, gated.started, "the first request to start", 20*time.Second)
	second := sys.getDataAsync(args, messages.Opts{})
	// The RC holds the second request in its queue: the DAP is busy.
	sys.waitQueued(1)
	select {
	case r := <-gated.started:
		t.Fatalf("second request started while the DAP was busy: %s", r)
	default:
	}
	gated.open()
	want := expected(t, fleet, withLabels(args, "eu"))
	for i, ch := range []<-chan answer{first, second} {
		a := natstest.Receive(t, ch, "an answer", 20*time.Second)
		if a.err != nil || !a.resp.Header.Status.IsOK() {
			t.Fatalf("answer %d: %v %+v", i, a.err, a.resp.Header.Status)
		}
		var got messages.Table
		if err := msgpack.Unmarshal(a.resp.Payload, &got); err != nil {
			t.Fatal(err)
		}
		sameTable(t, got, want)
	}
}

func withLabels(a messages.GetDataArgs, region string) messages.GetDataArgs {
	a.Labels = messages.LabelSelector{"region": {region}}
	return a
}

// A purview version change between dispatch and execution gives RETRY, and
// still the right answer. The RC's view is made stale as a delayed status
// event would leave it: the DAP moved to purview version 2, and a
// registration still saying 1 reaches the RC after that.
func TestPurviewChangeBetweenDispatchAndExecutionRetries(t *testing.T) {
	sys := startSystem(t, systemOptions{})
	src, fleet := engineSource(t, sys)
	cfg := oneDAP(src, 2)
	cfg.Heartbeat = time.Hour // no heartbeat corrects the RC's view first
	// The DAP registers at start and again on first seeing the RC; the
	// stale registration must come after both. They all leave on the one
	// connection the test shares, so order is kept once both are seen.
	regs, err := sys.nc.SubscribeSync(sys.s.DAPRegister("d1"))
	if err != nil {
		t.Fatal(err)
	}
	sys.startDAP(cfg)
	for i := 0; i < 2; i++ {
		if _, err := regs.NextMsg(10 * time.Second); err != nil {
			t.Fatalf("DAP registration %d: %v", i+1, err)
		}
	}
	sys.waitDAPs(1)
	stale, err := messages.Encode(&messages.DAPRegistration{V: messages.DAPVersion, DAPID: "d1", RCID: "rc-1",
		Labels: cfg.Labels, Tier: cfg.Tier, Purview: messages.Unbounded, Tables: cfg.Tables,
		PurviewVersion: 1, ReferenceVintage: 1, Available: true, Concurrency: 1})
	if err != nil {
		t.Fatal(err)
	}
	args := messages.GetDataArgs{Table: "trade", GroupBy: []string{"sym"}, Agg: []messages.AggSpec{{Name: "n", Func: messages.AggCount}}}
	// Until the RC holds the stale view (getMeta reports it): the DAP's own
	// re-registration on first seeing the RC may overtake the first try.
	deadline := time.Now().Add(10 * time.Second)
	for {
		if err := sys.nc.Publish(sys.s.DAPRegister("d1"), stale); err != nil {
			t.Fatal(err)
		}
		if sys.metaPurviewVersion("d1", 1) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("RC never took the stale registration")
		}
	}
	retries := sys.counter("sg_rc_retries_total")
	resp, got := sys.getData(args, messages.Opts{})
	if !resp.Header.Status.IsOK() {
		t.Fatalf("status %+v", resp.Header.Status)
	}
	if n := sys.counter("sg_rc_retries_total") - retries; n != 1 {
		t.Fatalf("%v retries, want 1", n)
	}
	sameTable(t, got, expected(t, fleet, withLabels(args, "eu")))
}

// metaDAP is a DAP as the RC's getMeta shows it.
type metaDAP struct {
	ID             string `msgpack:"id"`
	PurviewVersion uint64 `msgpack:"purviewVersion"`
	Available      bool   `msgpack:"available"`
}

// metaDAP asks getMeta for the RC's view of one DAP (ok false: not known).
func (sys *system) metaDAP(dapID string) (metaDAP, bool) {
	sys.t.Helper()
	ctx, cancel := context.WithTimeout(sys.ctx, 5*time.Second)
	defer cancel()
	resp, err := sys.client.Do(ctx, "getMeta", nil, messages.Opts{})
	if err != nil || !resp.Header.Status.IsOK() {
		sys.t.Fatalf("getMeta: %v %+v", err, resp.Header.Status)
	}
	var meta struct {
		DAPs []metaDAP `msgpack:"daps"`
	}
	if err := msgpack.Unmarshal(resp.Payload, &meta); err != nil {
		sys.t.Fatal(err)
	}
	for _, d := range meta.DAPs {
		if d.ID == dapID {
			return d, true
		}
	}
	return metaDAP{}, false
}

func (sys *system) metaPurviewVersion(dapID string, pv uint64) bool {
	d, ok := sys.metaDAP(dapID)
	return ok && d.PurviewVersion == pv
}

func (sys *system) metaAvailable(dapID string, avail bool) bool {
	d, ok := sys.metaDAP(dapID)
	return ok && d.Available == avail
}

// A timeout answers with the seed's message.
func TestTimeoutAnswersWithTheSeedMessage(t *testing.T) {
	sys := startSystem(t, systemOptions{})
	src, _ := engineSource(t, sys)
	d := sys.startDAP(oneDAP(src, 1))
	sys.waitDAPs(1)
	d.SetAvailable(false, "end of day reload")
	deadline := time.Now().Add(10 * time.Second)
	for !sys.metaAvailable("d1", false) {
		if time.Now().After(deadline) {
			t.Fatal("RC never saw the DAP unavailable")
		}
	}
	resp, _ := sys.getData(messages.GetDataArgs{Table: "trade"}, messages.Opts{TimeoutMS: 300})
	st := resp.Header.Status
	if st.RC != messages.CodeTimeout || st.AC != messages.CodeErr {
		t.Fatalf("status %+v", st)
	}
	want := `Request timed out, [rc=rc-1;status="allocating";queue="[labels={region:eu};startTS=-inf;endTS=+inf;reason=\"Unavailable for unspecified reasons\";dap=[d1]]"]`
	if st.AI != want {
		t.Fatalf("ai\n got: %s\nwant: %s", st.AI, want)
	}
	if !strings.HasPrefix(st.AI, "Request timed out, [rc=") {
		t.Fatal("not the seed's form")
	}
}
