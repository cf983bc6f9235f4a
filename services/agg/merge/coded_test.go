package merge

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/sg-project/sg/messages"
)

// roundTrip is p as the Agg has it: encoded, then decoded with its symbol
// columns coded.
func roundTrip(t testing.TB, p Partial) Partial {
	t.Helper()
	b, err := EncodePartial(p)
	if err != nil {
		t.Fatal(err)
	}
	q, err := DecodePartial(b)
	if err != nil {
		t.Fatal(err)
	}
	return q
}

// tableRows is a table's rows as Go values, whatever its columns' forms.
func tableRows(tb *messages.Table) [][]any {
	out := make([][]any, tb.NumRows())
	for i := range out {
		for k := range tb.Columns {
			out[i] = append(out[i], tb.Columns[k].Value(i))
		}
	}
	return out
}

// TestCodedMergeIsMerge: partials decoded with coded symbol columns (each
// with a dictionary of its own, in its own order) merge to the rows the same
// partials of strings merge to: whole, streamed in windows each decoded
// apart, with a limit, with sortCols on a symbol, and aggregated by a symbol
// with min and first of one. A row merge's symbol columns stay coded, and
// encode to the bytes the merge of strings encodes to.
func TestCodedMergeIsMerge(t *testing.T) {
	schema := []messages.ColumnSpec{{Name: "sym", Type: messages.TypeSymbol}, {Name: "venue", Type: messages.TypeSymbol},
		{Name: "px", Type: messages.TypeFloat}, {Name: "q", Type: messages.TypeInt}, {Name: "b", Type: messages.TypeBool}}
	syms := []string{"VOD.L", "BP.L", "RIO.L", "", "HSBA.L", "AZN.L"}
	aggArgs := messages.GetDataArgs{Table: "t", GroupBy: []string{"sym"}, Agg: []messages.AggSpec{
		{Name: "n", Func: "count"}, {Name: "lo", Func: "min", Column: "venue"}, {Name: "f", Func: "first", Column: "venue"}}}
	for seed := range uint64(60) {
		rng := rand.New(rand.NewPCG(seed, 11))
		var plain, coded, plainAgg, codedAgg []Partial
		var wins [][]Partial
		for range 1 + rng.IntN(5) {
			n := rng.IntN(50)
			tb := messages.NewTable(schema)
			times := make([]int64, n)
			for i := range n {
				times[i] = int64(rng.IntN(40))
				_ = tb.AppendRow(syms[rng.IntN(len(syms))], syms[rng.IntN(3)], float64(rng.IntN(4)), int64(rng.IntN(3)), rng.IntN(2) == 0)
			}
			p, err := RowsPartial(&messages.GetDataArgs{Table: "t"}, tb, times)
			if err != nil {
				t.Fatal(err)
			}
			plain, coded = append(plain, p), append(coded, roundTrip(t, p))
			var w []Partial
			for _, win := range splitWindows(p, 1+rng.IntN(9)) {
				w = append(w, roundTrip(t, win))
			}
			wins = append(wins, w)
			idx := identity(n)
			keys := []*messages.Column{tb.Col("sym")}
			inputs := []*messages.Column{nil, tb.Col("venue"), tb.Col("venue")}
			ap, err := AggregatePartial(&aggArgs, keys, inputs, times, idx)
			if err != nil {
				t.Fatal(err)
			}
			plainAgg, codedAgg = append(plainAgg, ap), append(codedAgg, roundTrip(t, ap))
		}
		for _, args := range []messages.GetDataArgs{{Table: "t"}, {Table: "t", Limit: 1 + rng.IntN(60)},
			{Table: "t", SortCols: []string{"-sym", "venue"}, Limit: 1 + rng.IntN(60)}} {
			want, err := Merge(args, plain)
			if err != nil {
				t.Fatal(err)
			}
			got, err := Merge(args, coded)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(tableRows(&got), tableRows(&want)) {
				t.Fatalf("seed %d %+v: coded merge\n%v\nwant\n%v", seed, args, tableRows(&got), tableRows(&want))
			}
			if len(args.SortCols) == 0 && got.NumRows() > 0 && !got.Col("sym").Coded() {
				t.Fatalf("seed %d: the merge of coded partials is not coded", seed)
			}
			wb, err1 := messages.Encode(&want)
			gb, err2 := messages.Encode(&got)
			if err1 != nil || err2 != nil || string(wb) != string(gb) {
				t.Fatalf("seed %d %+v: the coded merge encodes differently (%v, %v)", seed, args, err1, err2)
			}
			w, err := NewMerger(args).Stream(SourceFetches(wins, false))
			if err != nil {
				t.Fatal(err)
			}
			var streamed [][]any
			var tb messages.Table
			for more := true; more; {
				more = w.NextInto(&tb, 1+rng.IntN(20))
				streamed = append(streamed, tableRows(&tb)...)
			}
			if w.Err() != nil {
				t.Fatal(w.Err())
			}
			if fmt.Sprint(streamed) != fmt.Sprint(tableRows(&want)) {
				t.Fatalf("seed %d %+v: streamed coded merge\n%v\nwant\n%v", seed, args, streamed, tableRows(&want))
			}
		}
		want, err := Merge(aggArgs, plainAgg)
		if err != nil {
			t.Fatal(err)
		}
		got, err := Merge(aggArgs, codedAgg)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(tableRows(&got), tableRows(&want)) {
			t.Fatalf("seed %d: coded aggregation\n%v\nwant\n%v", seed, tableRows(&got), tableRows(&want))
		}
	}
}

