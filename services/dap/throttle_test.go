package dap

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"github.com/sg-project/sg/messages"
	"github.com/sg-project/sg/services/dap/ratelimit"
)

// A source whose endpoint asks for a pause: the DAP answers the portion
// THROTTLED to the RC (pause and endpoint key in headers), sends nothing to
// the Agg, and while the pause lasts answers the next portion the same way
// without calling the endpoint.
func TestThrottledPortionIsAnsweredToTheRC(t *testing.T) {
	nc := startNATS(t, 0)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	actor := ratelimit.Start(ctx, "ads.example.com", SourceActorConfig(nil, zerolog.Nop()))
	var calls atomic.Int32
	src := RemoteSource{
		Actor: actor,
		Call: func(ctx context.Context, slot int) error {
			calls.Add(1)
			return &ratelimit.Error{Endpoint: "ads.example.com", Delay: 90 * time.Second}
		},
		Inner: funcSource(func(ctx context.Context, api string, args messages.Args) ([]byte, error) {
			t.Error("the inner source ran although the endpoint refused")
			return nil, nil
		}),
	}
	cfg := testConfig(nc, src)
	completions := subscribe(t, nc, cfg.Subjects.RCCompletion("rc1"))
	partials := subscribe(t, nc, cfg.Subjects.AggPartial("agg1"))
	started(t, cfg)

	for i, id := range []messages.PortionID{1, 2} {
		send(t, nc, cfg.ID, dispatch(id, map[string]any{"table": "trade"}))
		m := next(t, completions)
		c, err := messages.DecodeValid[messages.PortionCompletion](m.Data)
		if err != nil {
			t.Fatal(err)
		}
		if c.PortionID != id || c.Outcome != messages.OutcomeError || c.Code != messages.CodeRateLimited || c.PartialSent {
			t.Fatalf("completion %d: %+v; want RATE_LIMITED, no partial", i, c)
		}
		key, d, ok, err := messages.ReadThrottle(m.Header, time.Hour)
		if err != nil || !ok || key != "ads.example.com" || d <= 0 || d > 90*time.Second || (i == 0 && d != 90*time.Second) {
			t.Fatalf("completion %d headers %v: key %q pause %v %v %v", i, m.Header, key, d, ok, err)
		}
		if rc := m.Header.Get(messages.HdrRC); rc != "50" {
			t.Fatalf("completion %d: %s=%q, want 50 (RATE_LIMITED)", i, messages.HdrRC, rc)
		}
	}
	if n := calls.Load(); n != 1 {
		t.Fatalf("endpoint called %d times, want once: the second portion came inside the pause", n)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	if n, _, _ := partials.Pending(); n != 0 {
		t.Fatalf("%d partial results sent to the Agg, want none", n)
	}
}

// The sg run --throttle demo: past the endpoint's burst, a call is refused
// with the platform's first pause (1.5 s at a tenth of the seed's time),
// and the next one inside the pause fails fast; the pause is counted.
func TestThrottleDemo(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	reg := prometheus.NewRegistry()
	wrap, err := ThrottleDemo(ctx, 2, reg, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	inner := funcSource(func(ctx context.Context, api string, args messages.Args) ([]byte, error) {
		return []byte{0xc3}, nil
	})
	src := wrap(DemoShard{}, inner)
	var refused *ratelimit.Error
	for i := 0; i < 100 && refused == nil; i++ {
		_, err := src.Execute(ctx, "ping", messages.Args{}, nil, messages.Unbounded)
		if err != nil && !errors.As(err, &refused) {
			t.Fatalf("call %d: %v", i, err)
		}
	}
	if refused == nil || refused.Endpoint != "demo-remote-0" || refused.Delay != 1500*time.Millisecond {
		t.Fatalf("refusal %+v: want demo-remote-0 asking 1.5s", refused)
	}
	if _, err := src.Execute(ctx, "ping", messages.Args{}, nil, messages.Unbounded); !errors.Is(err, ratelimit.ErrRateLimited) {
		t.Fatalf("inside the pause: %v", err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, mf := range mfs {
		if mf.GetName() == ratelimit.MetricPauses && mf.GetMetric()[0].GetCounter().GetValue() == 1 {
			found = true
		}
	}
	if !found {
		t.Fatalf("%s not 1 in %v", ratelimit.MetricPauses, mfs)
	}
}

// A portion that ran without an error costs no allocation to check for a
// throttle (the check ran on every portion and allocated on each).
func TestThrottleCheckAllocatesNothingWithoutAnError(t *testing.T) {
	var d DAP
	p := dispatch(1, true)
	if n := testing.AllocsPerRun(100, func() { d.throttled(&p, nil, 0) }); n != 0 {
		t.Fatalf("%.0f allocations per portion without an error", n)
	}
}
