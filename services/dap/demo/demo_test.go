package demo

import (
	"fmt"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/sg-project/sg/messages"
	"github.com/sg-project/sg/services/agg/merge"
	"github.com/sg-project/sg/services/dap/engine"
)

var day = time.Date(2024, 3, 4, 0, 0, 0, 0, time.UTC)

func TestSameSeedSameData(t *testing.T) {
	a, _ := Config{Seed: 7}.Rows(Trade, "eu", day, day.Add(time.Hour))
	b, _ := Config{Seed: 7}.Rows(Trade, "eu", day, day.Add(time.Hour))
	c, _ := Config{Seed: 8}.Rows(Trade, "eu", day, day.Add(time.Hour))
	if !reflect.DeepEqual(a, b) {
		t.Fatal("same seed, different data")
	}
	if reflect.DeepEqual(a, c) {
		t.Fatal("different seeds, same data")
	}
	if a.NumRows() != 600 { // 14,400 a day by default
		t.Fatalf("%d trades in an hour, want 600", a.NumRows())
	}
	if !slices.IsSorted(a.Col("time").Ints) {
		t.Fatal("trades not in time order")
	}
}

// The rows of [a, c) are the rows of [a, b) then those of [b, c), for any b, even inside
// a bucket: what lets disjoint DAP purviews add up to the whole.
func TestSplitsComposeToWhole(t *testing.T) {
	cfg := Config{Seed: 3, QuotesPerDay: 100_000}
	for _, table := range []string{Trade, Quote} {
		whole, _ := cfg.Rows(table, "asia", day, day.Add(2*time.Hour))
		cut := day.Add(37*time.Minute + 1234567*time.Nanosecond)
		x, _ := cfg.Rows(table, "asia", day, cut)
		y, _ := cfg.Rows(table, "asia", cut, day.Add(2*time.Hour))
		for k := range x.Columns {
			x.Columns[k].AppendColumn(&y.Columns[k])
		}
		if !reflect.DeepEqual(x, whole) {
			t.Fatalf("%s: split rows differ from whole", table)
		}
	}
}

func TestRegionsHaveTheirOwnSyms(t *testing.T) {
	for _, r := range Regions {
		rows, _ := Config{Seed: 1}.Rows(Quote, r, day, day.Add(10*time.Minute))
		for _, s := range rows.Col("sym").Strings {
			if !slices.Contains(Syms(r), s) {
				t.Fatalf("region %s has sym %s", r, s)
			}
		}
		inst, _ := Config{}.Rows(Instrument, r, time.Time{}, time.Time{})
		if !slices.Equal(inst.Col("sym").Strings, Syms(r)) {
			t.Fatalf("instruments of %s: %v", r, inst.Col("sym").Strings)
		}
	}
	if _, err := (Config{}).Rows(Trade, "mars", day, day.Add(time.Hour)); err == nil {
		t.Fatal("unknown region accepted")
	}
}

// A fleet of DAPs per region and tier, each executing on its own purview, merges to the
// answer of one store that holds everything.
func TestFleetMergesToWhole(t *testing.T) {
	cfg := Config{Seed: 11, TradesPerDay: 20_000}
	l := Layout{Start: day, IDBStart: day.Add(10 * time.Hour), RDBStart: day.Add(20 * time.Hour), End: day.Add(24 * time.Hour)}
	shards, err := Fleet(l, 2)
	if err != nil {
		t.Fatal(err)
	}
	if len(shards) != 3*3*2 {
		t.Fatalf("%d shards, want 18", len(shards))
	}
	all := engine.NewStore()
	for _, r := range Regions {
		if err := cfg.Load(all, r, l.Start, l.End, true); err != nil {
			t.Fatal(err)
		}
	}
	queries := []messages.GetDataArgs{
		{Table: Trade, GroupBy: []string{"region", "sym"}, Agg: []messages.AggSpec{{Name: "n", Func: "count"},
			{Name: "vwapNum", Func: "sum", Column: "price"}, {Name: "open", Func: "first", Column: "price"},
			{Name: "close", Func: "last", Column: "price"}, {Name: "avg", Func: "avg", Column: "size"}}},
		{Table: Trade, Filter: []messages.Filter{{Op: "=", Column: "block", Value: true}}, SortCols: []string{"-size"}, Limit: 25},
		{Table: Quote, StartTS: day.Add(9 * time.Hour), EndTS: day.Add(21 * time.Hour), Limit: 50},
		{Table: Instrument, Labels: messages.LabelSelector{"region": {"eu", "asia"}}},
	}
	for _, q := range queries {
		p, err := all.Execute(q, time.Time{}, time.Time{})
		if err != nil {
			t.Fatal(err)
		}
		want, _ := merge.Merge(q, []merge.Partial{p})
		var parts []merge.Partial
		for _, s := range shards {
			if s.Replica != 0 { // the RC sends each portion to one replica
				continue
			}
			store := engine.NewStore()
			if err := cfg.LoadShard(store, s); err != nil {
				t.Fatal(err)
			}
			p, err := store.Execute(q, s.Start, s.End)
			if err != nil {
				t.Fatal(err)
			}
			parts = append(parts, p)
		}
		got, err := merge.Merge(q, parts)
		if err != nil {
			t.Fatal(err)
		}
		gb, _ := got.MarshalJSON()
		wb, _ := want.MarshalJSON()
		if string(gb) != string(wb) || want.NumRows() == 0 {
			t.Fatalf("%s: fleet answer differs from whole (or is empty)\n got %.300s\nwant %.300s", fmt.Sprint(q.Table), gb, wb)
		}
	}
}
