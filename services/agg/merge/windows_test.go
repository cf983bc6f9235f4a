package merge

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/sg-project/sg/messages"
)

// windowsAll concatenates every window of n rows; with reuse, each window is
// read into the table of the one before (NextInto).
func windowsAll(t *testing.T, args messages.GetDataArgs, parts []Partial, n int, reuse bool) ([]int64, int) {
	t.Helper()
	m := NewMerger(args)
	for _, p := range parts {
		if err := m.Add(p); err != nil {
			t.Fatal(err)
		}
	}
	w, err := m.Windows()
	if err != nil {
		t.Fatal(err)
	}
	var got []int64
	calls := 0
	var tb messages.Table
	for more := true; more; {
		if reuse {
			more = w.NextInto(&tb, n)
		} else {
			tb, more = w.Next(n)
		}
		calls++
		if tb.NumRows() > n {
			t.Fatalf("window of %d rows, asked for at most %d", tb.NumRows(), n)
		}
		if c := tb.Col("v"); c != nil {
			got = append(got, c.Ints...)
		}
		if calls > 10_000 {
			t.Fatal("windows never end")
		}
	}
	return got, calls
}

// The windows of an answer, concatenated, are the answer Merge gives, for
// any window size, with and without a limit and sortCols.
func TestWindowsConcatenateToResult(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	var parts []Partial
	for range 5 {
		var times, vals []int64
		ts := int64(0)
		for range rng.IntN(50) {
			ts += rng.Int64N(5)
			times, vals = append(times, ts), append(vals, rng.Int64N(1000))
		}
		parts = append(parts, rowsPartial(t, times, vals))
	}
	for _, args := range []messages.GetDataArgs{{Table: "t"}, {Table: "t", Limit: 17}, {Table: "t", SortCols: []string{"-v"}, Limit: 9}} {
		want, err := Merge(args, parts)
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range []int{1, 3, 16, 1000} {
			for _, reuse := range []bool{false, true} {
				got, calls := windowsAll(t, args, parts, n, reuse)
				if fmt.Sprint(got) != fmt.Sprint(want.Col("v").Ints) {
					t.Fatalf("args %+v, windows of %d (reuse %v): %v, want %v", args, n, reuse, got, want.Col("v").Ints)
				}
				if wantCalls := max(1, (len(got)+n-1)/n); calls != wantCalls {
					t.Fatalf("args %+v: %d windows of %d for %d rows, want %d", args, calls, n, len(got), wantCalls)
				}
			}
		}
	}
	// No partial: one empty window.
	if got, calls := windowsAll(t, messages.GetDataArgs{Table: "t"}, nil, 4, true); len(got) != 0 || calls != 1 {
		t.Fatalf("no partial: %v in %d windows", got, calls)
	}
}

// splitWindows cuts p into windows of at most n rows (at least one window).
func splitWindows(p Partial, n int) []Partial {
	var out []Partial
	for lo := 0; lo == 0 || lo < p.Rows.NumRows(); lo += n {
		hi := min(lo+n, p.Rows.NumRows())
		out = append(out, Partial{Version: PartialVersion, Rows: p.Rows.Slice(lo, hi), Times: p.Times[lo:hi]})
	}
	return out
}

