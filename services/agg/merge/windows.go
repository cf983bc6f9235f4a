package merge

import (
	"container/heap"

	"github.com/sg-project/sg/messages"
)

// Windows hands out the merged answer window by window, in the order Result
// gives it, so that an answer streams without being built whole. For rows
// without sortCols (doc item 1) it is the k-way merge of Result advanced one
// window at a time: only a window's rows are copied. Aggregates and rows
// sorted by sortCols are computed whole (groups are few; a sort needs every
// row) and sliced.
type Windows struct {
	h      *rowHeap
	schema []messages.ColumnSpec
	limit  int // rows still allowed by the request's limit; -1: none
	whole  *messages.Table
	pos    int
}

// Windows returns the merged answer as windows. Errors are Result's.
func (m *Merger) Windows() (*Windows, error) {
	if m.first == nil || m.agg != nil || len(m.args.SortCols) > 0 {
		t, err := m.Result()
		if err != nil {
			return nil, err
		}
		return &Windows{whole: &t, limit: -1}, nil
	}
	w := &Windows{h: &rowHeap{}, schema: m.first.Rows.Schema(), limit: -1}
	if m.args.Limit > 0 {
		w.limit = m.args.Limit
	}
	for _, p := range m.rows {
		if p.Rows.NumRows() > 0 {
			w.h.cursors = append(w.h.cursors, cursor{p: p})
		}
	}
	heap.Init(w.h)
	return w, nil
}

// Next returns the next window of at most n rows (n >= 1) and whether any row
// is left after it. The first call returns a table with the answer's columns
// even when it has no rows.
func (w *Windows) Next(n int) (t messages.Table, more bool) {
	more = w.NextInto(&t, n)
	return t, more
}

// NextInto is Next writing the window into t, reusing the storage of its
// columns when t is an earlier window of w (the caller is done with it): a
// streamed answer then allocates a few windows, not one per frame. t's rows
// are replaced, never appended to; a window of an answer computed whole
// shares that answer's storage, and is never written into.
func (w *Windows) NextInto(t *messages.Table, n int) (more bool) {
	n = max(n, 1)
	if w.whole != nil {
		total := w.whole.NumRows()
		hi := min(w.pos+n, total)
		*t = w.whole.Slice(w.pos, hi)
		w.pos = hi
		return hi < total
	}
	if w.limit >= 0 {
		n = min(n, w.limit)
	}
	if !w.reusable(t) {
		*t = messages.NewTable(w.schema)
	}
	t.Truncate()
	for k := range t.Columns {
		t.Columns[k].Grow(min(n, 1<<16))
	}
	for t.NumRows() < n && w.h.Len() > 0 {
		c := &w.h.cursors[0]
		t.AppendRowFrom(&c.p.Rows, c.i)
		if c.i++; c.i == c.p.Rows.NumRows() {
			heap.Pop(w.h)
		} else {
			heap.Fix(w.h, 0)
		}
	}
	if w.limit >= 0 {
		w.limit -= t.NumRows()
	}
	return w.h.Len() > 0 && w.limit != 0
}

// reusable reports whether t has the schema of w's windows, so that its
// columns can take the next window.
func (w *Windows) reusable(t *messages.Table) bool {
	if len(t.Columns) != len(w.schema) {
		return false
	}
	for k, s := range w.schema {
		if c := &t.Columns[k]; c.Name != s.Name || c.Type != s.Type {
			return false
		}
	}
	return true
}
