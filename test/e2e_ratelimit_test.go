package test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sg-project/sg/messages"
	"github.com/sg-project/sg/services/dap"
	"github.com/sg-project/sg/services/dap/demo"
	"github.com/sg-project/sg/services/dap/ratelimit"
)

// gate is a remote endpoint that refuses its next calls with a pause.
type gate struct {
	key    string
	refuse atomic.Int64
	pause  atomic.Int64
	calls  atomic.Int64
}

func (g *gate) arm(n int, pause time.Duration) { g.pause.Store(int64(pause)); g.refuse.Store(int64(n)) }

func (g *gate) call(ctx context.Context, _ int) error {
	g.calls.Add(1)
	if g.refuse.Add(-1) >= 0 {
		return &ratelimit.Error{Endpoint: g.key, Delay: time.Duration(g.pause.Load())}
	}
	return nil
}

// Issue 12 end to end: the eu DAPs of replica 0 call endpoint remote-0,
// those of replica 1 remote-1, each through its rate-limit actor. When both
// endpoints ask for a pause, the request waits for it and is answered
// right, with no retry; when one does, the other replica takes the work;
// a deadline inside a pause names it.
func TestDownstreamRateLimitEndToEnd(t *testing.T) {
	sys := startSystem(t, systemOptions{})
	cfg := demoFleetConfig(sys, 300)
	cfg.Replicas = 2
	info, err := dap.DemoFleetInfo(cfg)
	if err != nil {
		t.Fatal(err)
	}
	m, err := ratelimit.NewMetrics(sys.reg)
	if err != nil {
		t.Fatal(err)
	}
	actors := ratelimit.NewRegistry(sys.ctx, dap.SourceActorConfig(m, sys.log), 0)
	gates := []*gate{{key: "remote-0"}, {key: "remote-1"}}
	n := 0
	for _, sh := range info.Shards {
		if sh.Shard.Region != "eu" {
			continue
		}
		store, err := info.Store(sh)
		if err != nil {
			t.Fatal(err)
		}
		g := gates[sh.Shard.Replica]
		a, err := actors.Actor(g.key)
		if err != nil {
			t.Fatal(err)
		}
		c := sh.Config
		c.Source = dap.RemoteSource{Actor: a, Call: g.call, Inner: dap.EngineSource{Store: store}}
		sys.startDAP(c)
		n++
	}
	sys.waitDAPs(n)
	args := messages.GetDataArgs{Table: demo.Trade, Labels: messages.LabelSelector{"region": {"eu"}},
		GroupBy: []string{"sym"}, Agg: []messages.AggSpec{{Name: "n", Func: messages.AggCount}}}
	want := expected(t, info, args)
	retries := sys.counter("sg_rc_retries_total")

	// Both endpoints ask for a 1 s pause: the portions wait, then run.
	const pause = time.Second
	gates[0].arm(1, pause)
	gates[1].arm(1, pause)
	began := time.Now()
	resp, got := sys.getData(args, messages.Opts{TimeoutMS: 20000})
	if !resp.Header.Status.IsOK() {
		t.Fatalf("both paused: %+v", resp.Header.Status)
	}
	sameTable(t, got, want)
	if d := time.Since(began); d < pause {
		t.Fatalf("answered in %s, inside the %s pause", d, pause)
	}
	if r := sys.counter("sg_rc_retries_total"); r != retries {
		t.Fatalf("%v retries counted, want none", r-retries)
	}
	if p := sys.counter(ratelimit.MetricPauses); p < 2 {
		t.Fatalf("%s = %v, want a pause per endpoint", ratelimit.MetricPauses, p)
	}

	// remote-0 asks for a minute: replica 1 takes the work at once.
	gates[0].arm(1<<30, time.Minute)
	calls0 := gates[0].calls.Load()
	began = time.Now()
	resp, got = sys.getData(args, messages.Opts{TimeoutMS: 20000})
	if !resp.Header.Status.IsOK() {
		t.Fatalf("one paused: %+v", resp.Header.Status)
	}
	sameTable(t, got, want)
	t.Logf("with remote-0 paused for a minute: answered in %s (remote-0 called %d times)", time.Since(began), gates[0].calls.Load()-calls0)
	if d := time.Since(began); d > 15*time.Second {
		t.Fatalf("answered in %s: the replica did not take the work", d)
	}
	if r := sys.counter("sg_rc_retries_total"); r != retries {
		t.Fatalf("%v retries counted, want none", r-retries)
	}

	// remote-1 asks for a minute too; a 1 s deadline falls inside the pause.
	gates[1].arm(1<<30, time.Minute)
	resp, _ = sys.getData(args, messages.Opts{TimeoutMS: 1000})
	st := resp.Header.Status
	if st.RC != messages.CodeTimeout || !strings.Contains(st.AI, "Paused by downstream rate limit until ") {
		t.Fatalf("deadline inside the pause: %+v", st)
	}
}
