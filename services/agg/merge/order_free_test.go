package merge

import (
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/sg-project/sg/messages"
)

// The Agg folds a request's aggregate partials in expectation order; folding
// them as they arrive (issue 10) would fold them in any order. Every
// aggregation's fold is order-free to the bit for finite data: sums are exact
// (fsum), ints wrap alike in any order, min/max/first/last pick by a total
// order (Column.Compare orders -0 before 0), and groups come out sorted by
// key. (Not covered, and not order-free: NaN inputs with different payloads,
// and float sums whose partial totals pass ±MaxFloat64, where the overflow
// depends on the order, as it already does on how the DAPs split the data.)
func TestAggregateFoldIsOrderFree(t *testing.T) {
	args := messages.GetDataArgs{Table: "t", GroupBy: []string{"sym"}, Agg: []messages.AggSpec{
		{Name: "n", Func: messages.AggCount}, {Name: "s", Func: messages.AggSum, Column: "px"},
		{Name: "a", Func: messages.AggAvg, Column: "px"}, {Name: "si", Func: messages.AggSum, Column: "q"},
		{Name: "ai", Func: messages.AggAvg, Column: "q"}, {Name: "lo", Func: messages.AggMin, Column: "px"},
		{Name: "hi", Func: messages.AggMax, Column: "px"}, {Name: "f", Func: messages.AggFirst, Column: "px"},
		{Name: "l", Func: messages.AggLast, Column: "px"}, {Name: "fs", Func: messages.AggFirst, Column: "sym"},
		{Name: "lq", Func: messages.AggLast, Column: "q"}}}
	schema := []messages.ColumnSpec{{Name: "sym", Type: messages.TypeSymbol}, {Name: "px", Type: messages.TypeFloat}, {Name: "q", Type: messages.TypeInt}}
	// Values that make a naive fold order-dependent: cancelling magnitudes,
	// signed zeros, infinities (one group only), wrapping ints; few distinct
	// times, so first/last tie on time and pick by value.
	floats := []float64{0, math.Copysign(0, -1), 1, -1, 0.1, 1e300, -1e300, 1e-300, 3.5, math.Inf(1), math.Inf(-1)}
	ints := []int64{0, 1, -1, math.MaxInt64, math.MinInt64, 7}
	for seed := uint64(1); seed <= 20; seed++ {
		rng := rand.New(rand.NewPCG(seed, 3))
		var parts []Partial
		for range 2 + rng.IntN(14) {
			tb := messages.NewTable(schema)
			n := rng.IntN(30)
			times := make([]int64, n)
			for i := range times {
				times[i] = int64(rng.IntN(4))
				sym := fmt.Sprintf("S%d", rng.IntN(5))
				px := floats[rng.IntN(len(floats))]
				if math.IsInf(px, 0) && sym != "S0" {
					px = 2
				}
				if err := tb.AppendRow(sym, px, ints[rng.IntN(len(ints))]); err != nil {
					t.Fatal(err)
				}
			}
			c := tb.Columns
			inputs := []*messages.Column{nil, &c[1], &c[1], &c[2], &c[2], &c[1], &c[1], &c[1], &c[1], &c[0], &c[2]}
			p, err := AggregatePartial(&args, []*messages.Column{&c[0]}, inputs, times, identity(n))
			if err != nil {
				t.Fatal(err)
			}
			parts = append(parts, roundTrip(t, p))
		}
		var want []byte
		for perm := range 12 {
			order := parts
			if perm > 0 {
				order = append([]Partial(nil), parts...)
				rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
			}
			got, err := Merge(args, order)
			if err != nil {
				t.Fatal(err)
			}
			b, err := messages.EncodeTableMsgpack(got, 1, 0) // the answer's bytes: floats to the bit
			if err != nil {
				t.Fatal(err)
			}
			if perm == 0 {
				want = b
			} else if !bytes.Equal(b, want) {
				t.Fatalf("seed %d: %d partials folded in another order give another answer", seed, len(parts))
			}
		}
	}
}
