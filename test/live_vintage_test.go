package test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sg-project/sg/messages"
	"github.com/sg-project/sg/services/dap"
	"github.com/sg-project/sg/services/dap/live"
)

// gateSource holds every tick execution until released, and says when one starts.
type gateSource struct {
	dap.Source
	started chan struct{}
	release chan struct{}
}

func (s gateSource) Execute(ctx context.Context, api string, args messages.Args, l messages.LabelSet, r messages.TimeRange) ([]byte, error) {
	s.started <- struct{}{}
	select {
	case <-s.release:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return s.Source.Execute(ctx, api, args, l, r)
}

// Seed (Reference vintage change): a reference update arrives while a request has
// dispatched part of a label set (its rdb portion ran at the locked vintage) and queued
// the rest (the hdb is busy). Every DAP of the label set moves to the update's stream
// position, above the locked vintage, so the RC retries the label set; the new attempt
// runs entirely at the new vintage, and the answer is exact.
func TestLiveVintageRetry(t *testing.T) {
	ls := startLiveSys(t, 5)
	plan := feedPlan{base: time.Date(2026, 4, 1, 12, 0, 0, 0, time.UTC), step: time.Second, perBatch: 10, regions: []string{"eu"}}
	gate := gateSource{started: make(chan struct{}, 8), release: make(chan struct{})}
	var gated sync.Once
	wrap := func(tier messages.Tier, s dap.Source) dap.Source {
		if tier == messages.TierHDB {
			return gateSource{Source: s, started: gate.started, release: gate.release}
		}
		return s
	}
	dir := t.TempDir()
	g := ls.startGroup("eu", dir, plan.base, wrap)
	ls.waitDAPs(3)
	ctx, cancel := context.WithTimeout(ls.ctx, time.Minute)
	defer cancel()
	defer gated.Do(func() { close(gate.release) })
	pub, err := live.NewPublisher(ls.nc, ls.s, "region")
	if err != nil {
		t.Fatal(err)
	}
	for b := range 10 {
		plan.publish(ctx, t, pub, b)
	}
	// hdb [.., 6 s), idb empty until the next end of interval, rdb [6 s, ..).
	if err := g.g.EndOfDay(ctx, plan.batchEnd(5)); err != nil {
		t.Fatal(err)
	}
	if err := g.g.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	v0 := g.g.DAP(messages.TierRDB).State().ReferenceVintage

	// Dispatches, to see attempts and vintages.
	var mu sync.Mutex
	type sent struct {
		messages.PortionDispatch
		DAPID string
	}
	dispatches := map[string][]sent{}
	sub, err := ls.nc.Subscribe(ls.s.DAPPortion("*"), func(m *nats.Msg) {
		if p, err := messages.DecodeValid[messages.PortionDispatch](m.Data); err == nil {
			id := strings.TrimSuffix(strings.TrimPrefix(m.Subject, ls.s.Prefix()+".dap."), ".portion")
			mu.Lock()
			dispatches[p.LogCorr] = append(dispatches[p.LogCorr], sent{p, id}) // getData's id
			mu.Unlock()
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	vintages := make(chan string, 8)
	vsub, err := ls.nc.Subscribe(ls.s.DAPVintage("*"), func(m *nats.Msg) {
		if u, err := messages.DecodeValid[messages.DAPVintageUpdate](m.Data); err == nil {
			vintages <- u.DAPID
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer vsub.Unsubscribe()
	if err := ls.nc.Flush(); err != nil {
		t.Fatal(err)
	}

	// Two blockers, requests on the hdb alone, hold both its slots.
	type answer struct {
		id  string
		n   map[string]int64
		err error
	}
	answers := make(chan answer, 4)
	ask := func(from, to time.Time) {
		go func() {
			id, n, _, err := countByRegion(ctx, ls, from, to)
			answers <- answer{id, n, err}
		}()
	}
	for range 2 {
		ask(plan.base, plan.batchEnd(2))
		select {
		case <-gate.started:
		case <-time.After(10 * time.Second):
			t.Fatal("blocker did not reach the hdb")
		}
	}
	// The request: its rdb portion runs and locks the vintage, its hdb portion queues.
	ask(plan.base, plan.batchEnd(9))
	ls.waitQueued(1)

	inst := messages.NewTable(instDef.Columns)
	_ = inst.AppendRow("A.eu", "eu", int64(100))
	seqs, err := pub.Publish(ctx, instDef.Name, inst)
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		select {
		case <-vintages:
		case <-time.After(10 * time.Second):
			t.Fatal("not every DAP published the new vintage")
		}
	}
	if v := g.g.DAP(messages.TierHDB).State().ReferenceVintage; v != seqs[0] || v == v0 {
		t.Fatalf("hdb vintage %d, want the update's stream position %d", v, seqs[0])
	}
	gated.Do(func() { close(gate.release) })

	for range 3 {
		var a answer
		select {
		case a = <-answers:
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		}
		if a.err != nil {
			t.Fatal(a.err)
		}
		mu.Lock()
		ds := dispatches[a.id]
		mu.Unlock()
		last := uint32(0)
		for _, d := range ds {
			last = max(last, d.Attempt)
		}
		want, _ := plan.expect(0, 10, 0, plan.base, plan.batchEnd(9))
		if len(ds) == 1 { // a blocker: one hdb portion, before the update
			want, _ = plan.expect(0, 10, 0, plan.base, plan.batchEnd(2))
			if ds[0].ReferenceVintage != v0 {
				t.Fatalf("blocker ran at vintage %d", ds[0].ReferenceVintage)
			}
		} else {
			if last == 0 {
				t.Fatalf("request %s was not retried: dispatches %+v", a.id, ds)
			}
			tiers := map[string]bool{}
			for _, d := range ds {
				if d.Attempt == last {
					tiers[d.DAPID] = true
					if d.ReferenceVintage != seqs[0] {
						t.Fatalf("attempt %d of %s dispatched at vintage %d, want %d: mixed vintages", last, a.id, d.ReferenceVintage, seqs[0])
					}
				}
			}
			if !tiers["dap-eu-hdb"] || !tiers["dap-eu-rdb"] {
				t.Fatalf("the retry did not rerun every tier: %v", tiers)
			}
		}
		if a.n["eu"] != want {
			t.Fatalf("request %s counted %d, want %d", a.id, a.n["eu"], want)
		}
	}
	if ls.counter("sg_rc_retries_total") < 1 {
		t.Fatal("the RC counted no retry")
	}
}