// TestTimesFromColumn: a row partial whose time column holds its times sends
// them once (TimesCol), and decodes with the same times; one whose times
// differ from every column sends them. A TimesCol from the network that names
// no timestamp column, comes with times, or comes in an older version or an
// aggregate, is refused.
func TestTimesFromColumn(t *testing.T) {
	schema := []messages.ColumnSpec{{Name: "q", Type: messages.TypeInt}, {Name: "time", Type: messages.TypeTimestamp}}
	tb := messages.NewTable(schema)
	times := []int64{5, 7, 7, 1 << 40}
	for i, ts := range times {
		_ = tb.AppendRow(int64(i), ts)
	}
	p, err := RowsPartial(&messages.GetDataArgs{Table: "t"}, tb, times)
	if err != nil {
		t.Fatal(err)
	}
	with, err := EncodePartial(p)
	if err != nil {
		t.Fatal(err)
	}
	shifted := p
	shifted.Times = []int64{6, 7, 7, 1 << 40} // not the column's: sent
	without, err := EncodePartial(shifted)
	if err != nil {
		t.Fatal(err)
	}
	if len(with) >= len(without) {
		t.Errorf("times in the column: %d bytes, not fewer than with the times sent (%d)", len(with), len(without))
	}
	for name, c := range map[string]struct {
		b    []byte
		want []int64
	}{"from the column": {with, times}, "sent": {without, shifted.Times}} {
		got, err := DecodePartial(c.b)
		if err != nil || !slices.Equal(got.Times, c.want) || got.TimesCol != 0 {
			t.Errorf("%s: times %v tc %d (%v), want %v", name, got.Times, got.TimesCol, err, c.want)
		}
	}
	for name, raw := range map[string]map[string]any{
		"column outside":  {"v": PartialVersion, "r": p.Rows, "tc": 3},
		"negative":        {"v": PartialVersion, "r": p.Rows, "tc": -1},
		"not a timestamp": {"v": PartialVersion, "r": p.Rows, "tc": 1},
		"times sent too":  {"v": PartialVersion, "r": p.Rows, "tc": 2, "t": p.Times},
		"version 2":       {"v": 2, "r": p.Rows, "tc": 2},
		"aggregated":      {"v": PartialVersion, "r": p.Rows, "tc": 2, "g": true},
	} {
		b, err := msgpack.Marshal(raw)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := DecodePartial(b); !errors.Is(err, ErrInvalidPartial) {
			t.Errorf("%s: %v, want ErrInvalidPartial", name, err)
		}
	}
}