// A streamed merge of partials cut in windows is the answer Merge gives of
// the whole partials, for any window sizes, with and without limit, sortCols
// and empty windows.
func TestStreamIsMerge(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 5))
	for round := range 40 {
		var parts []Partial
		var wins [][]Partial
		for range 1 + rng.IntN(5) {
			var times, vals []int64
			ts := int64(0)
			for range rng.IntN(60) {
				ts += rng.Int64N(5)
				times, vals = append(times, ts), append(vals, rng.Int64N(1000))
			}
			p := rowsPartial(t, times, vals)
			parts = append(parts, p)
			w := splitWindows(p, 1+rng.IntN(20))
			if rng.IntN(3) == 0 { // an empty window in the middle
				k := rng.IntN(len(w))
				w = append(w[:k], append([]Partial{{Version: PartialVersion, Rows: p.Rows.Slice(0, 0), Times: []int64{}}}, w[k:]...)...)
			}
			wins = append(wins, w)
		}
		for _, args := range []messages.GetDataArgs{{Table: "t"}, {Table: "t", Limit: 17}, {Table: "t", SortCols: []string{"-v"}, Limit: 9}} {
			want, err := Merge(args, parts)
			if err != nil {
				t.Fatal(err)
			}
			w, err := NewMerger(args).Stream(SourceFetches(wins, false))
			if err != nil {
				t.Fatal(err)
			}
			var got []int64
			var tb messages.Table
			for more := true; more; {
				more = w.NextInto(&tb, 1+rng.IntN(30))
				if c := tb.Col("v"); c != nil {
					got = append(got, c.Ints...)
				}
			}
			if w.Err() != nil {
				t.Fatal(w.Err())
			}
			if fmt.Sprint(got) != fmt.Sprint(want.Col("v").Ints) && !(len(got) == 0 && want.NumRows() == 0) {
				t.Fatalf("round %d args %+v: %v, want %v", round, args, got, want.Col("v").Ints)
			}
		}
	}
}

// A fetch that fails, or a window of another shape, ends the stream with Err.
func TestStreamFetchError(t *testing.T) {
	p := rowsPartial(t, []int64{1, 2, 3, 4}, []int64{1, 2, 3, 4})
	boom := fmt.Errorf("boom")
	calls := 0
	bad := func() (Partial, bool, error) {
		calls++
		if calls == 1 {
			return Partial{Version: PartialVersion, Rows: p.Rows.Slice(0, 2), Times: p.Times[:2]}, true, nil
		}
		return Partial{}, false, boom
	}
	w, err := NewMerger(messages.GetDataArgs{Table: "t"}).Stream([]Fetch{bad, SourceFetches([][]Partial{{p}}, false)[0]})
	if err != nil {
		t.Fatal(err)
	}
	var tb messages.Table
	for more := true; more; {
		more = w.NextInto(&tb, 100)
	}
	if !errors.Is(w.Err(), boom) {
		t.Fatalf("Err() = %v, want boom", w.Err())
	}
	other := Partial{Version: PartialVersion, Rows: messages.NewTable([]messages.ColumnSpec{{Name: "x", Type: messages.TypeFloat}}), Times: []int64{}}
	two := []Fetch{func() (Partial, bool, error) { return other, false, nil }}
	if _, err := NewMerger(messages.GetDataArgs{Table: "t"}).Stream(append(SourceFetches([][]Partial{{p}}, false), two...)); !errors.Is(err, ErrSchemaMismatch) {
		t.Fatalf("a window of another schema: %v, want ErrSchemaMismatch", err)
	}
}

// Rest is every row, for streamed rows and for answers computed whole.
func TestRest(t *testing.T) {
	p := rowsPartial(t, []int64{1, 2, 3, 4, 5}, []int64{5, 4, 3, 2, 1})
	q := rowsPartial(t, []int64{2, 3, 9}, []int64{7, 8, 9})
	for _, args := range []messages.GetDataArgs{{Table: "t"}, {Table: "t", SortCols: []string{"-v"}}, {Table: "t", Limit: 4}} {
		want, err := Merge(args, []Partial{p, q})
		if err != nil {
			t.Fatal(err)
		}
		for _, hint := range []int{0, 2, 100} {
			w, err := NewMerger(args).Stream(SourceFetches([][]Partial{splitWindows(p, 2), splitWindows(q, 1)}, false))
			if err != nil {
				t.Fatal(err)
			}
			got, err := w.Rest(hint)
			if err != nil || fmt.Sprint(got.Col("v").Ints) != fmt.Sprint(want.Col("v").Ints) {
				t.Fatalf("args %+v hint %d: %v %v, want %v", args, hint, got.Col("v").Ints, err, want.Col("v").Ints)
			}
		}
	}
}

