package parquetdb

import (
	"testing"
	"time"

	"github.com/sg-project/sg/messages"
	"github.com/sg-project/sg/services/dap/demo"
)

// A small limit over a long range (issue 10's small getData without a
// narrow time range), and a day without one: 5 days of 40,000 trades in row
// groups of 8,192 rows.
func BenchmarkLimitOverLongRange(b *testing.B) {
	dir := b.TempDir()
	cfg := demo.Config{Seed: 11, TradesPerDay: 40_000}
	for d := range 5 {
		from, to := day0.Add(time.Duration(d)*24*time.Hour), day0.Add(time.Duration(d+1)*24*time.Hour)
		rows, err := cfg.Rows(demo.Trade, "eu", from, to)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := Write(dir, tradeDef(), rows, from.UnixNano(), to.UnixNano(), 8192); err != nil {
			b.Fatal(err)
		}
	}
	for _, c := range []struct {
		name string
		q    messages.GetDataArgs
	}{
		{"limit10", messages.GetDataArgs{Table: demo.Trade, Limit: 10}},
		{"limit1000_filter", messages.GetDataArgs{Table: demo.Trade, Limit: 1000, Columns: []string{"time", "price"},
			Filter: []messages.Filter{{Op: "=", Column: "sym", Value: "BP.L"}}}},
		// Without a limit every row group of the range is read, as before.
		{"day", messages.GetDataArgs{Table: demo.Trade, StartTS: day0.Add(48 * time.Hour), EndTS: day0.Add(72 * time.Hour)}},
		{"day_filter", messages.GetDataArgs{Table: demo.Trade, StartTS: day0.Add(48 * time.Hour), EndTS: day0.Add(72 * time.Hour),
			Filter: []messages.Filter{{Op: "=", Column: "sym", Value: "BP.L"}}}},
	} {
		b.Run(c.name, func(b *testing.B) {
			cat, err := Open(dir, demo.Defs(), 0)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := cat.Execute(c.q, time.Time{}, time.Time{}); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(cat.Stats().RowGroups.Load())/float64(b.N), "rowgroups/op")
		})
	}
}
