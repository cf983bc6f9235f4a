package merge

import (
	"cmp"
	"fmt"
	"math"
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
	if len(keys) == 0 && len(parts) == 1 {
		// One part (a small request's one portion) in canonical order: its
		// rows as they are, cut to the limit, are the answer, shared rather
		// than gathered into a table of their own (a dozen allocations, a
		// tenth of the Agg's CPU on a small request). Nothing writes a
		// Result.
		rows := &parts[0].Rows
		if n := rows.NumRows(); args.Limit > 0 && n > args.Limit {
			return rows.Slice(0, args.Limit), nil
		}
		return *rows, nil
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
	// Concatenated by gather, in one pass for all parts: appending part by
	// part re-built a coded column's dictionary for each (parts x values).
	var times []int64
	var refs []rowRef
	for pi, p := range parts {
		for r := range p.Rows.NumRows() {
			refs = append(refs, rowRef{part: uint32(pi), row: uint32(r)})
		}
		times = append(times, p.Times...)
	}
	gather(&out, parts, refs)
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
	src  int   // the source of a streamed merge (Merger.Stream)
	part int   // p's index in the window being gathered (Windows.parts); -1: none yet
	t    int64 // p.Times[i] while pending (rowHeap); in the heap, its node's
}

// rowHeap orders cursors by their current row in canonical order: a binary
// min-heap written out for the merge's one move (take the least row, move
// its cursor on, sift it down), without container/heap's call through an
// interface per comparison. The heap's nodes are the cursors' indexes with
// their rows' times, which decide most comparisons: a comparison reads the
// heap's own few words, not two cursors, and a node moves without a write
// barrier.
//
// Only the cursors whose row can come next are in the heap: the others wait
// in pending, by time, until the top's time reaches theirs. Portions split by
// time (a table's tiers) then cost no comparison until their rows are due,
// and the heap is as deep as the portions that overlap in time (a large
// answer's 9 portions: 3 regions at a time), not as all of them. A heap of
// so few cursors has its rows found by Windows.orderFew, the heap put in
// order again only when the cursors change.
type rowHeap struct {
	cursors []cursor
	heap    []heapNode // heap-ordered
	// pending are indexes into cursors not in the heap, by time, latest
	// first; every one's time is above the top's (canonical order is by
	// time first), so none can be least. next is the earliest's time
	// (math.MaxInt64: none).
	pending []int32
	next    int64
}

// heapNode is a cursor in the heap: its index and its row's time.
type heapNode struct {
	t int64
	c int32
}

func (h *rowHeap) Len() int { return len(h.heap) + len(h.pending) }

// top is the cursor at the least row.
func (h *rowHeap) top() *cursor { return &h.cursors[h.heap[0].c] }

func (h *rowHeap) less(a, b heapNode) bool {
	if a.t != b.t {
		return a.t < b.t
	}
	x, y := &h.cursors[a.c], &h.cursors[b.c]
	return compareValues(&x.p.Rows, x.i, &y.p.Rows, y.i) < 0
}

// init orders every cursor: all pending, then the earliest admitted.
func (h *rowHeap) init() {
	h.heap, h.pending = h.heap[:0], h.pending[:0]
	for i := range h.cursors {
		c := &h.cursors[i]
		c.t = c.p.Times[c.i]
		h.pending = append(h.pending, int32(i))
	}
	slices.SortStableFunc(h.pending, func(a, b int32) int { return cmp.Compare(h.cursors[b].t, h.cursors[a].t) })
	h.next = math.MaxInt64
	if n := len(h.pending); n > 0 {
		h.next = h.cursors[h.pending[n-1]].t
	}
	h.admit()
}

// admit moves into the heap the pending cursors whose time is not above the
// top's (all of them could be least); with an empty heap, the earliest.
func (h *rowHeap) admit() {
	for len(h.pending) > 0 && (len(h.heap) == 0 || h.next <= h.heap[0].t) {
		n := len(h.pending) - 1
		c := h.pending[n]
		h.heap = append(h.heap, heapNode{t: h.cursors[c].t, c: c})
		h.pending = h.pending[:n]
		h.up(len(h.heap) - 1)
		h.next = math.MaxInt64
		if n > 0 {
			h.next = h.cursors[h.pending[n-1]].t
		}
	}
}

// fix0 puts the top cursor, moved on or given a new window, in its place.
func (h *rowHeap) fix0() {
	c := h.top()
	h.heap[0].t = c.p.Times[c.i]
	h.down(0)
	if h.next <= h.heap[0].t {
		h.admit()
	}
}

// pop0 removes the top cursor.
func (h *rowHeap) pop0() {
	n := len(h.heap) - 1
	h.heap[0] = h.heap[n]
	h.heap = h.heap[:n]
	if n > 0 {
		h.down(0)
	}
	h.admit()
}

// clear removes every cursor.
func (h *rowHeap) clear() {
	h.heap, h.pending, h.next = h.heap[:0], h.pending[:0], math.MaxInt64
}

func (h *rowHeap) up(i int) {
	hp := h.heap
	for i > 0 {
		p := (i - 1) / 2
		if !h.less(hp[i], hp[p]) {
			return
		}
		hp[i], hp[p] = hp[p], hp[i]
		i = p
	}
}

func (h *rowHeap) down(i int) {
	hp := h.heap
	for {
		l := 2*i + 1
		if l >= len(hp) {
			return
		}
		m := l
		if r := l + 1; r < len(hp) && h.less(hp[r], hp[l]) {
			m = r
		}
		if !h.less(hp[m], hp[i]) {
			return
		}
		hp[i], hp[m] = hp[m], hp[i]
		i = m
	}
}