// EncodeRest writes the bytes of the merged table, for rows in windows of
// several sources (coded symbols, strings, every type), with and without a
// limit, sortCols, and enough rows for its columns to go side by side.
func TestEncodeRestIsEncodeOfMerge(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 9))
	schema := []messages.ColumnSpec{{Name: "time", Type: messages.TypeTimestamp}, {Name: "sym", Type: messages.TypeSymbol},
		{Name: "x", Type: messages.TypeFloat}, {Name: "n", Type: messages.TypeInt}, {Name: "flag", Type: messages.TypeBool},
		{Name: "note", Type: messages.TypeString}}
	syms := []string{"A", "B", "C", "D", "E"}
	var parts []Partial
	var wins [][]Partial
	for src := range 4 {
		tb := messages.NewTable(schema)
		ts := int64(0)
		if src == 3 {
			ts = 9_000 // a later tier: its first rows meet the others' last
		}
		for range 12_000 + src*1000 {
			ts += rng.Int64N(3)
			if err := tb.AppendRow(ts, syms[rng.IntN(len(syms)-src%3)], rng.NormFloat64(), rng.Int64N(100), rng.IntN(2) == 0, syms[rng.IntN(2)]); err != nil {
				t.Fatal(err)
			}
		}
		p, err := RowsPartial(&messages.GetDataArgs{Table: "t"}, tb, tb.Columns[0].Ints)
		if err != nil {
			t.Fatal(err)
		}
		var w []Partial
		for _, win := range splitWindows(p, 5000) {
			b, err := EncodePartial(win) // as the Agg has them: decoded, symbols coded
			if err != nil {
				t.Fatal(err)
			}
			if win, err = DecodePartial(b); err != nil {
				t.Fatal(err)
			}
			w = append(w, win)
		}
		parts, wins = append(parts, p), append(wins, w)
	}
	for _, args := range []messages.GetDataArgs{{Table: "t"}, {Table: "t", Limit: 20_000}, {Table: "t", SortCols: []string{"-x"}, Limit: 9}} {
		want, err := Merge(args, parts)
		if err != nil {
			t.Fatal(err)
		}
		wantBytes, err := messages.Encode(&want)
		if err != nil {
			t.Fatal(err)
		}
		for _, workers := range []int{1, 2, 4} {
			w, err := NewMerger(args).Stream(SourceFetches(wins, false))
			if err != nil {
				t.Fatal(err)
			}
			got, err := w.EncodeRest(100, 1000, workers)
			if err != nil || string(got) != string(wantBytes) {
				t.Fatalf("args %+v, %d workers: %d bytes (%v), want %d", args, workers, len(got), err, len(wantBytes))
			}
			// The same sources held whole: the order in two halves.
			got, err = NewMerger(args).EncodeRuns(wins, 100, 1000, workers)
			if err != nil || string(got) != string(wantBytes) {
				t.Fatalf("EncodeRuns, args %+v, %d workers: %d bytes (%v), want %d", args, workers, len(got), err, len(wantBytes))
			}
		}
	}
}

