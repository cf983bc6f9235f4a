package merge

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/sg-project/sg/messages"
	"github.com/sg-project/sg/services/cputime"
)

// BenchmarkOrder is the k-way merge's order alone (Windows.order, no
// gather): 3 sources of 100,000 rows each at random times in the same span,
// as the demo's three regions' trades are, so that which source is least
// changes at random from row to row; and 9, as 9 overlapping portions.
//
//	go test ./services/agg/merge -run '^$' -bench Order
func BenchmarkOrder(b *testing.B) {
	schema := []messages.ColumnSpec{{Name: "v", Type: messages.TypeInt}}
	for _, sources := range []int{3, 9} {
		rng := rand.New(rand.NewPCG(1, uint64(sources)))
		var parts []*Partial
		const rows = 100_000
		for range sources {
			tb := messages.NewTable(schema)
			times := make([]int64, rows)
			t := int64(0)
			for i := range times {
				t += 1 + rng.Int64N(2e9)
				times[i] = t
				tb.Columns[0].Ints = append(tb.Columns[0].Ints, rng.Int64N(100))
			}
			parts = append(parts, &Partial{Version: PartialVersion, Rows: tb, Times: times})
		}
		b.Run(fmt.Sprint(sources), func(b *testing.B) {
			var refs []rowRef
			for b.Loop() {
				w := rowWindows(schema, parts, 0)
				w.refs = refs[:0]
				w.order(math.MaxInt)
				refs = w.refs
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(sources*rows), "ns/row")
		})
	}
}

// BenchmarkEncodeRuns is a large msgpack answer written whole
// (Merger.EncodeRuns): the demo's trade table over 3 days, 3 regions whose
// trades interleave at random in time (a source's runs average 1.5 rows), each
// in 3 tiers that stand apart in time (59 h, 12 h, 1 h), a portion's rows in
// windows of 50,000 (the DAP's 512 KiB), decoded as the Agg has them (symbol
// columns coded): 250,000 rows in 9 portions.
//
//	go test ./services/agg/merge -run '^$' -bench EncodeRuns
func BenchmarkEncodeRuns(b *testing.B) {
	runs, rows := demoTrades(b, 250_000)
	b.ReportAllocs()
	var size int
	cpu0, _ := cputime.Process()
	for b.Loop() {
		out, err := NewMerger(messages.GetDataArgs{Table: "trade"}).EncodeRuns(runs, rows, size, 2)
		if err != nil {
			b.Fatal(err)
		}
		size = len(out)
		messages.ReleaseBuffer(out)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(rows), "ns/row")
	// CPU, all threads: what bounds a large answer, and what other work on
	// the machine blurs less than elapsed time.
	if cpu1, ok := cputime.Process(); ok && cpu1 > cpu0 {
		b.ReportMetric(float64((cpu1-cpu0).Nanoseconds())/float64(b.N)/float64(rows), "cpu-ns/row")
	}
}

// demoTrades is about total rows of the demo's trade table as the Agg holds
// them for EncodeRuns: a run of windows per portion (region and tier).
func demoTrades(tb testing.TB, total int) (runs [][]Partial, rows int) {
	schema := []messages.ColumnSpec{{Name: "time", Type: messages.TypeTimestamp}, {Name: "sym", Type: messages.TypeSymbol},
		{Name: "region", Type: messages.TypeSymbol}, {Name: "price", Type: messages.TypeFloat}, {Name: "size", Type: messages.TypeInt},
		{Name: "side", Type: messages.TypeSymbol}, {Name: "venue", Type: messages.TypeSymbol}, {Name: "block", Type: messages.TypeBool}}
	regions := []string{"eu", "us", "asia"}
	rng := rand.New(rand.NewPCG(7, 7))
	const hour = int64(3600e9)
	tiers := [][2]int64{{0, 59 * hour}, {59 * hour, 71 * hour}, {71 * hour, 72 * hour}}
	for r, region := range regions {
		for _, tier := range tiers {
			n := int(float64(tier[1]-tier[0]) / float64(72*hour) * float64(total/3))
			times := make([]int64, n)
			for i := range times {
				times[i] = tier[0] + rng.Int64N(tier[1]-tier[0])
			}
			slices.Sort(times)
			t := messages.NewTable(schema)
			for _, ts := range times {
				if err := t.AppendRow(ts, fmt.Sprintf("%s%d", region, rng.IntN(6)), region, 100+rng.Float64()*10,
					rng.Int64N(1000), []string{"buy", "sell"}[rng.IntN(2)], fmt.Sprintf("V%d%d", r, rng.IntN(4)), rng.IntN(20) == 0); err != nil {
					tb.Fatal(err)
				}
			}
			p, err := RowsPartial(&messages.GetDataArgs{Table: "trade"}, t, t.Columns[0].Ints)
			if err != nil {
				tb.Fatal(err)
			}
			var run []Partial
			for _, w := range splitWindows(p, 50_000) {
				run = append(run, roundTrip(tb, w))
			}
			runs = append(runs, run)
			rows += n
		}
	}
	return runs, rows
}
