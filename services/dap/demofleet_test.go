package dap

import (
	"bytes"
	"context"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/sg-project/sg/messages"
	"github.com/sg-project/sg/services/agg/merge"
	"github.com/sg-project/sg/services/dap/demo"
	"github.com/sg-project/sg/subjects"
)

func TestDemoFleetInfo(t *testing.T) {
	end := t0.Add(72 * time.Hour)
	f, err := DemoFleetInfo(DemoFleetConfig{RCID: "rc1", Seed: 3, End: end, Replicas: 2})
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Shards) != 3*3*2 || !f.Layout.Start.Equal(t0) || !f.Layout.RDBStart.Equal(end.Add(-time.Hour)) {
		t.Fatalf("%d shards, layout %+v", len(f.Shards), f.Layout)
	}
	ids := map[string]bool{}
	for _, s := range f.Shards {
		c := s.Config
		ids[c.ID] = true
		hasInstrument := len(c.Tables) == 3 && c.Tables[2].Name == demo.Instrument && c.Tables[2].Kind == messages.TableSharded
		if hasInstrument != (s.Shard.Tier == demo.TierHDB) || string(c.Tier) != s.Shard.Tier || c.Labels[demo.LabelKey] != s.Shard.Region {
			t.Errorf("shard %s: tables %v", c.ID, c.Tables)
		}
		switch s.Shard.Tier {
		case demo.TierHDB:
			if c.Purview.Start != messages.TSMin || c.Purview.End != f.Layout.IDBStart.UnixNano() {
				t.Errorf("%s purview %s", c.ID, c.Purview)
			}
		case demo.TierRDB:
			if c.Purview.End != messages.TSMax || c.Purview.Start != f.Layout.RDBStart.UnixNano() {
				t.Errorf("%s purview %s", c.ID, c.Purview)
			}
		}
	}
	if len(ids) != len(f.Shards) || !ids["dap-asia-idb-1"] {
		t.Fatalf("ids %v", ids)
	}
}

// The whole fleet over NATS: every DAP registers, and the partials of one portion per
// region and tier merge to the answer of one store holding everything.
func TestRunDemoFleet(t *testing.T) {
	nc := startNATS(t, 0)
	cfg := DemoFleetConfig{NC: nc, Subjects: subjects.Default(), Log: zerolog.Nop(), RCID: "rc1", Seed: 5,
		Start: t0, End: t0.Add(24 * time.Hour), TradesPerDay: 3000, QuotesPerDay: 3000, Heartbeat: time.Hour}
	f, err := DemoFleetInfo(cfg)
	if err != nil {
		t.Fatal(err)
	}
	regs := subscribe(t, nc, cfg.Subjects.DAPRegister("*"))
	partials := subscribe(t, nc, cfg.Subjects.AggPartial("agg1"))
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := RunDemoFleet(ctx, cfg); err != nil {
			t.Error(err)
		}
	})
	defer wg.Wait()
	defer cancel()
	registered := map[string]messages.DAPRegistration{}
	for len(registered) < len(f.Shards) {
		r := nextAs[messages.DAPRegistration](t, regs)
		registered[r.DAPID] = r
	}
	for _, q := range []messages.GetDataArgs{
		{Table: demo.Trade, GroupBy: []string{"region", "sym"}, Agg: []messages.AggSpec{{Name: "n", Func: "count"}, {Name: "px", Func: "avg", Column: "price"}}},
		{Table: demo.Quote, StartTS: t0.Add(10 * time.Hour), SortCols: []string{"-bid"}, Limit: 20},
	} {
		for i, s := range f.Shards {
			p := dispatch(messages.PortionID(i+1), q)
			p.Range = s.Config.Purview
			send(t, nc, f.Shards[i].Config.ID, p)
		}
		var parts []merge.Partial
		for range f.Shards {
			pr := nextAs[messages.PartialResult](t, partials)
			p, err := merge.DecodePartial(pr.Payload)
			if err != nil || !pr.Status.IsOK() {
				t.Fatalf("partial of %s: %v %v", pr.DAPID, pr.Status, err)
			}
			parts = append(parts, p)
		}
		got, err := merge.Merge(q, parts)
		if err != nil {
			t.Fatal(err)
		}
		all, err := f.LoadAll()
		if err != nil {
			t.Fatal(err)
		}
		one, err := all.Execute(q, time.Time{}, time.Time{})
		if err != nil {
			t.Fatal(err)
		}
		want, _ := merge.Merge(q, []merge.Partial{one})
		// Compared encoded: the fleet's partials were decoded with their
		// symbols coded, the one store's are strings; the same table
		// encodes to the same bytes either way.
		gb, err1 := messages.Encode(&got)
		wb, err2 := messages.Encode(&want)
		if err1 != nil || err2 != nil || !bytes.Equal(gb, wb) || got.NumRows() == 0 {
			t.Fatalf("%s: fleet answer (%d rows) differs from one store (%d rows)", q.Table, got.NumRows(), want.NumRows())
		}
	}
}
