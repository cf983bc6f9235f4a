package engine_test

import (
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/sg-project/sg/messages"
	"github.com/sg-project/sg/services/agg/merge"
	"github.com/sg-project/sg/services/dap/engine"
)

var t0 = time.Date(2024, 1, 2, 0, 0, 0, 0, time.UTC)

var propDef = engine.TableDef{Name: "t", Labels: []string{"region"}, Columns: []messages.ColumnSpec{
	{Name: "time", Type: messages.TypeTimestamp}, {Name: "region", Type: messages.TypeSymbol},
	{Name: "sym", Type: messages.TypeSymbol}, {Name: "x", Type: messages.TypeFloat},
	{Name: "n", Type: messages.TypeInt}, {Name: "flag", Type: messages.TypeBool},
	{Name: "note", Type: messages.TypeString},
}}

var (
	propRegions = []string{"eu", "us", "asia"}
	propSyms    = []string{"A", "B", "C", "D"}
	propNotes   = []string{"alpha", "beta", "gamma", "ab", ""}
)

// randomRows draws rows with many equal times, equal rows and floats of wildly different
// magnitudes, which is what breaks a merge that is only approximately right.
func randomRows(rng *rand.Rand, n int) messages.Table {
	tb := messages.NewTable(propDef.Columns)
	for i := 0; i < n; i++ {
		x := rng.NormFloat64() * math.Pow(10, float64(rng.IntN(24)-12))
		if rng.IntN(10) == 0 {
			x = float64(rng.IntN(3)) // exact duplicates, for ties in min/max/first/last
		}
		err := tb.AppendRow(t0.Add(time.Duration(rng.IntN(120))*time.Second), propRegions[rng.IntN(3)],
			propSyms[rng.IntN(4)], x, rng.Int64N(1000)-500, rng.IntN(2) == 0, propNotes[rng.IntN(5)])
		if err != nil {
			panic(err)
		}
	}
	return tb
}

func randomTime(rng *rand.Rand) time.Time {
	return t0.Add(time.Duration(rng.IntN(130)-5) * time.Second)
}

func randomArgs(rng *rand.Rand) messages.GetDataArgs {
	a := messages.GetDataArgs{Table: "t"}
	if rng.IntN(3) > 0 {
		a.StartTS = randomTime(rng)
		a.EndTS = a.StartTS.Add(time.Duration(1+rng.IntN(100)) * time.Second)
	}
	if rng.IntN(3) == 0 {
		a.Labels = messages.LabelSelector{"region": {propRegions[rng.IntN(3)], propRegions[rng.IntN(3)]}}
	}
	filters := []func() messages.Filter{
		func() messages.Filter { return messages.Filter{Op: ">", Column: "x", Value: rng.NormFloat64()} },
		func() messages.Filter { return messages.Filter{Op: "<=", Column: "n", Value: rng.Int64N(1000) - 500} },
		func() messages.Filter {
			return messages.Filter{Op: "in", Column: "sym", Value: []any{propSyms[rng.IntN(4)], propSyms[rng.IntN(4)]}}
		},
		func() messages.Filter {
			return messages.Filter{Op: "within", Column: "time", Value: []any{randomTime(rng), randomTime(rng).Add(time.Minute)}}
		},
		func() messages.Filter {
			return messages.Filter{Op: "like", Column: "note", Value: []string{"a*", "*a", "?e*", "*"}[rng.IntN(4)]}
		},
		func() messages.Filter { return messages.Filter{Op: "=", Column: "flag", Value: rng.IntN(2) == 0} },
		func() messages.Filter { return messages.Filter{Op: "<>", Column: "sym", Value: propSyms[rng.IntN(4)]} },
		func() messages.Filter { return messages.Filter{Op: ">=", Column: "n", Value: float64(rng.IntN(100))} },
	}
	for k := rng.IntN(3); k > 0; k-- {
		a.Filter = append(a.Filter, filters[rng.IntN(len(filters))]())
	}
	var outputs []string
	if rng.IntN(2) == 0 { // row query
		cols := []string{"time", "region", "sym", "x", "n", "flag", "note"}
		rng.Shuffle(len(cols), func(i, j int) { cols[i], cols[j] = cols[j], cols[i] })
		if k := rng.IntN(len(cols) + 1); k > 0 {
			a.Columns = cols[:k]
			outputs = a.Columns
		} else {
			outputs = cols
		}
	} else {
		keys := []string{"sym", "region", "flag", "note"}
		rng.Shuffle(len(keys), func(i, j int) { keys[i], keys[j] = keys[j], keys[i] })
		a.GroupBy = keys[:rng.IntN(3)]
		outputs = slices.Clone(a.GroupBy)
		anyCols := []string{"time", "region", "sym", "x", "n", "flag", "note"}
		specs := []messages.AggSpec{
			{Func: "count"}, {Func: "count", Column: "sym"}, {Func: "sum", Column: "x"}, {Func: "sum", Column: "n"},
			{Func: "avg", Column: "x"}, {Func: "avg", Column: "n"},
			{Func: "min", Column: anyCols[rng.IntN(7)]}, {Func: "max", Column: anyCols[rng.IntN(7)]},
			{Func: "first", Column: anyCols[rng.IntN(7)]}, {Func: "last", Column: anyCols[rng.IntN(7)]},
		}
		rng.Shuffle(len(specs), func(i, j int) { specs[i], specs[j] = specs[j], specs[i] })
		for i, s := range specs[:rng.IntN(len(specs)+1)] {
			s.Name = fmt.Sprintf("a%d_%s", i, s.Func)
			a.Agg = append(a.Agg, s)
			outputs = append(outputs, s.Name)
		}
		if len(a.GroupBy) == 0 && len(a.Agg) == 0 {
			a.Agg = []messages.AggSpec{{Name: "n", Func: "count"}}
			outputs = []string{"n"}
		}
	}
	for k := rng.IntN(3); k > 0; k-- {
		c := outputs[rng.IntN(len(outputs))]
		if rng.IntN(2) == 0 {
			c = "-" + c
		}
		a.SortCols = append(a.SortCols, c)
	}
	if rng.IntN(2) == 0 {
		a.Limit = 1 + rng.IntN(20)
	}
	return a
}

