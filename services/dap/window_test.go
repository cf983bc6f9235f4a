package dap

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"
	"github.com/sg-project/sg/messages"
	"github.com/sg-project/sg/services/agg/merge"
	"github.com/sg-project/sg/services/dap/engine"
	"github.com/sg-project/sg/services/dap/ratelimit"
	"github.com/sg-project/sg/subjects"
)

// grant sends the Agg's credit for p's windows.
func grant(t *testing.T, nc *nats.Conn, p messages.PortionDispatch, windows uint32, stop bool) {
	t.Helper()
	c := messages.PartialCredit{V: messages.PortionVersion, RequestID: p.RequestID, PortionID: p.PortionID, Attempt: p.Attempt,
		AggID: p.AggID, Windows: windows, Stop: stop}
	b, err := messages.Encode(&c)
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Publish(subjects.Default().DAPCredit("dap-eu-hdb-0"), b); err != nil {
		t.Fatal(err)
	}
}

func windowArgs() messages.GetDataArgs {
	return messages.GetDataArgs{Table: "trade", StartTS: t0, EndTS: t0.Add(2 * time.Hour), Columns: []string{"time", "sym", "price"}}
}

// A row partial above one window goes as windows, in order, each sent only
// under credit, which together are the partial; the completion counts them.
// A source behind a rate-limited endpoint (RemoteSource) sends them alike,
// after one call through its endpoint's actor.
func TestLargePartialGoesInWindowsUnderCredit(t *testing.T) {
	t.Run("engine", func(t *testing.T) {
		store := demoStore(t)
		testLargePartialInWindows(t, store, EngineSource{Store: store})
	})
	t.Run("remote", func(t *testing.T) {
		store := demoStore(t)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		var calls atomic.Int32
		src := RemoteSource{Actor: ratelimit.Start(ctx, "ads.example.com", SourceActorConfig(nil, zerolog.Nop())),
			Call:  func(context.Context, int) error { calls.Add(1); return nil },
			Inner: EngineSource{Store: store}}
		testLargePartialInWindows(t, store, src)
		if n := calls.Load(); n != 1 {
			t.Fatalf("the endpoint was called %d times for one portion, want 1", n)
		}
	})
}

func testLargePartialInWindows(t *testing.T, store *engine.Store, src Source) {
	nc := startNATS(t, 0)
	cfg := testConfig(nc, src)
	cfg.PartialWindow = 4 << 10
	started(t, cfg)
	partials := subscribe(t, nc, subjects.Default().AggPartial("agg1"))
	completions := subscribe(t, nc, subjects.Default().RCCompletion("rc1"))
	args := windowArgs()
	p := dispatch(1, args)
	send(t, nc, "dap-eu-hdb-0", p)

	want, err := store.Execute(args, time.Time{}, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	granted := uint32(messages.InitialPartialCredit)
	var got []string
	var wins uint32
	for more := true; more; {
		pr := nextAs[messages.PartialResult](t, partials)
		if !pr.Status.IsOK() || pr.Window != wins || pr.Window >= granted {
			t.Fatalf("window %d (status %+v), want %d under a credit of %d", pr.Window, pr.Status, wins, granted)
		}
		if len(pr.Payload) > cfg.PartialWindow {
			t.Fatalf("window %d of %d bytes, above %d", pr.Window, len(pr.Payload), cfg.PartialWindow)
		}
		part, err := merge.DecodePartial(pr.Payload)
		if err != nil {
			t.Fatal(err)
		}
		for i := range part.Rows.NumRows() {
			got = append(got, fmt.Sprint(part.Times[i], part.Rows.Col("price").Value(i)))
		}
		wins++
		more = pr.More
		// The Agg's credit as it uses windows up: one more for each.
		granted = wins + messages.InitialPartialCredit
		grant(t, nc, p, granted, false)
	}
	if wins < 3 || len(got) != want.Rows.NumRows() {
		t.Fatalf("%d rows in %d windows, want %d rows in several", len(got), wins, want.Rows.NumRows())
	}
	for i := range got {
		if w := fmt.Sprint(want.Times[i], want.Rows.Col("price").Value(i)); got[i] != w {
			t.Fatalf("row %d: %s, want %s", i, got[i], w)
		}
	}
	c := nextAs[messages.PortionCompletion](t, completions)
	if c.Outcome != messages.OutcomeOK || !c.PartialSent || c.Rows != int64(want.Rows.NumRows()) {
		t.Fatalf("completion %+v", c)
	}
}

// Stop ends the windows early; the portion completes OK. Without credit the
// DAP waits until the deadline, which ends the windows with TIMEOUT.
func TestWindowsStopAndDeadline(t *testing.T) {
	nc := startNATS(t, 0)
	cfg := testConfig(nc, EngineSource{Store: demoStore(t)})
	cfg.PartialWindow = 4 << 10
	started(t, cfg)
	partials := subscribe(t, nc, subjects.Default().AggPartial("agg1"))
	completions := subscribe(t, nc, subjects.Default().RCCompletion("rc1"))

	p := dispatch(1, windowArgs())
	send(t, nc, "dap-eu-hdb-0", p)
	for i := range messages.InitialPartialCredit {
		if pr := nextAs[messages.PartialResult](t, partials); pr.Window != uint32(i) || !pr.More {
			t.Fatalf("window %d more %v, want %d of more", pr.Window, pr.More, i)
		}
	}
	grant(t, nc, p, 100, true)
	c := nextAs[messages.PortionCompletion](t, completions)
	if c.Outcome != messages.OutcomeOK || c.Rows == 0 {
		t.Fatalf("completion after Stop %+v", c)
	}

	q := dispatch(2, windowArgs())
	q.Deadline = time.Now().Add(300 * time.Millisecond).UnixNano()
	send(t, nc, "dap-eu-hdb-0", q)
	// No credit: the deadline (the clock, the condition under test) ends it,
	// after the windows the initial credit allows (fewer on a machine slow
	// enough that the deadline comes first).
	pr := nextAs[messages.PartialResult](t, partials)
	for n := 1; pr.More; n++ {
		if n > messages.InitialPartialCredit {
			t.Fatalf("window %d sent without credit", pr.Window)
		}
		pr = nextAs[messages.PartialResult](t, partials)
	}
	if pr.Status.RC != messages.CodeTimeout {
		t.Fatalf("after the deadline: %+v", pr)
	}
	if c := nextAs[messages.PortionCompletion](t, completions); c.Code != messages.CodeTimeout {
		t.Fatalf("completion %+v", c)
	}
}

// A ping behind a rate-limited source that can send windows calls the
// endpoint once: the window path declines other APIs before the call.
func TestRemoteSourcePingCallsTheEndpointOnce(t *testing.T) {
	nc := startNATS(t, 0)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var calls atomic.Int32
	src := RemoteSource{Actor: ratelimit.Start(ctx, "ads.example.com", SourceActorConfig(nil, zerolog.Nop())),
		Call:  func(context.Context, int) error { calls.Add(1); return nil },
		Inner: EngineSource{Store: demoStore(t)}}
	cfg := testConfig(nc, src)
	started(t, cfg)
	completions := subscribe(t, nc, subjects.Default().RCCompletion("rc1"))
	p := dispatch(1, map[string]any{})
	p.API = subjects.APIPing
	send(t, nc, "dap-eu-hdb-0", p)
	if c := nextAs[messages.PortionCompletion](t, completions); c.Outcome != messages.OutcomeOK {
		t.Fatalf("completion %+v", c)
	}
	if n := calls.Load(); n != 1 {
		t.Fatalf("the endpoint was called %d times for one ping, want 1", n)
	}
}