// A streamed merge of windows equals sorting every row in canonical order,
// for portions that overlap in time, stand apart (tiers, whose cursors wait
// outside the heap until their rows are due) or meet on equal times at their
// edges; the order is checked against a sort, not against the heap itself.
func TestStreamMatchesSort(t *testing.T) {
	for seed := range uint64(300) {
		rng := rand.New(rand.NewPCG(seed, 11))
		var wins [][]Partial
		var times, vals []int64
		for p := range 1 + rng.IntN(7) {
			base := int64(0)
			switch rng.IntN(3) {
			case 0: // apart in time from the others
				base = int64(p) * 1000
			case 1: // its first times equal another's last
				base = int64(p) * 20
			}
			var pt, pv []int64
			ts := base
			for range rng.IntN(50) {
				ts += rng.Int64N(3)
				pt, pv = append(pt, ts), append(pv, rng.Int64N(4))
			}
			part := rowsPartial(t, pt, pv)
			wins = append(wins, splitWindows(part, 1+rng.IntN(15)))
			times, vals = append(times, part.Times...), append(vals, part.Rows.Col("v").Ints...)
		}
		idx := identity(len(times))
		slices.SortStableFunc(idx, func(i, j int) int {
			return cmp.Or(cmp.Compare(times[i], times[j]), cmp.Compare(vals[i], vals[j]))
		})
		want := make([]int64, len(idx))
		for k, i := range idx {
			want[k] = vals[i]
		}
		w, err := NewMerger(messages.GetDataArgs{Table: "t"}).Stream(SourceFetches(wins, false))
		if err != nil {
			t.Fatal(err)
		}
		tb, err := w.Rest(len(want))
		if err != nil {
			t.Fatal(err)
		}
		var got []int64
		if c := tb.Col("v"); c != nil {
			got = c.Ints
		}
		if !slices.Equal(got, want) {
			t.Fatalf("seed %d: %v, want %v", seed, got, want)
		}
	}
}

// EncodeRuns writes Stream and EncodeRest's bytes whatever time splits the
// rows: every row at one time (one half empty), portions apart in time, a
// portion all of whose windows are empty.
func TestEncodeRunsHalves(t *testing.T) {
	schema := []messages.ColumnSpec{{Name: "time", Type: messages.TypeTimestamp}, {Name: "v", Type: messages.TypeInt}}
	rng := rand.New(rand.NewPCG(1, 1))
	for name, at := range map[string]func(src, i int) int64{
		"one time":   func(int, int) int64 { return 5 },
		"apart":      func(src, i int) int64 { return int64(src*100_000 + i) },
		"interleave": func(src, i int) int64 { return int64(3*i + src) },
		"two times":  func(_, i int) int64 { return int64(i * 2 / 40_000) },
	} {
		var wins [][]Partial
		for src := range 3 {
			tb := messages.NewTable(schema)
			for i := range 13_000 {
				if err := tb.AppendRow(at(src, i), rng.Int64N(3)); err != nil {
					t.Fatal(err)
				}
			}
			wins = append(wins, windowsOf(t, tb))
		}
		empty := messages.NewTable(schema)
		wins = append(wins, []Partial{{Version: PartialVersion, Rows: empty, Times: []int64{}}})
		if want, got := plainAndRuns(t, wins); string(got) != string(want) {
			t.Fatalf("%s: %d bytes, want %d", name, len(got), len(want))
		}
	}
}

// windowsOf is tb's rows (its first column the time) as windows of 4,000.
func windowsOf(t *testing.T, tb messages.Table) []Partial {
	t.Helper()
	p, err := RowsPartial(&messages.GetDataArgs{Table: "t"}, tb, tb.Columns[0].Ints)
	if err != nil {
		t.Fatal(err)
	}
	return splitWindows(p, 4000)
}

// plainAndRuns writes the rows of wins, one source each, both ways: the
// plain merge (Stream, EncodeRest) and the two halves (EncodeRuns).
func plainAndRuns(t *testing.T, wins [][]Partial) (plain, runs []byte) {
	t.Helper()
	w, err := NewMerger(messages.GetDataArgs{Table: "t"}).Stream(SourceFetches(wins, false))
	if err != nil {
		t.Fatal(err)
	}
	if plain, err = w.EncodeRest(0, 0, 1); err != nil {
		t.Fatal(err)
	}
	if runs, err = NewMerger(messages.GetDataArgs{Table: "t"}).EncodeRuns(wins, 0, 0, 2); err != nil {
		t.Fatal(err)
	}
	return plain, runs
}

