package test

import (
	"context"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sg-project/sg/messages"
	"github.com/sg-project/sg/services/dap"
	"github.com/sg-project/sg/services/dap/live"
)

// slowSource stands for real work: every execution takes at least d, which widens the
// window in which a roll meets a portion in flight.
type slowSource struct {
	dap.Source
	d time.Duration
}

func (s slowSource) Execute(ctx context.Context, api string, args messages.Args, l messages.LabelSet, r messages.TimeRange) ([]byte, error) {
	t := time.NewTimer(s.d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return s.Source.Execute(ctx, api, args, l, r)
}

// retryWatch counts RETRY completions per request, from the RC's completion subject.
type retryWatch struct {
	mu      sync.Mutex
	retries map[string]int
	sub     *nats.Subscription
}

func watchRetries(t *testing.T, ls *liveSys) *retryWatch {
	w := &retryWatch{retries: map[string]int{}}
	sub, err := ls.nc.Subscribe(ls.s.RCCompletion("*"), func(m *nats.Msg) {
		c, err := messages.DecodeValid[messages.PortionCompletion](m.Data)
		if err == nil && c.Outcome == messages.OutcomeRetry {
			w.mu.Lock()
			w.retries[m.Header.Get(messages.HdrLogCorr)]++ // getData's id
			w.mu.Unlock()
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := ls.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	w.sub = sub
	return w
}

func (w *retryWatch) of(id string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.retries[id]
}

func (w *retryWatch) total() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, v := range w.retries {
		n += v
	}
	return n
}

// feedPlan is the known set of rows a test feed writes: batch b of region r holds
// perBatch rows at base + b*step + j*step/perBatch, with unique ids.
type feedPlan struct {
	base     time.Time
	step     time.Duration
	perBatch int
	regions  []string
}

func (p feedPlan) batchEnd(b int) time.Time { return p.base.Add(time.Duration(b+1) * p.step) }

func (p feedPlan) rows(ri, b int) messages.Table {
	times := make([]time.Time, p.perBatch)
	ids := make([]int64, p.perBatch)
	for j := range times {
		times[j] = p.base.Add(time.Duration(b)*p.step + time.Duration(j)*p.step/time.Duration(p.perBatch))
		ids[j] = int64(ri)*10_000_000 + int64(b*p.perBatch+j)
	}
	return tickRows(p.regions[ri], times, ids)
}

// lateRows of region ri arrive after the end of interval at batch b (b%4 == 3) closed
// their interval, while their day is open: the idb takes them.
func (p feedPlan) lateRows(ri, b int) messages.Table {
	times := make([]time.Time, 3)
	ids := make([]int64, 3)
	for k := range times {
		times[k] = p.batchEnd(b).Add(-time.Duration(k+1) * 13 * time.Millisecond)
		ids[k] = 5_000_000 + int64(ri)*100_000 + int64(b)*10 + int64(k)
	}
	return tickRows(p.regions[ri], times, ids)
}

// isLateBatch: the feed publishes late rows after the end of interval at batch b.
func isLateBatch(b int) bool { return b%4 == 3 }

// count and sum of v of region ri's rows with time in [from, to), over the first
// batches batches and the late rows published after the ends of interval before
// lateBefore.
func (p feedPlan) expect(ri, batches, lateBefore int, from, to time.Time) (n int64, sum float64) {
	add := func(rows messages.Table) {
		for i, ts := range rows.Col("time").Ints {
			if ts >= from.UnixNano() && ts < to.UnixNano() {
				n++
				sum += rows.Col("v").Floats[i]
			}
		}
	}
	for b := range batches {
		add(p.rows(ri, b))
		if isLateBatch(b) && b < lateBefore {
			add(p.lateRows(ri, b))
		}
	}
	return n, sum
}

func (p feedPlan) publish(ctx context.Context, t *testing.T, pub *live.Publisher, b int) {
	for ri := range p.regions {
		if _, err := pub.Publish(ctx, tickDef.Name, p.rows(ri, b)); err != nil {
			t.Fatalf("publish batch %d: %v", b, err)
		}
	}
}

// countByRegion asks count and sum(v) per region over [from, to).
func countByRegion(ctx context.Context, ls *liveSys, from, to time.Time) (string, map[string]int64, map[string]float64, error) {
	id, tbl, err := ls.getData(ctx, messages.GetDataArgs{Table: tickDef.Name, StartTS: from, EndTS: to, GroupBy: []string{"region"},
		Agg: []messages.AggSpec{{Name: "n", Func: messages.AggCount}, {Name: "s", Func: messages.AggSum, Column: "v"}}})
	if err != nil {
		return id, nil, nil, err
	}
	n, s := map[string]int64{}, map[string]float64{}
	for i, r := range tbl.Col("region").Strings {
		n[r], s[r] = tbl.Col("n").Ints[i], tbl.Col("s").Floats[i]
	}
	return id, n, s, nil
}

// allIDs asks every row id in [from, to) and checks each appears once.
func allIDs(ctx context.Context, t *testing.T, ls *liveSys, from, to time.Time) map[int64]bool {
	t.Helper()
	_, tbl, err := ls.getData(ctx, messages.GetDataArgs{Table: tickDef.Name, StartTS: from, EndTS: to, Columns: []string{"id"}})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int64]bool{}
	for _, id := range tbl.Col("id").Ints {
		if seen[id] {
			t.Fatalf("row %d answered twice", id)
		}
		seen[id] = true
	}
	return seen
}

// The churn test: a feed writes a known set of rows for two label sets while ends of
// interval and of day run again and again and a query load runs. Every answer of the load
// counts exactly the rows written before the last cut; requests in flight during rolls
// are answered RETRY by the DAPs, retried by the RC and still answered exactly; at the
// end every row is found exactly once.
func TestLiveChurn(t *testing.T) {
	// A roll every ~40 ms on each label set is far beyond production rates; a request
	// may meet several, each a retry, so the retry budget is raised from the default 3.
	ls := startLiveSys(t, 50)
	// Crosses midnight, so end of day writes two date partitions.
	plan := feedPlan{base: time.Date(2026, 1, 5, 23, 59, 57, 0, time.UTC), step: 100 * time.Millisecond, perBatch: 25, regions: []string{"eu", "us"}}
	dir := t.TempDir()
	coverage := watchCoverage(t, ls)
	slow := func(_ messages.Tier, s dap.Source) dap.Source { return slowSource{s, 3 * time.Millisecond} }
	var groups []*liveGroup
	for _, r := range plan.regions {
		groups = append(groups, ls.startGroup(r, dir, plan.base, slow))
	}
	ls.waitDAPs(6)
	pub, err := live.NewPublisher(ls.nc, ls.s, "region")
	if err != nil {
		t.Fatal(err)
	}
	watch := watchRetries(t, ls)
	ctx, cancel := context.WithTimeout(ls.ctx, 3*time.Minute)
	defer cancel()

	// The query load: counts over ranges that end at or before the last batch every group
	// has applied (Sync), so they must be exact at every moment, on every tier.
	var synced atomic.Int64 // batches every group holds
	var queries, retriedOK atomic.Int64
	firstSync := make(chan struct{})
	stopLoad := make(chan struct{})
	var load sync.WaitGroup
	for w := range 4 {
		load.Go(func() {
			select {
			case <-firstSync:
			case <-ctx.Done():
				return
			}
			for i := 0; i < 5000; i++ { // bounded; normally ended by stopLoad
				select {
				case <-stopLoad:
					return
				default:
				}
				b := int(synced.Load())
				from, to := plan.base, plan.batchEnd(b-1)
				switch w {
				case 1: // the most recent rows: the rdb and the idb
					from = plan.batchEnd(max(b-6, 0) - 1)
				case 2: // a range that starts and ends inside the data
					from, to = plan.base.Add(time.Duration(i%7)*plan.step+3*time.Millisecond), plan.batchEnd(max(b-1-i%5, 0))
				}
				if !to.After(from) {
					continue
				}
				id, n, s, err := countByRegion(ctx, ls, from, to)
				if err != nil {
					t.Errorf("query over %d batches: %v", b, err)
					return
				}
				queries.Add(1)
				for ri, r := range plan.regions {
					wn, ws := plan.expect(ri, b, b, from, to)
					if n[r] != wn || s[r] != ws {
						t.Errorf("request %s: region %s over [%s, %s) of %d batches: count %d sum %v, want %d %v (RETRY completions %d)",
							id, r, from.Format("15:04:05.000"), to.Format("15:04:05.000"), b, n[r], s[r], wn, ws, watch.of(id))
					}
				}
				if watch.of(id) > 0 {
					retriedOK.Add(1)
				}
			}
		})
	}

	// The feed, with rolls: an end of interval every 4 batches, an end of day every 12.
	// It runs at least 48 batches and then until the load has seen retries (bounded).
	const minBatches, maxBatches = 48, 480
	tick := time.NewTicker(10 * time.Millisecond) // the feed's steady rate
	defer tick.Stop()
	b := 0
	for ; b < maxBatches && (b < minBatches || retriedOK.Load() < 3); b++ {
		select {
		case <-tick.C:
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		}
		plan.publish(ctx, t, pub, b)
		if isLateBatch(b) {
			for _, g := range groups {
				if err := g.g.EndOfInterval(ctx, plan.batchEnd(b)); err != nil {
					t.Fatal(err)
				}
			}
			// Rows that missed the interval just closed: the idb takes them, under load.
			for ri := range plan.regions {
				if _, err := pub.Publish(ctx, tickDef.Name, plan.lateRows(ri, b)); err != nil {
					t.Fatal(err)
				}
			}
		}
		if b%12 == 11 {
			for _, g := range groups {
				if err := g.g.EndOfDay(ctx, plan.batchEnd(b)); err != nil {
					t.Fatal(err)
				}
			}
		}
		// From here the load counts batch b (and its late rows): every group holds them.
		for _, g := range groups {
			if err := g.g.Sync(ctx); err != nil {
				t.Fatal(err)
			}
		}
		if synced.Swap(int64(b+1)) == 0 {
			close(firstSync)
		}
	}
	close(stopLoad)
	load.Wait()
	batches := b
	// Leave the last batches in the rdb and the idb: every tier answers the final check.
	for _, g := range groups {
		if err := g.g.EndOfInterval(ctx, plan.batchEnd(batches-3)); err != nil {
			t.Fatal(err)
		}
	}

	seen := allIDs(ctx, t, ls, plan.base, plan.base.Add(24*time.Hour))
	for ri := range plan.regions {
		for bb := range batches {
			rows := plan.rows(ri, bb)
			if isLateBatch(bb) {
				late := plan.lateRows(ri, bb)
				rows.Columns[2].Ints = append(slices.Clone(rows.Columns[2].Ints), late.Col("id").Ints...)
			}
			for _, id := range rows.Col("id").Ints {
				if !seen[id] {
					t.Fatalf("row %d (batch %d) not found", id, bb)
				}
				delete(seen, id)
			}
		}
	}
	if len(seen) != 0 {
		t.Fatalf("%d rows answered that were never written", len(seen))
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 10 {
		a, z := rng.IntN(batches), rng.IntN(batches)
		from, to := plan.base.Add(time.Duration(min(a, z))*plan.step+7*time.Millisecond), plan.batchEnd(max(a, z))
		_, n, s, err := countByRegion(ctx, ls, from, to)
		if err != nil {
			t.Fatal(err)
		}
		for ri, r := range plan.regions {
			if wn, ws := plan.expect(ri, batches, batches, from, to); n[r] != wn || s[r] != ws {
				t.Fatalf("%s over [%s, %s): %d %v, want %d %v", r, from, to, n[r], s[r], wn, ws)
			}
		}
	}
	var eois, eods, late, lateIDB uint64
	for _, g := range groups {
		st := g.g.Stats()
		eois, eods, late, lateIDB = eois+st.EOIs.Load(), eods+st.EODs.Load(), late+st.LateRows.Load(), lateIDB+st.LateInIDB.Load()
	}
	t.Logf("%d batches (%d rows, %d late rows taken by the idbs), %d ends of interval, %d ends of day, %d queries, %d RETRY completions, %d answers that were retried, RC retries %v",
		batches, batches*plan.perBatch*len(plan.regions), lateIDB, eois, eods, queries.Load(), watch.total(), retriedOK.Load(), ls.counter("sg_rc_retries_total"))
	t.Logf("roll invariant checked after each of %d DAP events", coverage.verify(t))
	if late != 0 {
		t.Fatalf("%d rows rejected as late", late)
	}
	// Batches 0..batches-1 ran; those with b%4 == 3 had late rows: batches/4 of them.
	if want := uint64(len(plan.regions) * 3 * (batches / 4)); lateIDB != want {
		t.Fatalf("the idbs took %d late rows, want %d", lateIDB, want)
	}
	if retriedOK.Load() < 3 || ls.counter("sg_rc_retries_total") < 3 {
		t.Fatalf("the load saw %d retried answers and the RC %v retries; want rolls to meet requests in flight", retriedOK.Load(), ls.counter("sg_rc_retries_total"))
	}
	if eods < 2*uint64(len(groups)) {
		t.Fatalf("%d ends of day", eods)
	}
}
