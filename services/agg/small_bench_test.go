package agg

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/sg-project/sg/messages"
	"github.com/sg-project/sg/services/agg/merge"
	"github.com/sg-project/sg/services/dap/demo"
	"github.com/sg-project/sg/services/dap/engine"
	"github.com/sg-project/sg/subjects"
	"github.com/sg-project/sg/test/natstest"
)

// BenchmarkSmallAnswer is the Agg's share of a small getData (issue 10: the
// Agg spent the most CPU and allocations per small request of the
// services): the RC's expectation (one portion, sealed) and the DAP's
// partial of one trade row, as their messages arrive (headers included),
// handed to the Agg's subscription callbacks on the benchmark's goroutine;
// the answer is merged, encoded and published there, and the done notices
// go in batches from Run, as deployed. Neither NATS's delivery nor the
// other services count: ns/op and allocs/op are the Agg's own. For a
// msgpack caller, and a JSON one (its arguments as sent, its answer in JSON).
func BenchmarkSmallAnswer(b *testing.B) {
	for _, content := range []messages.Content{messages.ContentMsgpack, messages.ContentJSON} {
		b.Run("content="+string(content), func(b *testing.B) { benchSmallAnswer(b, content) })
	}
}

func benchSmallAnswer(b *testing.B, content messages.Content) {
	start := t0.Add(30 * time.Minute)
	args := messages.GetDataArgs{Table: demo.Trade, Limit: 1, StartTS: start, EndTS: start.Add(time.Minute)}
	st := engine.NewStore()
	if err := (demo.Config{Seed: 1}).Load(st, "eu", t0, t0.Add(time.Hour), false); err != nil {
		b.Fatal(err)
	}
	part, err := st.Execute(args, t0, t0.Add(time.Hour))
	if err != nil {
		b.Fatal(err)
	}
	if part.Rows.NumRows() != 1 {
		b.Fatalf("partial of %d rows, want 1", part.Rows.NumRows())
	}
	payload, err := merge.EncodePartial(part)
	if err != nil {
		b.Fatal(err)
	}

	nc := natstest.Connect(b, natstest.Start(b))
	a, err := New(Config{ID: "agg1", NC: nc, Subjects: subj, Log: zerolog.Nop()})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { _ = a.Run(ctx) })
	defer func() { cancel(); wg.Wait() }()
	<-a.Ready()

	// The messages of b.N requests, as the RC and the DAP send them, built
	// before the clock starts.
	r := ref(1, 1)
	msgs := func(i int) (expect, partial *nats.Msg) {
		id := fmt.Sprintf("bench-%d", i)
		x := messages.AggExpectation{RequestID: id, Seq: 1, API: subjects.APIGetData, Expect: []messages.PortionRef{r},
			Sealed: true, ReplyTo: subj.GWAnswer("gw1", id), RCID: "rc1", Content: content,
			Deadline: time.Now().Add(time.Hour).UnixNano(), LogCorr: "corr-" + id, AnswerID: "c-" + id}
		if content == messages.ContentJSON {
			j, err := json.Marshal(map[string]any{"table": args.Table, "limit": args.Limit,
				"startTS": args.StartTS.Format(time.RFC3339Nano), "endTS": args.EndTS.Format(time.RFC3339Nano)})
			if err != nil {
				b.Fatal(err)
			}
			x.SetArguments(messages.JSONArgs(j))
		} else {
			m, err := messages.Encode(&args)
			if err != nil {
				b.Fatal(err)
			}
			x.SetArguments(messages.MsgpackArgs(m))
		}
		xb, err := messages.Encode(&x)
		if err != nil {
			b.Fatal(err)
		}
		xh := nats.Header{}
		messages.Routing{RequestID: id, RCID: "rc1", LogCorr: x.LogCorr}.Write(xh)
		p := okPartial(id, r, "dap1", payload)
		pb, err := messages.Encode(&p)
		if err != nil {
			b.Fatal(err)
		}
		ph := nats.Header{}
		messages.Routing{RequestID: id, PortionID: r.PortionID, Attempt: r.Attempt, LogCorr: x.LogCorr}.Write(ph)
		p.Status.Write(ph)
		return &nats.Msg{Subject: subj.AggExpect("agg1"), Header: xh, Data: xb},
			&nats.Msg{Subject: subj.AggPartial("agg1"), Header: ph, Data: pb}
	}
	expects, partials := make([]*nats.Msg, b.N), make([]*nats.Msg, b.N)
	for i := range b.N {
		expects[i], partials[i] = msgs(i)
	}
	answered := a.stats.answered.Load()
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		a.onExpect(expects[i])
		a.onPartial(partials[i])
	}
	b.StopTimer()
	if n := a.stats.answered.Load() - answered; n != uint64(b.N) || a.stats.errors.Load() != 0 {
		b.Fatalf("%d answered of %d, %d errors", n, b.N, a.stats.errors.Load())
	}
}
