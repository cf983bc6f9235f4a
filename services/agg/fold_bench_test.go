package agg

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/rs/zerolog"
	"github.com/sg-project/sg/messages"
	"github.com/sg-project/sg/subjects"
	"github.com/sg-project/sg/test/natstest"
)

// BenchmarkAggregateAnswer is the Agg's answer time for an aggregate of
// 100 partials (100 portions of 1,000 rows in 50 groups, every
// aggregation): from the last partial sent to its answer received, the
// other 99 already taken (and, since issue 10, folded as they came). Of
// 1 partial: the floor (the hops, one partial's decoding, the answer's
// encoding).
func BenchmarkAggregateAnswer(b *testing.B) {
	for _, n := range []int{1, 100} {
		b.Run(fmt.Sprint("partials=", n), func(b *testing.B) { benchmarkAggregateAnswer(b, n) })
	}
}

func benchmarkAggregateAnswer(b *testing.B, n int) {
	rng := rand.New(rand.NewPCG(1, 2))
	var enc [][]byte
	for p := range n {
		e, _ := randomPart(b, rng, 1000, 50, int64(p)*1000)
		enc = append(enc, e)
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
	folds := watchFolds(b, a)
	answers := natstest.Subscribe(b, nc, subj.GWAnswerPattern("gw1"))
	partial := func(id string, r messages.PortionRef, payload []byte) {
		if err := partialOn(nc, okPartial(id, r, "dap", payload)); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	b.StopTimer()
	for i := range b.N {
		id := fmt.Sprint("r", i)
		refs := make([]messages.PortionRef, n)
		for p := range refs {
			refs[p] = ref(messages.PortionID(p+1), 1)
		}
		x := expectation(id, subjects.APIGetData, foldArgs, refs...)
		if err := publishOn(nc, subj.AggExpect("agg1"), &x, nil); err != nil {
			b.Fatal(err)
		}
		for p := range n - 1 {
			partial(id, refs[p], enc[p])
		}
		settle(b, folds, id, n-1, uint64(i+1)*uint64(n-1))
		b.StartTimer()
		partial(id, refs[n-1], enc[n-1])
		m, err := answers.NextMsg(wait)
		b.StopTimer()
		if err != nil {
			b.Fatal(err)
		}
		if st, err := messages.ReadStatus(m.Header); err != nil || !st.IsOK() {
			b.Fatalf("answer %+v (%v)", st, err)
		}
	}
}

// settle waits (bounded) until the Agg has folded folded partials as they
// came in all, and then requires that request id hold n partials.
func settle(b *testing.B, folds *foldWatch, id string, n int, folded uint64) {
	folds.until(folded)
	a := folds.a
	a.mu.Lock()
	held := 0
	if r := a.requests[id]; r != nil {
		held = len(r.partials)
	}
	a.mu.Unlock()
	if held != n {
		b.Fatalf("request %s holds %d partials, want %d", id, held, n)
	}
}
