package rc

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/rs/zerolog"

	"github.com/sg-project/sg/messages"
	"github.com/sg-project/sg/services/agg"
	"github.com/sg-project/sg/services/dap"
	"github.com/sg-project/sg/services/dap/engine"
	"github.com/sg-project/sg/test/natstest"
)

// gatedSource answers from a small engine store once the gate opens, so a test can
// act while a portion runs.
type gatedSource struct {
	gate  chan struct{}
	store *engine.Store
}

func (g *gatedSource) Execute(ctx context.Context, api string, args messages.Args, l messages.LabelSet, r messages.TimeRange) ([]byte, error) {
	select {
	case <-g.gate:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return dap.EngineSource{Store: g.store}.Execute(ctx, api, args, l, r)
}

func tradeStore(t *testing.T, rows int) *engine.Store {
	t.Helper()
	def := engine.TableDef{Name: "trade", Columns: []messages.ColumnSpec{
		{Name: "time", Type: messages.TypeTimestamp}, {Name: "size", Type: messages.TypeInt}}}
	s := engine.NewStore()
	if err := s.Create(def); err != nil {
		t.Fatal(err)
	}
	tb := messages.NewTable(def.Columns)
	for i := range rows {
		if err := tb.AppendRow(time.Unix(int64(i), 0).UTC(), int64(i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Append("trade", tb); err != nil {
		t.Fatal(err)
	}
	return s
}

// runAgg runs an Agg until its context ends or the test does.
func runAgg(t *testing.T, nc *nats.Conn, id string) (stop func()) {
	t.Helper()
	// 100 ms: a loaded machine (-race, 2 cores) stalls a process for tens of
	// milliseconds, and three missed beats make a live Agg lost.
	a, err := agg.New(agg.Config{ID: id, NC: nc, Log: zerolog.Nop(), Heartbeat: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := a.Run(ctx); err != nil {
			t.Errorf("agg %s: %v", id, err)
		}
	})
	<-a.Ready()
	stop = func() { cancel(); wg.Wait() }
	t.Cleanup(stop)
	return stop
}

func runDAPOn(t *testing.T, f *fixture, src dap.Source, concurrency int) {
	t.Helper()
	d, err := dap.New(dap.Config{ID: "d1", Labels: messages.LabelSet{"region": "eu"}, Tier: messages.TierRDB,
		Tables: []messages.TableInfo{{Name: "trade", Kind: messages.TablePartitioned}}, Concurrency: concurrency,
		NC: f.nc, Subjects: f.s, Log: zerolog.Nop(), Source: src})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := d.Run(ctx); err != nil {
			t.Errorf("dap: %v", err)
		}
	})
	t.Cleanup(func() { cancel(); wg.Wait() })
	f.waitDAPs(1)
}

func nextDispatch(t *testing.T, sub *nats.Subscription) messages.PortionDispatch {
	t.Helper()
	p, err := messages.DecodeValid[messages.PortionDispatch](next(t, sub).Data)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// Two Aggs; the one merging a request dies mid-request without a word (its connection
// drops). The RC notices the silence, drives the request again on the other Agg, and
// the caller gets the right answer, not a timeout.
func TestDeadAggRequestDrivenOnTheOther(t *testing.T) {
	f := startRC(t, func(c *Config) { c.AggIDs = []string{"agg-1", "agg-2"} })
	ownConn := natstest.Connect(t, f.srv) // agg-1's own connection, to kill it
	runAgg(t, ownConn, "agg-1")
	runAgg(t, f.nc, "agg-2")
	src := &gatedSource{gate: make(chan struct{}), store: tradeStore(t, 5)}
	portions, _ := f.nc.SubscribeSync(f.s.DAPPortion("d1"))
	runDAPOn(t, f, src, 1)

	replies, _ := f.nc.SubscribeSync("reply.q1")
	f.submit("q1", time.Minute, "reply.q1")
	if p := nextDispatch(t, portions); p.AggID != "agg-1" {
		t.Fatalf("first dispatch for Agg %s, want agg-1", p.AggID)
	}
	ownConn.Close() // agg-1 dies: no more heartbeats, nothing it held survives
	died := time.Now()
	// The RC notices, stops the portion that works for the dead Agg (the DAP has one
	// slot: the new attempt could not run before) and sends the new attempt.
	p := nextDispatch(t, portions)
	if p.AggID != "agg-2" || p.Attempt != 1 {
		t.Fatalf("re-drive %+v", p)
	}
	t.Logf("request driven again on agg-2 %v after agg-1 died", time.Since(died))
	close(src.gate)
	m := next(t, replies)
	resp, err := messages.DecodeResponse(m.Header, m.Data)
	if err != nil {
		t.Fatal(err)
	}
	if !resp.Header.Status.IsOK() {
		t.Fatalf("status %+v", resp.Header.Status)
	}
	var tb messages.Table
	if err := messages.Decode(resp.Payload, &tb); err != nil {
		t.Fatal(err)
	}
	if tb.NumRows() != 5 {
		t.Fatalf("%d rows, want 5", tb.NumRows())
	}
}

// The only Agg stops: its last heartbeat says so, and the request it held is answered
// at once with a clear error rather than left to time out.
func TestLastAggStoppingAnswersAtOnce(t *testing.T) {
	f := startRC(t)
	stop := runAgg(t, f.nc, "agg-1")
	src := &gatedSource{gate: make(chan struct{}), store: tradeStore(t, 1)}
	portions, _ := f.nc.SubscribeSync(f.s.DAPPortion("d1"))
	runDAPOn(t, f, src, 1)
	replies, _ := f.nc.SubscribeSync("reply.q1")
	f.submit("q1", time.Minute, "reply.q1")
	nextDispatch(t, portions)
	stop()
	st, err := messages.ReadStatus(next(t, replies).Header)
	if err != nil {
		t.Fatal(err)
	}
	if st.RC != messages.CodeNoResources || st.AI != "Agg agg-1 was lost and no other Agg is connected" {
		t.Fatalf("status %+v", st)
	}
}

// waitCounter waits (bounded) until the counter reaches n.
func waitCounter(t *testing.T, reg *prometheus.Registry, name string, n float64) {
	t.Helper()
	if waitMetric(t, reg, name, func(m *dto.Metric) bool { return m.GetCounter().GetValue() >= n }) == nil {
		t.Fatalf("%s did not reach %v within 5s", name, n)
	}
}

// waitMetric waits (bounded: 5 s; a metric has no event to wait on) until
// the first metric named name satisfies ok, and returns it; nil if none did.
func waitMetric(t *testing.T, reg *prometheus.Registry, name string, ok func(*dto.Metric) bool) *dto.Metric {
	t.Helper()
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() == name && len(mf.GetMetric()) > 0 && ok(mf.GetMetric()[0]) {
				return mf.GetMetric()[0]
			}
		}
	}
	return nil
}

// Hostile bytes on the new subjects change nothing: a heartbeat that does not decode,
// one whose id is not its subject's, one from an Agg the RC is not configured with, a
// cancel without an id or with a wildcard id. The RC still serves, with agg-1.
func TestAggHeartbeatAndCancelHostileInput(t *testing.T) {
	reg := prometheus.NewRegistry()
	f := startRC(t, func(c *Config) { c.Registry = reg })
	portions, _ := f.nc.SubscribeSync(f.s.DAPPortion("d1"))
	f.registerDAP("d1", true)
	hb := func(id string) []byte {
		b, err := messages.Encode(&messages.AggHeartbeat{V: messages.AggVersion, AggID: id, StartedAt: 1, IntervalMS: 1, Stopping: true})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	for _, m := range []*nats.Msg{
		{Subject: f.s.AggHeartbeat("agg-1"), Data: []byte{0xdf, 0xff, 0xff, 0xff, 0xff}},
		{Subject: f.s.AggHeartbeat("agg-1"), Data: hb("agg-2")}, // says it is someone else, stopping
		{Subject: f.s.AggHeartbeat("agg-9"), Data: hb("agg-9")}, // not ours
		{Subject: f.s.RCCancel("rc-1")},                         // no id
		{Subject: f.s.RCCancel("rc-1"), Header: nats.Header{messages.HdrRequestID: {"q.*"}}},
	} {
		if err := f.nc.PublishMsg(m); err != nil {
			t.Fatal(err)
		}
	}
	waitCounter(t, reg, "sg_rc_bad_messages_total", 4)
	f.submit("q1", time.Minute, "reply.q1")
	if p := nextDispatch(t, portions); p.AggID != "agg-1" {
		t.Fatalf("dispatch %+v", p)
	}
}