func newStore(t testing.TB, rows messages.Table) *engine.Store {
	s := engine.NewStore()
	if err := s.Create(propDef); err != nil {
		t.Fatal(err)
	}
	if err := s.Append("t", rows); err != nil {
		t.Fatal(err)
	}
	return s
}

// splitByRegion puts each region's rows in its own store, as DAPs of different label sets.
func splitByRegion(t testing.TB, rows messages.Table) []*engine.Store {
	var stores []*engine.Store
	for _, r := range propRegions {
		var idx []int
		for i, v := range rows.Col("region").Strings {
			if v == r {
				idx = append(idx, i)
			}
		}
		stores = append(stores, newStore(t, rows.Take(idx)))
	}
	return stores
}

// portions cuts all time into 1 to 4 disjoint ranges; the outer ones are open.
func portions(rng *rand.Rand) [][2]time.Time {
	cuts := []time.Time{{}}
	for k := rng.IntN(4); k > 0; k-- {
		cuts = append(cuts, randomTime(rng))
	}
	slices.SortFunc(cuts[1:], func(a, b time.Time) int { return a.Compare(b) })
	cuts = slices.CompactFunc(cuts, func(a, b time.Time) bool { return a.Equal(b) })
	var out [][2]time.Time
	for i := range cuts {
		var end time.Time
		if i+1 < len(cuts) {
			end = cuts[i+1]
		}
		out = append(out, [2]time.Time{cuts[i], end})
	}
	return out
}

func tableBytes(t testing.TB, tb messages.Table) string {
	b, err := tb.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%v\n%s", tb.Schema(), b)
}

// TestSplitMergeEqualsWhole is the exactness property: executing on all data at once equals
// merging executions on any split into label sets (stores) and disjoint time ranges
// (portions), whatever the order the partials arrive in, bit for bit.
func TestSplitMergeEqualsWhole(t *testing.T) {
	const iterations = 400
	nonEmpty := 0
	for seed := uint64(1); seed <= iterations; seed++ {
		rng := rand.New(rand.NewPCG(seed, 42))
		rows := randomRows(rng, 1+rng.IntN(400))
		args := randomArgs(rng)
		whole, err := newStore(t, rows).Execute(args, time.Time{}, time.Time{})
		if err != nil {
			t.Fatalf("seed %d: whole: %v\nargs %+v", seed, err, args)
		}
		want, err := merge.Merge(args, []merge.Partial{whole})
		if err != nil {
			t.Fatalf("seed %d: merge whole: %v", seed, err)
		}
		var parts []merge.Partial
		for _, s := range splitByRegion(t, rows) {
			for _, p := range portions(rng) {
				part, err := s.Execute(args, p[0], p[1])
				if err != nil {
					t.Fatalf("seed %d: portion %v: %v", seed, p, err)
				}
				// Every partial crosses NATS as msgpack.
				b, err := merge.EncodePartial(part)
				if err != nil {
					t.Fatal(err)
				}
				if part, err = merge.DecodePartial(b); err != nil {
					t.Fatalf("seed %d: decode partial: %v", seed, err)
				}
				parts = append(parts, part)
			}
		}
		rng.Shuffle(len(parts), func(i, j int) { parts[i], parts[j] = parts[j], parts[i] })
		got, err := merge.Merge(args, parts)
		if err != nil {
			t.Fatalf("seed %d: merge parts: %v", seed, err)
		}
		if g, w := tableBytes(t, got), tableBytes(t, want); g != w {
			a, _ := args.MarshalJSON()
			t.Fatalf("seed %d: split != whole\nargs %s\n got %s\nwant %s", seed, a, g, w)
		}
		if want.NumRows() > 0 {
			nonEmpty++
		}
	}
	// Guard against a vacuous pass (e.g. every query filtering everything out).
	if nonEmpty < iterations/2 {
		t.Fatalf("only %d of %d queries returned rows", nonEmpty, iterations)
	}
}

// The same property for the data loaded from bytes: the whole answer does not depend on
// the physical order of rows with equal times.
func TestAnswerIndependentOfArrivalOrder(t *testing.T) {
	for seed := uint64(1); seed <= 100; seed++ {
		rng := rand.New(rand.NewPCG(seed, 7))
		rows := randomRows(rng, 200)
		args := randomArgs(rng)
		perm := rng.Perm(rows.NumRows())
		a, err1 := newStore(t, rows).Execute(args, time.Time{}, time.Time{})
		b, err2 := newStore(t, rows.Take(perm)).Execute(args, time.Time{}, time.Time{})
		if err1 != nil || err2 != nil {
			t.Fatal(err1, err2)
		}
		ta, _ := merge.Merge(args, []merge.Partial{a})
		tb, _ := merge.Merge(args, []merge.Partial{b})
		if !bytes.Equal([]byte(tableBytes(t, ta)), []byte(tableBytes(t, tb))) {
			t.Fatalf("seed %d: answer depends on arrival order", seed)
		}
	}
}
