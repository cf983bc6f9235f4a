package merge

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/sg-project/sg/messages"
)

func rowsPartial(t testing.TB, times []int64, vals []int64) Partial {
	tb := messages.NewTable([]messages.ColumnSpec{{Name: "v", Type: messages.TypeInt}})
	for _, v := range vals {
		if err := tb.AppendRow(v); err != nil {
			t.Fatal(err)
		}
	}
	p, err := RowsPartial(&messages.GetDataArgs{Table: "t"}, tb, times)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestMergeRowsInTimeOrderWithLimit(t *testing.T) {
	a := rowsPartial(t, []int64{1, 4, 6}, []int64{10, 40, 60})
	b := rowsPartial(t, []int64{2, 3, 5}, []int64{20, 30, 50})
	got, err := Merge(messages.GetDataArgs{Table: "t", Limit: 4}, []Partial{b, a})
	if err != nil {
		t.Fatal(err)
	}
	if v := got.Col("v").Ints; fmt.Sprint(v) != "[10 20 30 40]" {
		t.Fatalf("merged %v, want [10 20 30 40]", v)
	}
	got, _ = Merge(messages.GetDataArgs{Table: "t", SortCols: []string{"-v"}, Limit: 2}, []Partial{a, b})
	if v := got.Col("v").Ints; fmt.Sprint(v) != "[60 50]" {
		t.Fatalf("sorted descending %v, want [60 50]", v)
	}
}

func TestMergeRejectsBadPartials(t *testing.T) {
	good := rowsPartial(t, []int64{1}, []int64{1})
	args := messages.GetDataArgs{Table: "t"}
	cases := map[string]struct {
		p    Partial
		want error
	}{
		"version":        {Partial{Version: 9, Rows: good.Rows, Times: good.Times}, ErrInvalidPartial},
		"times":          {Partial{Version: 1, Rows: good.Rows}, ErrInvalidPartial},
		"aggregated":     {Partial{Version: 1, Aggregated: true, Groups: 1}, ErrSchemaMismatch},
		"groups vs keys": {Partial{Version: 1, Aggregated: true, Groups: 2}, ErrInvalidPartial},
		"state length": {Partial{Version: 1, Aggregated: true, Groups: 1,
			Aggs: []AggState{{Name: "n", Func: messages.AggCount, Count: []int64{1, 2}}}}, ErrInvalidPartial},
		"agg type": {Partial{Version: 1, Aggregated: true, Groups: 0,
			Aggs: []AggState{{Name: "s", Func: messages.AggSum, Type: messages.TypeSymbol}}}, ErrAggType},
	}
	for name, c := range cases {
		if _, err := Merge(args, []Partial{good, c.p}); !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", name, err, c.want)
		}
	}
	other := good
	other.Rows = messages.NewTable([]messages.ColumnSpec{{Name: "v", Type: messages.TypeFloat}})
	other.Times = nil
	if _, err := Merge(args, []Partial{good, other}); !errors.Is(err, ErrSchemaMismatch) {
		t.Errorf("schema mismatch: %v", err)
	}
	for n := range 64 { // truncated or random bytes never panic
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(rand.N(256))
		}
		if _, err := DecodePartial(b); err == nil && n == 0 {
			t.Error("empty bytes decoded")
		}
	}
}

// BenchmarkMerge100 merges 100 partials: 100 DAP portions of 1,000 rows, and of 50
// groups with every aggregation.
func BenchmarkMerge100(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 2))
	schema := []messages.ColumnSpec{{Name: "sym", Type: messages.TypeSymbol}, {Name: "px", Type: messages.TypeFloat}, {Name: "q", Type: messages.TypeInt}}
	aggArgs := messages.GetDataArgs{Table: "t", GroupBy: []string{"sym"}, Agg: []messages.AggSpec{
		{Name: "n", Func: "count"}, {Name: "s", Func: "sum", Column: "px"}, {Name: "a", Func: "avg", Column: "q"},
		{Name: "lo", Func: "min", Column: "px"}, {Name: "f", Func: "first", Column: "px"}, {Name: "l", Func: "last", Column: "q"}}}
	rowArgs := messages.GetDataArgs{Table: "t", SortCols: nil}
	var rowParts, aggParts []Partial
	for p := 0; p < 100; p++ {
		tb := messages.NewTable(schema)
		times := make([]int64, 1000)
		for i := range times {
			times[i] = int64(p*1000 + i)
			_ = tb.AppendRow(fmt.Sprintf("S%d", rng.IntN(50)), rng.Float64()*100, rng.Int64N(1000))
		}
		rp, err := RowsPartial(&rowArgs, tb, times)
		if err != nil {
			b.Fatal(err)
		}
		rowParts = append(rowParts, rp)
		keys := []*messages.Column{&tb.Columns[0]}
		inputs := []*messages.Column{nil, &tb.Columns[1], &tb.Columns[2], &tb.Columns[1], &tb.Columns[1], &tb.Columns[2]}
		ap, err := AggregatePartial(&aggArgs, keys, inputs, times, identity(1000))
		if err != nil {
			b.Fatal(err)
		}
		aggParts = append(aggParts, ap)
	}
	b.Run("rows", func(b *testing.B) {
		for b.Loop() {
			if _, err := Merge(rowArgs, rowParts); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("groups", func(b *testing.B) {
		for b.Loop() {
			if _, err := Merge(aggArgs, aggParts); err != nil {
				b.Fatal(err)
			}
		}
	})
}
