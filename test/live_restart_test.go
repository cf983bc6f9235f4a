package test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sg-project/sg/messages"
	"github.com/sg-project/sg/services/dap/live"
	"github.com/sg-project/sg/services/dap/parquetdb"
	"github.com/sg-project/sg/services/gw"
)

// A live group killed mid-feed, after ends of interval and of day, restarts from its
// data directory: it registers unavailable, replays what it had not persisted, and comes
// back with no row lost or doubled; rows published while it was down are there too.
// Parquet written by an end of day that died before the manifest recorded it is not
// served twice.
func TestLiveRestartMidFeed(t *testing.T) {
	ls := startLiveSys(t, 20)
	plan := feedPlan{base: time.Date(2026, 2, 3, 9, 0, 0, 0, time.UTC), step: 100 * time.Millisecond, perBatch: 40, regions: []string{"eu"}}
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(ls.ctx, 2*time.Minute)
	defer cancel()
	pub, err := live.NewPublisher(ls.nc, ls.s, "region")
	if err != nil {
		t.Fatal(err)
	}
	g := ls.startGroup("eu", dir, plan.base, nil)
	ls.waitDAPs(3)
	const batches = 30
	for b := range 18 {
		plan.publish(ctx, t, pub, b)
		switch b {
		case 4, 9, 15: // ends of interval: idb holds [10, 16) after the end of day at 10
			if err := g.g.EndOfInterval(ctx, plan.batchEnd(b)); err != nil {
				t.Fatal(err)
			}
		case 11:
			if err := g.g.EndOfDay(ctx, plan.batchEnd(9)); err != nil {
				t.Fatal(err)
			}
		}
	}
	// Late rows: one whose interval is closed but whose day is open (the idb takes it),
	// one whose day is in Parquet (rejected).
	lateOK := tickRows("eu", []time.Time{plan.batchEnd(12).Add(-time.Millisecond)}, []int64{999_001})
	lateNo := tickRows("eu", []time.Time{plan.batchEnd(3)}, []int64{999_002})
	for _, rows := range []messages.Table{lateOK, lateNo} {
		if _, err := pub.Publish(ctx, tickDef.Name, rows); err != nil {
			t.Fatal(err)
		}
	}
	if err := g.g.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if st := g.g.Stats(); st.LateRows.Load() != 1 || st.LateInIDB.Load() != 1 {
		t.Fatalf("late rows: %d rejected, %d taken by the idb; want 1 and 1", st.LateRows.Load(), st.LateInIDB.Load())
	}
	held := g.g.Stats().Rows.Load()
	g.stop(t)
	waitRCDAPs(t, ls, func(n int) bool { return n == 0 })

	// An end of day that wrote its files and died before recording them.
	orphan := plan.rows(0, 12)
	if _, err := parquetdb.Write(filepath.Join(dir, "region=eu", "hdb"), tickDef, orphan,
		plan.batchEnd(11).UnixNano(), plan.batchEnd(12).UnixNano(), 0); err != nil {
		t.Fatal(err)
	}
	// Rows published while the group is down wait in the stream.
	for b := 18; b < 24; b++ {
		plan.publish(ctx, t, pub, b)
	}

	regs := make(chan messages.DAPRegistration, 16)
	sub, err := ls.nc.Subscribe(ls.s.DAPRegister("dap-eu-rdb"), func(m *nats.Msg) {
		if r, err := messages.DecodeValid[messages.DAPRegistration](m.Data); err == nil {
			regs <- r
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := ls.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	g = ls.startGroup("eu", dir, plan.base, nil)
	select {
	case r := <-regs:
		if r.Available {
			t.Fatal("restarted rdb registered available before replaying")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("restarted rdb did not register")
	}
	st := g.g.Stats()
	if st.Replayed.Load() == 0 || st.Rows.Load() >= held+6*40 || st.Rows.Load() == 0 {
		t.Fatalf("replayed %d messages, %d rows (held %d before): want a replay from the last end of day only",
			st.Replayed.Load(), st.Rows.Load(), held)
	}
	waitRCDAPs(t, ls, func(n int) bool { return n == 3 })
	for b := 24; b < batches; b++ {
		plan.publish(ctx, t, pub, b)
		if b == 26 { // the hdb now covers the orphan's range: it would be served twice
			if err := g.g.EndOfDay(ctx, plan.batchEnd(b)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := g.g.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if late := g.g.Stats().LateRows.Load(); late != 0 {
		t.Fatalf("%d rows rejected as late after the restart: a roll cut before rows already published", late)
	}
	seen := allIDs(ctx, t, ls, plan.base, plan.base.Add(time.Hour))
	if !seen[999_001] || seen[999_002] {
		t.Fatalf("late row in the idb's interval found: %v (want true); late row of a closed day found: %v (want false)", seen[999_001], seen[999_002])
	}
	delete(seen, 999_001)
	var lost []int
	for b := range batches {
		rows := plan.rows(0, b)
		for _, id := range rows.Col("id").Ints {
			if !seen[id] {
				lost = append(lost, b)
				break
			}
		}
	}
	if len(lost) > 0 || len(seen) != batches*plan.perBatch {
		t.Fatalf("%d rows after the restart, want %d; batches with lost rows: %v", len(seen), batches*plan.perBatch, lost)
	}
	_, n, _, err := countByRegion(ctx, ls, plan.base, plan.batchEnd(batches-1))
	if err != nil || n["eu"] != batches*int64(plan.perBatch)+1 { // and the late row the idb took
		t.Fatalf("count %v (%v), want %d", n, err, batches*plan.perBatch+1)
	}
	t.Logf("replayed %d messages (%d rows) of %d batches published; %d rows served once, and the late row the idb took", st.Replayed.Load(), st.Rows.Load(), batches, len(seen))
}

// waitRCDAPs waits until the RC's DAP count satisfies ok.
func waitRCDAPs(t *testing.T, ls *liveSys, ok func(int) bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ls.ctx, 20*time.Second)
	defer cancel()
	if err := ls.gw.WaitRCs(ctx, func(rcs []gw.RCInfo) bool { return len(rcs) > 0 && ok(rcs[0].DAPs) }); err != nil {
		t.Fatalf("waiting for the RC's DAP count: %v", err)
	}
}