// Rows equal by value but not by bits (-0 and +0 here) are ordered by their
// bits, so the two-halves merge of a msgpack answer (EncodeRuns) gives the
// bytes of the plain one (Stream, EncodeRest): the review found them
// differing on 20 seeds of 20 when -0 and +0 compared equal.
func TestEncodeRunsEqualsStreamWithSignedZeros(t *testing.T) {
	schema := []messages.ColumnSpec{{Name: "time", Type: messages.TypeTimestamp}, {Name: "x", Type: messages.TypeFloat}}
	for seed := range uint64(20) {
		rng := rand.New(rand.NewPCG(seed, 3))
		var wins [][]Partial
		for range 3 {
			tb := messages.NewTable(schema)
			ts := int64(0)
			for range 13_000 {
				ts += rng.Int64N(2)
				x := 0.0
				if rng.IntN(2) == 0 {
					x = math.Copysign(0, -1)
				}
				if err := tb.AppendRow(ts, x); err != nil {
					t.Fatal(err)
				}
			}
			wins = append(wins, windowsOf(t, tb))
		}
		if want, got := plainAndRuns(t, wins); string(want) != string(got) {
			t.Fatalf("seed %d: EncodeRuns differs from Stream+EncodeRest", seed)
		}
	}
}

// SourceFetches with drop lets go of each window as it serves it (a streamed
// answer's merged windows can be collected); without, the sources keep them
// for a release after the answer. The answer is the same either way.
func TestSourceFetchesDrop(t *testing.T) {
	p := rowsPartial(t, []int64{1, 2, 3, 4, 5}, []int64{5, 4, 3, 2, 1})
	q := rowsPartial(t, []int64{2, 3, 9}, []int64{7, 8, 9})
	var answers []string
	for _, drop := range []bool{false, true} {
		sources := [][]Partial{splitWindows(p, 2), splitWindows(q, 1)}
		w, err := NewMerger(messages.GetDataArgs{Table: "t"}).Stream(SourceFetches(sources, drop))
		if err != nil {
			t.Fatal(err)
		}
		got, err := w.Rest(0)
		if err != nil {
			t.Fatal(err)
		}
		answers = append(answers, fmt.Sprint(got.Col("v").Ints))
		for i, run := range sources {
			for k := range run {
				if held := run[k].Rows.NumRows() > 0; held == drop {
					t.Errorf("drop %t: source %d window %d held %t after the merge", drop, i, k, held)
				}
			}
		}
	}
	if answers[0] != answers[1] {
		t.Fatalf("answers differ: %s kept, %s dropped", answers[0], answers[1])
	}
}

