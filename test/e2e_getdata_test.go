package test

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/sg-project/sg/messages"
	"github.com/sg-project/sg/services/agg/merge"
	"github.com/sg-project/sg/services/dap"
	"github.com/sg-project/sg/services/dap/demo"
)

// demoEnd fixes the demo data's range so that answers are reproducible.
var demoEnd = time.Date(2026, 11, 20, 12, 0, 0, 0, time.UTC)

func demoFleetConfig(sys *system, tradesPerDay int) dap.DemoFleetConfig {
	return dap.DemoFleetConfig{NC: sys.nc, Subjects: sys.s, Log: sys.log, RCID: "rc-1", Seed: 7,
		End: demoEnd, Start: demoEnd.Add(-48 * time.Hour), TradesPerDay: tradesPerDay, QuotesPerDay: 1000,
		Heartbeat: 500 * time.Millisecond}
}

// startDemo runs the demo fleet (3 regions x 3 tiers) and waits for it.
func (sys *system) startDemo(cfg dap.DemoFleetConfig) dap.DemoFleet {
	sys.t.Helper()
	info, err := dap.DemoFleetInfo(cfg)
	if err != nil {
		sys.t.Fatal(err)
	}
	sys.run("demo fleet", func(ctx context.Context) error { return dap.RunDemoFleet(ctx, cfg) })
	sys.waitDAPs(len(info.Shards))
	return info
}

// expected computes the answer directly on all the fleet's data at once.
func expected(t testing.TB, fleet dap.DemoFleet, args messages.GetDataArgs) messages.Table {
	t.Helper()
	st, err := fleet.LoadAll()
	if err != nil {
		t.Fatal(err)
	}
	p, err := st.Execute(args, time.Time{}, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	want, err := merge.Merge(args, []merge.Partial{p})
	if err != nil {
		t.Fatal(err)
	}
	return want
}

func (sys *system) getData(args messages.GetDataArgs, opts messages.Opts) (messages.Response, messages.Table) {
	sys.t.Helper()
	ctx, cancel := context.WithTimeout(sys.ctx, 60*time.Second)
	defer cancel()
	resp, err := sys.client.Do(ctx, "getData", args, opts)
	if err != nil {
		sys.t.Fatalf("getData: %v", err)
	}
	var tbl messages.Table
	if resp.Header.Status.IsOK() {
		if err := msgpack.Unmarshal(resp.Payload, &tbl); err != nil {
			sys.t.Fatalf("decode answer table: %v", err)
		}
	}
	return resp, tbl
}

func sameTable(t *testing.T, got, want messages.Table) {
	t.Helper()
	g, err := msgpack.Marshal(&got)
	if err != nil {
		t.Fatal(err)
	}
	w, err := msgpack.Marshal(&want)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(g, w) {
		t.Fatalf("answer differs from the direct computation: got %d rows, want %d rows", got.NumRows(), want.NumRows())
	}
}

// A getData across three tiers and two label sets equals the same
// computation done directly on the generated data, for plain rows and for
// groupBy aggregates.
func TestGetDataAcrossTiersAndLabelSets(t *testing.T) {
	checkGetDataAcrossTiers(t, startSystem(t, systemOptions{}))
}

func checkGetDataAcrossTiers(t *testing.T, sys *system) {
	fleet := sys.startDemo(demoFleetConfig(sys, 3000))
	lay := fleet.Layout
	// From inside hdb to inside rdb: every tier contributes.
	start, end := lay.IDBStart.Add(-3*time.Hour), lay.End.Add(-10*time.Minute)
	if !(start.Before(lay.IDBStart) && end.After(lay.RDBStart)) {
		t.Fatalf("range %s..%s does not span the tiers of %+v", start, end, lay)
	}
	labels := messages.LabelSelector{demo.LabelKey: {"eu", "us"}}

	t.Run("rows", func(t *testing.T) {
		args := messages.GetDataArgs{Table: demo.Trade, StartTS: start, EndTS: end, Labels: labels,
			Filter: []messages.Filter{{Op: messages.FilterGt, Column: "size", Value: int64(10)}}}
		before := sys.counter("sg_rc_dispatches_total")
		resp, got := sys.getData(args, messages.Opts{})
		if !resp.Header.Status.IsOK() {
			t.Fatalf("status %+v", resp.Header.Status)
		}
		// Two label sets times three tiers.
		if n := sys.counter("sg_rc_dispatches_total") - before; n != 6 {
			t.Fatalf("%v portions dispatched, want 6", n)
		}
		want := expected(t, fleet, args)
		if want.NumRows() < 100 {
			t.Fatalf("test data too thin: %d rows", want.NumRows())
		}
		sameTable(t, got, want)
	})
	t.Run("groupBy", func(t *testing.T) {
		args := messages.GetDataArgs{Table: demo.Trade, StartTS: start, EndTS: end, Labels: labels,
			GroupBy: []string{"sym"}, SortCols: []string{"-volume"},
			Agg: []messages.AggSpec{{Name: "n", Func: messages.AggCount}, {Name: "avgPrice", Func: messages.AggAvg, Column: "price"},
				{Name: "volume", Func: messages.AggSum, Column: "size"}, {Name: "lo", Func: messages.AggMin, Column: "price"},
				{Name: "hi", Func: messages.AggMax, Column: "price"}, {Name: "open", Func: messages.AggFirst, Column: "price"},
				{Name: "close", Func: messages.AggLast, Column: "price"}}}
		resp, got := sys.getData(args, messages.Opts{})
		if !resp.Header.Status.IsOK() {
			t.Fatalf("status %+v", resp.Header.Status)
		}
		sameTable(t, got, expected(t, fleet, args))
	})
}

// An answer of several MiB arrives whole.
func TestLargeAnswerArrivesWhole(t *testing.T) {
	sys := startSystem(t, systemOptions{})
	fleet := sys.startDemo(demoFleetConfig(sys, 40000))
	args := messages.GetDataArgs{Table: demo.Trade}
	resp, got := sys.getData(args, messages.Opts{})
	if !resp.Header.Status.IsOK() {
		t.Fatalf("status %+v", resp.Header.Status)
	}
	if len(resp.Payload) < 4<<20 {
		t.Fatalf("answer is %d bytes; the test wants several MiB", len(resp.Payload))
	}
	sameTable(t, got, expected(t, fleet, args))
	t.Logf("answer: %d rows, %.1f MiB", got.NumRows(), float64(len(resp.Payload))/(1<<20))
}
