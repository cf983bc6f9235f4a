package merge

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/sg-project/sg/messages"
)

// A row of a merge's order: the window it is in and its row there.
type orderedRow struct {
	p   *Partial
	row int
}

// heapOrder is the order of every row of w by the heap alone (rowHeap's top,
// fix0 and pop0, one row at a time), as order found it before orderFew: the
// reference the order of a few cursors (orderFew) must give.
func heapOrder(w *Windows) []orderedRow {
	var out []orderedRow
	for w.h.Len() > 0 {
		c := w.h.top()
		out = append(out, orderedRow{c.p, c.i})
		if c.i++; c.i < len(c.p.Times) {
			w.h.fix0()
			continue
		}
		if w.fetch == nil {
			w.h.pop0()
			continue
		}
		p, err := w.next(c.src)
		switch {
		case err != nil:
			panic(err)
		case p == nil:
			w.h.pop0()
		default:
			c.p, c.i = p, 0
			w.h.fix0()
		}
	}
	return out
}

// orderOf is the order of every row of w by order, n rows at a time.
func orderOf(w *Windows, n int) []orderedRow {
	var out []orderedRow
	for w.h.Len() > 0 {
		w.order(n)
		for _, r := range w.refs {
			out = append(out, orderedRow{w.parts[r.part], int(r.row)})
		}
	}
	return out
}

// order, which finds the rows of at most fewCursors cursors by orderFew,
// gives the heap's order row for row, for sources of many ties (few times,
// few values, -0 and +0, which canonical order tells apart), in windows some
// of them empty, from one source to more than fewCursors, whole (rowWindows)
// and streamed (Stream), in orders of any size. Rows that compare equal may
// come from either source: they are the same bytes. The seed is printed on
// failure.
func TestOrderFewIsHeapOrder(t *testing.T) {
	schema := []messages.ColumnSpec{{Name: "x", Type: messages.TypeFloat}, {Name: "v", Type: messages.TypeInt}}
	floats := []float64{0, math.Copysign(0, -1), 1, -1}
	for seed := range uint64(300) {
		rng := rand.New(rand.NewPCG(seed, 17))
		var wins [][]Partial
		var parts []*Partial
		for range 1 + rng.IntN(fewCursors+2) {
			tb := messages.NewTable(schema)
			var times []int64
			ts := int64(rng.IntN(3))
			spread := int64(1 + rng.IntN(4)) // a small step: many equal times
			for range rng.IntN(120) {
				ts += rng.Int64N(spread)
				times = append(times, ts)
				if err := tb.AppendRow(floats[rng.IntN(len(floats))], rng.Int64N(3)); err != nil {
					t.Fatal(err)
				}
			}
			p, err := RowsPartial(&messages.GetDataArgs{Table: "t"}, tb, times) // the source in canonical order
			if err != nil {
				t.Fatal(err)
			}
			// Its windows: cut anywhere, some empty.
			var run []Partial
			for lo, more := 0, true; more; {
				hi := min(len(times), lo+rng.IntN(40))
				run = append(run, Partial{Version: PartialVersion, Rows: p.Rows.Slice(lo, hi), Times: p.Times[lo:hi]})
				lo, more = hi, hi < len(times)
			}
			wins = append(wins, run)
		}
		for _, run := range wins {
			for i := range run {
				parts = append(parts, &run[i])
			}
		}
		n := 1 + rng.IntN(50)
		whole := func() *Windows { return rowWindows(schema, parts, 0) }
		streamed := func() *Windows {
			w, err := NewMerger(messages.GetDataArgs{Table: "t"}).Stream(SourceFetches(wins, false))
			if err != nil {
				t.Fatal(err)
			}
			if w.whole != nil { // no rows at all
				return rowWindows(schema, nil, 0)
			}
			return w
		}
		for name, windows := range map[string]func() *Windows{"whole": whole, "streamed": streamed} {
			want, got := heapOrder(windows()), orderOf(windows(), n)
			if len(got) != len(want) {
				t.Fatalf("seed %d, %s: %d rows, want %d", seed, name, len(got), len(want))
			}
			for i := range want {
				a, b := want[i], got[i]
				if compareRows(&a.p.Rows, a.p.Times, a.row, &b.p.Rows, b.p.Times, b.row) != 0 {
					t.Fatalf("seed %d, %s, %d rows at a time: row %d is (%d %v), want (%d %v)", seed, name, n, i,
						b.p.Times[b.row], tableRows(&b.p.Rows)[b.row], a.p.Times[a.row], tableRows(&a.p.Rows)[a.row])
				}
			}
		}
	}
}
