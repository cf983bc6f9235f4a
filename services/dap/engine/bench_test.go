package engine_test

import (
	"testing"
	"time"

	"github.com/sg-project/sg/messages"
	"github.com/sg-project/sg/services/dap/demo"
	"github.com/sg-project/sg/services/dap/engine"
)

// benchStore holds about 1M trades: one region, 1M trades over one day.
func benchStore(b *testing.B) *engine.Store {
	s := engine.NewStore()
	cfg := demo.Config{Seed: 1, TradesPerDay: 1_000_000, QuotesPerDay: 1}
	if err := cfg.Load(s, "eu", t0, t0.Add(24*time.Hour), true); err != nil {
		b.Fatal(err)
	}
	if n := s.NumRows(demo.Trade); n != 1_000_000 {
		b.Fatalf("%d trades, want 1,000,000", n)
	}
	return s
}

func BenchmarkExecute(b *testing.B) {
	s := benchStore(b)
	narrow := [2]time.Time{t0.Add(12 * time.Hour), t0.Add(12*time.Hour + time.Minute)} // ~700 rows
	wide := [2]time.Time{t0, t0.Add(24 * time.Hour)}                                   // all 1M rows
	ohlc := []messages.AggSpec{{Name: "n", Func: "count"}, {Name: "open", Func: "first", Column: "price"},
		{Name: "hi", Func: "max", Column: "price"}, {Name: "lo", Func: "min", Column: "price"},
		{Name: "close", Func: "last", Column: "price"}, {Name: "qty", Func: "sum", Column: "size"},
		{Name: "avgPx", Func: "avg", Column: "price"}}
	cases := []struct {
		name string
		r    [2]time.Time
		args messages.GetDataArgs
	}{
		{"narrow/rows", narrow, messages.GetDataArgs{Table: "trade", Columns: []string{"time", "sym", "price", "size"}}},
		{"narrow/agg", narrow, messages.GetDataArgs{Table: "trade", GroupBy: []string{"sym"}, Agg: ohlc}},
		{"wide/rows-filtered", wide, messages.GetDataArgs{Table: "trade", Columns: []string{"time", "sym", "price"},
			Filter: []messages.Filter{{Op: "=", Column: "sym", Value: "VOD.L"}, {Op: ">", Column: "size", Value: int64(45)}}}},
		{"wide/rows-limit", wide, messages.GetDataArgs{Table: "trade", Limit: 100}},
		{"wide/agg", wide, messages.GetDataArgs{Table: "trade", GroupBy: []string{"sym"}, Agg: ohlc}},
		{"wide/agg-like", wide, messages.GetDataArgs{Table: "trade", GroupBy: []string{"venue"}, Agg: ohlc[:2],
			Filter: []messages.Filter{{Op: "like", Column: "sym", Value: "*.L"}}}},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				if _, err := s.Execute(c.args, c.r[0], c.r[1]); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
