package dap

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/sg-project/sg/messages"
	"github.com/sg-project/sg/services/dap/demo"
	"github.com/sg-project/sg/services/dap/engine"
	"github.com/sg-project/sg/subjects"
	"github.com/sg-project/sg/test/natstest"
)

// BenchmarkSmallPortion is the DAP's share of a small getData (issue 10): a
// dispatch of one trade row, as the RC sends it (headers included), handed
// to the DAP's portion callback and run by runPortion on the benchmark's
// goroutine (as a slot runs it) on an engine source: the partial and the
// completion are published. Neither NATS's delivery nor the other services
// count: ns/op and allocs/op are the DAP's own (and the engine's).
func BenchmarkSmallPortion(b *testing.B) {
	start := t0.Add(30 * time.Minute)
	args := messages.GetDataArgs{Table: demo.Trade, Limit: 1, StartTS: start, EndTS: start.Add(time.Minute)}
	st := engine.NewStore()
	if err := (demo.Config{Seed: 1}).Load(st, "eu", t0, t0.Add(time.Hour), false); err != nil {
		b.Fatal(err)
	}
	if part, err := st.Execute(args, start, start.Add(time.Minute)); err != nil || part.Rows.NumRows() != 1 {
		b.Fatalf("partial of %d rows (%v), want 1", part.Rows.NumRows(), err)
	}
	raw, err := messages.Encode(&args)
	if err != nil {
		b.Fatal(err)
	}

	d, s, _ := benchSlot(b, st)
	cfg := d.cfg

	// The dispatches of b.N requests, as the RC sends them, built before the
	// clock starts.
	msgs := make([]*nats.Msg, b.N)
	for i := range b.N {
		p := messages.PortionDispatch{V: messages.PortionVersion, RequestID: fmt.Sprintf("bench-%d", i), PortionID: 1, Attempt: 1,
			RCID: "rc1", API: subjects.APIGetData, Args: raw, Labels: messages.LabelSet{"region": "eu"},
			Range:          messages.TimeRange{Start: start.UnixNano(), End: start.Add(time.Minute).UnixNano()},
			PurviewVersion: 1, ReferenceVintage: 1, AggID: "agg1", LogCorr: fmt.Sprintf("corr-%d", i),
			Deadline: time.Now().Add(time.Hour).UnixNano()}
		data, err := messages.Encode(&p)
		if err != nil {
			b.Fatal(err)
		}
		msgs[i] = &nats.Msg{Subject: cfg.Subjects.DAPPortion(cfg.ID), Header: p.Header(), Data: data}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		d.onPortion(msgs[i])
		p, ok := d.queue.pop()
		if !ok {
			b.Fatalf("dispatch %d not queued", i)
		}
		s.p = p
		d.runPortion(s)
	}
	b.StopTimer()
	if s := d.Stats(); s.Executed != uint64(b.N) {
		b.Fatalf("%d executed of %d: %+v", s.Executed, b.N, s)
	}
}

// benchSlot is a DAP on st, logging nothing, on a NATS server of its own,
// with one slot to run portions on as the DAP's slots do (the portion
// benchmarks' set-up); both stop when b ends.
func benchSlot(b *testing.B, st *engine.Store) (*DAP, *slot, *nats.Conn) {
	b.Helper()
	nc := natstest.Connect(b, natstest.Start(b))
	cfg := testConfig(nc, EngineSource{Store: st})
	cfg.Log = zerolog.Nop()
	d, err := New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	b.Cleanup(cancel)
	s := d.newSlot(ctx)
	b.Cleanup(s.close)
	return d, s, nc
}