// With ReleaseFetched, each window fetched (decoded for the merge alone, as
// the Agg's live merge decodes them) is released once its rows are copied,
// and the windows decoded after it reuse its storage: the answer is the
// merge of the whole partials all the same, window sizes whatever they are.
// Without it, nothing is released.
func TestStreamReleasesFetchedWindows(t *testing.T) {
	schema := []messages.ColumnSpec{{Name: "time", Type: messages.TypeTimestamp}, {Name: "sym", Type: messages.TypeSymbol},
		{Name: "x", Type: messages.TypeFloat}, {Name: "v", Type: messages.TypeInt}, {Name: "b", Type: messages.TypeBool}}
	rng := rand.New(rand.NewPCG(9, 10))
	var parts []Partial
	var encoded [][][]byte // by source, its windows' bytes
	for src := range 3 {
		tb := messages.NewTable(schema)
		ts := int64(0)
		// Windows of 3,000 (numbers above the free lists' minimum); sources
		// that end before others, their last window released.
		for range 4_000 * (1 + src) {
			ts += rng.Int64N(3)
			if err := tb.AppendRow(ts, fmt.Sprint("S", rng.IntN(7)), rng.Float64(), rng.Int64(), rng.IntN(2) == 0); err != nil {
				t.Fatal(err)
			}
		}
		p, err := RowsPartial(&messages.GetDataArgs{Table: "t"}, tb, tb.Columns[0].Ints)
		if err != nil {
			t.Fatal(err)
		}
		parts = append(parts, p)
		var wins [][]byte
		for _, w := range splitWindows(p, 3000) {
			b, err := EncodePartial(w)
			if err != nil {
				t.Fatal(err)
			}
			wins = append(wins, b)
		}
		encoded = append(encoded, wins)
	}
	want, err := Merge(messages.GetDataArgs{Table: "t"}, parts)
	if err != nil {
		t.Fatal(err)
	}
	rows := func(tb *messages.Table) []string {
		out := make([]string, tb.NumRows())
		for i := range out {
			for k := range tb.Columns {
				out[i] += fmt.Sprint(tb.Columns[k].Value(i), " ")
			}
		}
		return out
	}
	for _, release := range []bool{false, true} {
		var decoded []*Partial
		fetches := make([]Fetch, len(encoded))
		for i, wins := range encoded {
			k := 0
			fetches[i] = func() (Partial, bool, error) { // decoded as it is fetched, as the live merge does
				p, err := DecodePartial(wins[k])
				decoded = append(decoded, &p)
				k++
				return p, k < len(wins), err
			}
		}
		w, err := NewMerger(messages.GetDataArgs{Table: "t"}).Stream(fetches)
		if err != nil {
			t.Fatal(err)
		}
		if release {
			w.ReleaseFetched()
		}
		var got []string
		var tb messages.Table
		for more := true; more; {
			more = w.NextInto(&tb, 1+rng.IntN(5000))
			got = append(got, rows(&tb)...)
		}
		if w.Err() != nil {
			t.Fatal(w.Err())
		}
		if !slices.Equal(got, rows(&want)) {
			t.Fatalf("release %t: the streamed answer differs from the merge", release)
		}
		// Fetch hands the merge a copy of each Partial: its columns share
		// the storage of decoded's.
		for i, p := range decoded {
			c := &p.Rows.Columns[3]
			if freed := c.Ints == nil; freed != release {
				t.Fatalf("release %t: window %d's storage released %t", release, i, freed)
			}
		}
	}
}

// A window given back (Recycle) is the storage the next answer's windows are
// gathered into (messages.Room), and those windows are right; a window of an
// answer computed whole shares that answer's storage and is left alone.
func TestRecycledWindowIsTheNextAnswers(t *testing.T) {
	var times, vals []int64
	for i := range 10_000 {
		times, vals = append(times, int64(i/3)), append(vals, int64(i*7))
	}
	p := rowsPartial(t, times, vals)
	stream := func() (got []int64, first, last *int64) {
		w, err := NewMerger(messages.GetDataArgs{Table: "t"}).Stream(SourceFetches([][]Partial{splitWindows(p, 2500)}, false))
		if err != nil {
			t.Fatal(err)
		}
		var tb messages.Table
		for more := true; more; {
			more = w.NextInto(&tb, 4000)
			if first == nil {
				first = &tb.Col("v").Ints[0]
			}
			got = append(got, tb.Col("v").Ints...)
		}
		last = &tb.Col("v").Ints[0]
		w.Recycle(&tb)
		if tb.Col("v").Ints != nil {
			t.Fatal("the window recycled still holds its storage")
		}
		return got, first, last
	}
	got, _, last := stream()
	// The last window's storage (4,000 values, as the next answer's first
	// window) is taken again.
	again, first, _ := stream()
	if !slices.Equal(got, vals) || !slices.Equal(again, vals) {
		t.Fatal("windows gathered into recycled storage differ from the rows")
	}
	if first != last {
		t.Fatal("the next answer's first window was not gathered into the storage recycled")
	}
	m := NewMerger(messages.GetDataArgs{Table: "t", SortCols: []string{"v"}}) // computed whole
	if err := m.Add(p); err != nil {
		t.Fatal(err)
	}
	w, err := m.Windows()
	if err != nil {
		t.Fatal(err)
	}
	tb, _ := w.Next(100)
	w.Recycle(&tb)
	if tb.Col("v").Ints == nil {
		t.Fatal("a window of an answer computed whole was recycled")
	}
}
