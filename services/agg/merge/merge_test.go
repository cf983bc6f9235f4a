package merge

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"runtime"
	"slices"
	"testing"

	"github.com/sg-project/sg/messages"
	"github.com/vmihailenco/msgpack/v5"
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
		"times":          {Partial{Version: PartialVersion, Rows: good.Rows}, ErrInvalidPartial},
		"aggregated":     {Partial{Version: PartialVersion, Aggregated: true, Groups: 1}, ErrSchemaMismatch},
		"groups vs keys": {Partial{Version: PartialVersion, Aggregated: true, Groups: 2}, ErrInvalidPartial},
		"state length": {Partial{Version: PartialVersion, Aggregated: true, Groups: 1,
			Aggs: []AggState{{Name: "n", Func: messages.AggCount, Count: []int64{1, 2}}}}, ErrInvalidPartial},
		"agg type": {Partial{Version: PartialVersion, Aggregated: true, Groups: 0,
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
	// Nine label sets interleaved in time, as a whole table over regions
	// is: most runs are a row or two.
	var mixed []Partial
	for p := 0; p < 9; p++ {
		tb := messages.NewTable(schema)
		times := make([]int64, 20000)
		for i := range times {
			times[i] = int64(i*9+rng.IntN(18)) * 1000
			_ = tb.AppendRow(fmt.Sprintf("S%d", rng.IntN(50)), rng.Float64()*100, rng.Int64N(1000))
		}
		rp, err := RowsPartial(&rowArgs, tb, times)
		if err != nil {
			b.Fatal(err)
		}
		mixed = append(mixed, rp)
	}
	// The same, as the Agg has them: encoded and decoded (DecodePartial).
	var decoded []Partial
	for _, p := range mixed {
		decoded = append(decoded, roundTrip(b, p))
	}
	b.Run("rows-interleaved-decoded", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := Merge(rowArgs, decoded); err != nil {
				b.Fatal(err)
			}
		}
	})
	// A whole table as the demo fleet holds it: three regions interleaved
	// in time, each in three tiers that stand apart in time (a portion a
	// region and tier), every portion in windows of 20,000 rows at most:
	// the Agg's large answer, merged by Stream and written by EncodeRest.
	var tiers [][]Partial
	for region := range 3 {
		lo := 0
		for _, n := range []int{60000, 20000, 2000} {
			var run []Partial
			for w := 0; w < n; w += 20000 {
				k := min(20000, n-w)
				tb := messages.NewTable(schema)
				times := make([]int64, k)
				for i := range times {
					times[i] = int64((lo+w+i)*3+region) * 1000
					_ = tb.AppendRow(fmt.Sprintf("S%d", rng.IntN(50)), rng.Float64()*100, rng.Int64N(1000))
				}
				rp, err := RowsPartial(&rowArgs, tb, times)
				if err != nil {
					b.Fatal(err)
				}
				run = append(run, roundTrip(b, rp))
			}
			tiers = append(tiers, run)
			lo += n
		}
	}
	b.Run("rows-tiers-encode", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			w, err := NewMerger(rowArgs).Stream(SourceFetches(tiers, false))
			if err != nil {
				b.Fatal(err)
			}
			if _, err := w.EncodeRest(246000, 0, runtime.GOMAXPROCS(0)); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("rows-tiers-encode-runs", func(b *testing.B) { // the same, held whole: EncodeRuns
		b.ReportAllocs()
		for b.Loop() {
			if _, err := NewMerger(rowArgs).EncodeRuns(tiers, 246000, 0, runtime.GOMAXPROCS(0)); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("rows-interleaved", func(b *testing.B) {
		for b.Loop() {
			if _, err := Merge(rowArgs, mixed); err != nil {
				b.Fatal(err)
			}
		}
	})
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

// TestMergeRowsMatchesSort: the k-way merge (by runs) equals sorting every
// partial's rows together in canonical order and cutting at the limit, for
// random partials that interleave, tie on time, stand apart in time (tiers) or
// are empty. The seed is printed on failure.
func TestMergeRowsMatchesSort(t *testing.T) {
	schema := []messages.ColumnSpec{{Name: "sym", Type: messages.TypeSymbol}, {Name: "px", Type: messages.TypeFloat},
		{Name: "q", Type: messages.TypeInt}, {Name: "b", Type: messages.TypeBool}}
	for seed := range uint64(200) {
		rng := rand.New(rand.NewPCG(seed, 7))
		var parts []Partial
		all := messages.NewTable(schema)
		var allTimes []int64
		for p := range rng.IntN(6) + 1 {
			n := rng.IntN(40)
			base := int64(0)
			if rng.IntN(2) == 0 {
				base = int64(p) * 1000 // apart in time from the others
			}
			times := make([]int64, n)
			tb := messages.NewTable(schema)
			for i := range n {
				times[i] = base + int64(rng.IntN(30))
				_ = tb.AppendRow(fmt.Sprintf("S%d", rng.IntN(3)), float64(rng.IntN(4)), int64(rng.IntN(3)), rng.IntN(2) == 0)
			}
			rp, err := RowsPartial(&messages.GetDataArgs{Table: "t"}, tb, times)
			if err != nil {
				t.Fatal(err)
			}
			parts = append(parts, rp)
			for i := range n {
				all.AppendRowFrom(&rp.Rows, i)
			}
			allTimes = append(allTimes, rp.Times...)
		}
		limit := 0
		if rng.IntN(2) == 0 {
			limit = rng.IntN(60) + 1
		}
		idx := identity(all.NumRows())
		slices.SortStableFunc(idx, func(i, j int) int { return compareRows(&all, allTimes, i, &all, allTimes, j) })
		if limit > 0 && len(idx) > limit {
			idx = idx[:limit]
		}
		want := all.Take(idx)
		got, err := Merge(messages.GetDataArgs{Table: "t", Limit: limit}, parts)
		if err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		if !reflect.DeepEqual(got.Columns, want.Columns) && !(got.NumRows() == 0 && want.NumRows() == 0) {
			t.Fatalf("seed %d (limit %d): merged\n%v\nwant\n%v", seed, limit, got.Columns, want.Columns)
		}
	}
}

// TestTimesWire: a row partial's times round-trip, and times from the network
// that claim more values than their bytes hold, or carry trailing or broken
// bytes, are refused before anything is allocated for them.
func TestTimesWire(t *testing.T) {
	p := rowsPartial(t, []int64{-5, 0, 0, 1 << 62, -(1 << 62)}, []int64{1, 2, 3, 4, 5})
	b, err := EncodePartial(p)
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodePartial(b)
	if err != nil || !slices.Equal(got.Times, p.Times) {
		t.Fatalf("times %v (%v), want %v", got.Times, err, p.Times)
	}
	// A version 1 partial (times as integers, from a DAP not upgraded yet).
	for _, times := range [][]int64{{}, {7}, {7, 8}, {-5, 0, 0, 1 << 62}} {
		vals := make([]int64, len(times))
		old := rowsPartial(t, times, vals)
		b, err := msgpack.Marshal(map[string]any{"v": 1, "r": old.Rows, "t": times})
		if err != nil {
			t.Fatal(err)
		}
		got, err := DecodePartial(b)
		if err != nil || !slices.Equal(got.Times, times) {
			t.Fatalf("version 1 times %v: %v (%v)", times, got.Times, err)
		}
	}
	for name, raw := range map[string][]any{
		"count above bytes": {int64(1000), []byte{2}},
		"trailing bytes":    {int64(1), []byte{2, 2}},
		"broken varint":     {int64(1), []byte{0x80}},
		"negative count":    {int64(-1), []byte{}},
	} {
		bad, err := msgpack.Marshal(map[string]any{"v": PartialVersion, "r": p.Rows, "t": raw})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := DecodePartial(bad); !errors.Is(err, ErrInvalidPartial) {
			t.Errorf("%s: %v, want ErrInvalidPartial", name, err)
		}
	}
}
