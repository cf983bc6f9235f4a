package merge

import (
	"fmt"
	"slices"

	"github.com/sg-project/sg/messages"
)

// RowsPartial is the DAP side of a row query: rows are the projected columns of the
// selected rows, in time order; times their times (nil for a reference table). It puts
// equal-time rows in canonical order and, when args has a Limit, keeps only the rows that
// can be in the merged answer (doc items 1 and 2).
func RowsPartial(args *messages.GetDataArgs, rows messages.Table, times []int64) (Partial, error) {
	n := rows.NumRows()
	if times == nil {
		times = make([]int64, n)
	}
	if len(times) != n {
		return Partial{}, fmt.Errorf("%w: %d times for %d rows", ErrInvalidPartial, len(times), n)
	}
	keys, err := resolveSort(rows.Schema(), args.SortCols)
	if err != nil {
		return Partial{}, err
	}
	order := func(i, j int) int { return compareRows(&rows, times, i, &rows, times, j) }
	sorted := true
	for i := 1; i < n && sorted; i++ {
		sorted = order(i-1, i) <= 0
	}
	if sorted && (args.Limit == 0 || (n <= args.Limit && len(keys) == 0)) {
		// The usual large partial: a store's rows in time order, whole. No
		// index, no copy.
		return Partial{Version: PartialVersion, Rows: rows, Times: times}, nil
	}
	idx := identity(n)
	if !sorted {
		slices.SortFunc(idx, order)
	}
	if args.Limit > 0 && len(keys) > 0 {
		// The final order is sortCols then canonical; the first Limit of the union are among
		// the first Limit of each piece in that same order.
		slices.SortStableFunc(idx, func(i, j int) int { return compareSort(keys, &rows, i, &rows, j) })
	}
	if args.Limit > 0 && len(idx) > args.Limit {
		idx = idx[:args.Limit]
	}
	p := Partial{Version: PartialVersion}
	if isIdentity(idx, n) {
		p.Rows, p.Times = rows, times
	} else {
		p.Rows = rows.Take(idx)
		p.Times = make([]int64, len(idx))
		for k, i := range idx {
			p.Times[k] = times[i]
		}
	}
	return p, nil
}

func identity(n int) []int {
	idx := make([]int, n)
	for i := range idx {
		idx[i] = i
	}
	return idx
}

func isIdentity(idx []int, n int) bool {
	if len(idx) != n {
		return false
	}
	for k, i := range idx {
		if k != i {
			return false
		}
	}
	return true
}

// mergeRows is the Agg side of a row query. parts have been validated and share a schema.
func mergeRows(args *messages.GetDataArgs, schema []messages.ColumnSpec, parts []*Partial) (messages.Table, error) {
	keys, err := resolveSort(schema, args.SortCols)
	if err != nil {
		return messages.Table{}, err
	}
	out := messages.NewTable(schema)
	if len(keys) == 0 {
		// Each part is already in canonical order: a k-way merge, stopped at
		// the limit, in one window: the order of the rows first, then each
		// column gathered in a loop of its own.
		total := 0
		for _, p := range parts {
			total += p.Rows.NumRows()
		}
		rowWindows(schema, parts, args.Limit).NextInto(&out, total)
		return out, nil
	}
	// With sortCols: concatenate, sort by sortCols then canonical order, cut.
	var times []int64
	for _, p := range parts {
		for k := range out.Columns {
			out.Columns[k].AppendColumn(&p.Rows.Columns[k])
		}
		times = append(times, p.Times...)
	}
	idx := identity(out.NumRows())
	slices.SortFunc(idx, func(i, j int) int {
		if c := compareSort(keys, &out, i, &out, j); c != 0 {
			return c
		}
		return compareRows(&out, times, i, &out, times, j)
	})
	if args.Limit > 0 && len(idx) > args.Limit {
		idx = idx[:args.Limit]
	}
	return out.Take(idx), nil
}

type cursor struct {
	p    *Partial
	i    int
	src  int // the source of a streamed merge (Merger.Stream)
	part int // p's index in the window being gathered (Windows.parts); -1: none yet
}

// rowHeap orders cursors by their current row in canonical order.
type rowHeap struct{ cursors []cursor }

func (h *rowHeap) Len() int { return len(h.cursors) }
func (h *rowHeap) Less(a, b int) bool {
	x, y := &h.cursors[a], &h.cursors[b]
	return compareRows(&x.p.Rows, x.p.Times, x.i, &y.p.Rows, y.p.Times, y.i) < 0
}
func (h *rowHeap) Swap(a, b int) { h.cursors[a], h.cursors[b] = h.cursors[b], h.cursors[a] }
func (h *rowHeap) Push(x any)    { h.cursors = append(h.cursors, x.(cursor)) }
func (h *rowHeap) Pop() any {
	c := h.cursors[len(h.cursors)-1]
	h.cursors = h.cursors[:len(h.cursors)-1]
	return c
}
