package merge

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/sg-project/sg/messages"
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
