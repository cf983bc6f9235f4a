package merge

import (
	"fmt"
	"math"
	"slices"
	"sync"

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

	// The window being gathered: the partials its rows come from, and its
	// rows in order.
	parts []*Partial
	refs  []rowRef

	// A streamed merge (Stream): each cursor's source, fetched window by window.
	m     *Merger
	fetch []Fetch
	more  []bool // the source has windows after its cursor's
	err   error

	// release: the windows fetched are the merge's alone (ReleaseFetched);
	// used are those used up, released once the window being gathered,
	// which copies their rows, is written.
	release bool
	used    []*Partial
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
	return rowWindows(m.first.Rows.Schema(), m.rows, m.args.Limit), nil
}

// rowWindows is the k-way merge of row partials in canonical order (doc item
// 1), each already in that order, cut at limit (0: none).
func rowWindows(schema []messages.ColumnSpec, parts []*Partial, limit int) *Windows {
	w := &Windows{h: &rowHeap{}, schema: schema, limit: -1}
	if limit > 0 {
		w.limit = limit
	}
	for _, p := range parts {
		if p.Rows.NumRows() > 0 {
			w.h.cursors = append(w.h.cursors, cursor{p: p})
		}
	}
	w.h.init()
	return w
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
	if !w.reusable(t) {
		*t = messages.NewTable(w.schema)
	}
	// The order first, then each column in a loop of its own (gather).
	w.order(n)
	gather(t, w.parts, w.refs)
	clear(w.parts) // the used-up windows are not kept beyond this one
	w.releaseUsed()
	if w.limit >= 0 {
		w.limit -= t.NumRows()
	}
	return w.h.Len() > 0 && w.limit != 0
}

// order puts the next n rows at most (fewer at the limit) in w.refs, and
// the windows they come from in w.parts.
func (w *Windows) order(n int) {
	if w.limit >= 0 {
		n = min(n, w.limit)
	}
	w.parts, w.refs = w.parts[:0], w.refs[:0]
	left := 0 // the rows of the windows at hand: the most this one takes unless more are fetched
	for i := range w.h.cursors {
		c := &w.h.cursors[i]
		c.part = -1
		left += max(0, c.p.Rows.NumRows()-c.i) // 0 for a source ended, its last window released
	}
	w.refs = slices.Grow(w.refs, min(n, left))
	for len(w.refs) < n && w.h.Len() > 0 {
		if w.orderFew(n); len(w.refs) == n || w.h.Len() == 0 {
			break
		}
		c := w.h.top()
		if c.part < 0 {
			c.part = len(w.parts)
			w.parts = append(w.parts, c.p)
		}
		w.refs = append(w.refs, rowRef{part: uint32(c.part), row: uint32(c.i)})
		// Times, not Rows.NumRows: as many (validated), and read without
		// a switch on a column's type per row.
		if c.i++; c.i < len(c.p.Times) {
			w.h.fix0()
			continue
		}
		if w.fetch == nil {
			w.h.pop0()
			continue
		}
		if w.release {
			w.used = append(w.used, c.p)
		}
		// The window is used up: its source's next one, before any other row
		// can be known to come next.
		p, err := w.next(c.src)
		switch {
		case err != nil:
			w.err = err
			w.h.clear()
		case p == nil:
			w.h.pop0()
		default:
			c.p, c.i, c.part = p, 0, -1
			w.h.fix0()
		}
	}
}

// fewCursors: a heap of at most this many cursors has its least row found
// by orderFew. A large answer's heap holds the sources whose rows are due (3
// regions): their rows interleave at random, and a sift's comparisons then
// mispredict on most rows.
const fewCursors = 3

// noPart is a slot's part before its window is in the window being
// gathered (cursor.part < 0).
const noPart = math.MaxUint32

// noTimes is the times of a slot of fewSlots without a cursor: never least,
// as the first slot at the least time is taken and the slots with cursors
// come first.
var noTimes = []int64{math.MaxInt64}

// fewSlots are the cursors of a heap of at most fewCursors, each a slot:
// its window's times, its row, its window's last row and its part.
type fewSlots struct {
	times [fewCursors][]int64
	at    [fewCursors]int
	ends  [fewCursors]int
	part  [fewCursors]uint32
}

// orderFew is order's step for a heap of at most fewCursors cursors, held
// in fewSlots, not in the heap: most rows are found by scan, the rest, one
// at a time, by a comparison of the slots' rows (compareRows: equal times
// decided by values, as the heap decides them). It returns, the heap in
// order again, at n rows, at a cursor's window's last row (order ends the
// window: a next one is fetched, or the cursor leaves) and when a pending
// cursor is due.
func (w *Windows) orderFew(n int) {
	h := w.h
	k := len(h.heap)
	if k == 0 || k > fewCursors {
		return
	}
	var (
		f   = fewSlots{times: [fewCursors][]int64{noTimes, noTimes, noTimes}}
		cur [fewCursors]*cursor
	)
	for j, nd := range h.heap {
		c := &h.cursors[nd.c]
		cur[j], f.times[j], f.at[j], f.part[j] = c, c.p.Times, c.i, noPart
		if c.part >= 0 {
			f.part[j] = uint32(c.part)
		}
	}
	for j := range f.ends {
		f.ends[j] = len(f.times[j]) - 1
	}
	refs, next := w.refs, h.next
	for stop := min(n, cap(refs)); len(refs) < stop; { // within the room order made: no growth
		if refs = f.scan(refs, stop, next); len(refs) == stop {
			break
		}
		// The row scan stopped at.
		b := 0
		for j := 1; j < k; j++ {
			if compareRows(&cur[j].p.Rows, f.times[j], f.at[j], &cur[b].p.Rows, f.times[b], f.at[b]) < 0 {
				b = j
			}
		}
		if i := f.at[b]; f.times[b][i] >= next || i == f.ends[b] {
			break
		}
		if f.part[b] == noPart {
			cur[b].part = len(w.parts)
			f.part[b] = uint32(len(w.parts))
			w.parts = append(w.parts, cur[b].p)
		}
		refs = append(refs, rowRef{part: f.part[b], row: uint32(f.at[b])})
		f.at[b]++
	}
	w.refs = refs
	for j := range k {
		cur[j].i, h.heap[j].t = f.at[j], f.times[j][f.at[j]]
	}
	for j := 1; j < k; j++ {
		h.up(j)
	}
	if h.next <= h.heap[0].t {
		h.admit()
	}
}

// scan appends to refs, up to stop rows, the least of the slots' rows while
// it is one slot's alone at its time, before next, not its window's last,
// and its window has a part: the least found by masks, without a branch on
// which slot holds it (the CPU cannot predict it), in a loop without calls,
// its state in registers.
func (f *fewSlots) scan(refs []rowRef, stop int, next int64) []rowRef {
	s0, s1, s2 := f.times[0], f.times[1], f.times[2]
	i0, i1, i2 := f.at[0], f.at[1], f.at[2]
	out, j := refs[len(refs):stop], 0
	for ; j < len(out); j++ {
		t0, t1, t2 := s0[i0], s1[i1], s2[i2]
		// The least slot b, the first at the least time m, as a flag a
		// slot (d0, d1, d2): 1 if t1 < t0, 2 if t2 is below both, else 0.
		c1, m := b2i(t1 < t0), min(t0, t1)
		d2 := b2i(t2 < m)
		m = min(m, t2)
		d1 := c1 &^ d2
		d0 := 1 ^ (c1 | d2)
		i := i0&-int(d0) | i1&-int(d1) | i2&-int(d2)
		b := d1 + 2*d2
		if m >= next || i == f.ends[b] || f.part[b] == noPart || b2i(t0 == m)+b2i(t1 == m)+b2i(t2 == m) > 1 {
			break
		}
		out[j] = rowRef{part: f.part[b], row: uint32(i)}
		i0 += int(d0)
		i1 += int(d1)
		i2 += int(d2)
	}
	f.at = [fewCursors]int{i0, i1, i2}
	return refs[:len(refs)+j]
}

// b2i is 1 for true, 0 for false (a flag set, no branch).
func b2i(v bool) int64 {
	if v {
		return 1
	}
	return 0
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

// Fetch returns the next window of one source of a streamed merge (a
// portion's partial sent in windows, each a row partial in the portion's
// order) and whether more windows follow it. It may block until the window
// has come; its error ends the merge (Windows.Err).
type Fetch func() (p Partial, more bool, err error)

// Stream returns the merged answer of sources whose partials come in windows,
// as Windows that fetch a source's next window only when the merge has used
// up its current one: a k-way merge of rows in canonical order (doc item 1)
// that holds one window per source, so that the answer's size does not bound
// its memory. The first window of every source is fetched here. Aggregates
// and rows with sortCols need every row: then every window is fetched and
// added, and the answer is computed whole, as Windows does. Errors wrap
// those of the fetches and of Add.
func (m *Merger) Stream(sources []Fetch) (*Windows, error) {
	if m.args.Aggregating() || len(m.args.SortCols) > 0 {
		for i, fetch := range sources {
			for more := true; more; {
				p, next, err := fetch()
				if err == nil {
					err = m.Add(p)
				}
				if err != nil {
					return nil, fmt.Errorf("source %d: %w", i, err)
				}
				more = next
			}
		}
		return m.Windows()
	}
	w := &Windows{h: &rowHeap{}, limit: -1, m: m, fetch: sources, more: make([]bool, len(sources))}
	if m.args.Limit > 0 {
		w.limit = m.args.Limit
	}
	for i := range sources {
		w.more[i] = true
		p, err := w.next(i)
		if err != nil {
			return nil, err
		}
		if p != nil {
			w.h.cursors = append(w.h.cursors, cursor{p: p, src: i})
		}
	}
	if m.first == nil {
		return &Windows{whole: &messages.Table{}, limit: -1}, nil
	}
	w.schema = m.first.Rows.Schema()
	w.h.init()
	return w, nil
}

// next fetches source i's windows until one with rows, or its end (nil).
func (w *Windows) next(i int) (*Partial, error) {
	for w.more[i] {
		p, more, err := w.fetch[i]()
		if err == nil {
			err = w.m.check(&p)
		}
		if err != nil {
			w.more[i] = false
			return nil, fmt.Errorf("source %d: %w", i, err)
		}
		w.more[i] = more
		if p.Rows.NumRows() > 0 {
			return &p, nil
		}
	}
	return nil, nil
}

// Recycle gives the storage of t, a window of w's that the caller is done
// with (its frame sent), to later windows and decodes
// (messages.ReleaseColumn): the next answer's windows are gathered into it.
// A window of an answer computed whole shares that answer's storage and is
// left alone.
func (w *Windows) Recycle(t *messages.Table) {
	if w.whole != nil || !w.reusable(t) {
		return
	}
	for k := range t.Columns {
		messages.ReleaseColumn(&t.Columns[k])
	}
}

// ReleaseFetched tells w that the windows its sources hand out are its
// alone (decoded for this merge, held nowhere else): each is released
// (messages.ReleaseColumn) once its rows are copied into a window, so that
// the next windows decode into its storage. A merge of windows held for a
// release of their own (SourceFetches without drop) must not call it.
func (w *Windows) ReleaseFetched() { w.release = w.fetch != nil }

// releaseUsed releases the windows used up, whose rows are copied. Their
// columns keep their names and types: the first window fetched is the
// Merger's schema (Merger.check).
func (w *Windows) releaseUsed() {
	for i, p := range w.used {
		for k := range p.Rows.Columns {
			messages.ReleaseColumn(&p.Rows.Columns[k])
		}
		p.Times = nil // a column's (TimesCol), or its own: not read again
		w.used[i] = nil
	}
	w.used = w.used[:0]
}

// Err is the error that ended a streamed merge early (a fetch failed, or a
// window did not fit the others); nil otherwise.
func (w *Windows) Err() error { return w.err }

// EncodeRest is the msgpack form of Rest's table (Encode's bytes), written
// column by column straight from the merge's order, never built whole, the
// columns side by side on up to workers goroutines
// (messages.EncodeColumnsMsgpack). rows is about how many rows there are and
// size about their bytes, so that the order and the answer are sized once.
func (w *Windows) EncodeRest(rows, size, workers int) ([]byte, error) {
	if w.whole != nil {
		t, _ := w.Rest(0)
		return messages.EncodeTableMsgpack(t, workers, size)
	}
	if cap(w.refs) == 0 {
		w.refs = getRefs(rows)
	}
	w.refs = slices.Grow(w.refs[:0], rows)
	w.order(math.MaxInt)
	defer clear(w.parts)
	if w.err != nil {
		return nil, w.err
	}
	if w.limit >= 0 {
		w.limit -= len(w.refs)
	}
	parts, refs := w.parts, w.refs
	defer func() { putRefs(refs); w.refs = nil }() // every row is written: w orders none again
	defer w.releaseUsed()
	return encodeOrder(w.schema, parts, refs, workers, size)
}

// freeRefs keep the order of a large answer written whole (EncodeRest,
// EncodeRuns: 8 bytes a row, 1.9 MiB for the demo's trade table) for the
// next one, as messages keeps its columns: at most two, of 4,096 to 2^19
// rows (4 MiB each).
var freeRefs = make(chan []rowRef, 2)

// getRefs is an empty order with room for n rows or more (up to 2n).
func getRefs(n int) []rowRef {
	select {
	case r := <-freeRefs:
		if cap(r) >= n && cap(r) <= 2*n {
			return r[:0]
		}
		putRefs(r)
	default:
	}
	return make([]rowRef, 0, n)
}

// putRefs keeps r, which nothing reads any more, for getRefs.
func putRefs(r []rowRef) {
	if cap(r) < 4096 || cap(r) > 1<<19 {
		return
	}
	select {
	case freeRefs <- r[:0]:
	default:
	}
}

// Rest returns every row left as one table; hint is about how many there are
// (the rows of the partials), so that the columns are sized once.
func (w *Windows) Rest(hint int) (messages.Table, error) {
	if w.whole != nil {
		t := w.whole.Slice(w.pos, w.whole.NumRows())
		w.pos = w.whole.NumRows()
		return t, nil
	}
	t := messages.NewTable(w.schema)
	w.refs = slices.Grow(w.refs[:0], hint) // the order of every row; the columns are sized by it
	more := w.NextInto(&t, max(1, hint))
	for more && w.err == nil {
		var next messages.Table
		next, more = w.Next(max(1, hint))
		for k := range t.Columns {
			t.Columns[k].AppendColumn(&next.Columns[k])
		}
	}
	return t, w.err
}

// parallelOrderRows: an answer of fewer rows has its order found on one
// goroutine (EncodeRuns).
const parallelOrderRows = 32 << 10

// EncodeRuns is the msgpack form of the merged answer of sources held whole
// (each a portion's windows, in order: the Agg's answer gathered whole):
// Stream(sources) then EncodeRest's bytes. The k-way merge is the one step
// of it on one goroutine (a large answer's rows one at a time, the cursors
// due compared for each), so for rows without sortCols nor a limit, on
// workers >= 2, it is done in two halves side by side: the rows before a
// time that splits them about in half, and those from it on. Canonical
// order is by time first, so the halves follow one another and need no
// merging. Errors are Stream's and EncodeRest's.
func (m *Merger) EncodeRuns(sources [][]Partial, rows, size, workers int) ([]byte, error) {
	total := 0
	for _, run := range sources {
		for k := range run {
			total += len(run[k].Times)
		}
	}
	if m.args.Aggregating() || len(m.args.SortCols) > 0 || m.args.Limit > 0 || workers < 2 || total < parallelOrderRows {
		w, err := m.Stream(SourceFetches(sources, false))
		if err != nil {
			return nil, err
		}
		return w.EncodeRest(rows, size, workers)
	}
	var all []*Partial
	for i, run := range sources {
		for k := range run {
			if err := m.check(&run[k]); err != nil {
				return nil, fmt.Errorf("source %d: %w", i, err)
			}
			if run[k].Rows.NumRows() > 0 {
				all = append(all, &run[k])
			}
		}
	}
	schema := m.first.Rows.Schema() // total > 0: a window was checked
	split := splitTime(all, total)
	// Each window's rows before split go to the first half, the others to
	// the second; every row to exactly one, each half in its sources' order.
	var early, late []*Partial
	n := 0 // rows in the first half
	for _, p := range all {
		i, _ := slices.BinarySearch(p.Times, split) // the first row at split or after (a sorted window)
		n += i
		switch {
		case i == len(p.Times):
			early = append(early, p)
		case i == 0:
			late = append(late, p)
		default:
			early = append(early, p.slice(0, i))
			late = append(late, p.slice(i, len(p.Times)))
		}
	}
	// Windows, not portions, are the cursors: those not yet due wait outside
	// the heap (rowHeap), so a portion's later windows cost no comparison.
	// The halves' orders go into one slice, each in its own part of it.
	a, b := rowWindows(schema, early, 0), rowWindows(schema, late, 0)
	refs := getRefs(total) // every entry written by the halves
	defer putRefs(refs)
	// Each half's order has room for exactly its rows: one of the right
	// length was written in place.
	a.refs, b.refs = refs[:0:n], refs[n:n:total]
	var wg sync.WaitGroup
	wg.Go(func() { b.order(math.MaxInt) })
	a.order(math.MaxInt)
	wg.Wait()
	if len(a.refs) != n || len(b.refs) != total-n {
		return nil, fmt.Errorf("merge: the halves ordered %d and %d rows of %d and %d", len(a.refs), len(b.refs), n, total-n)
	}
	refs = refs[:total]
	parts := append(a.parts, b.parts...)
	base := uint32(len(a.parts))
	for i := range b.refs {
		b.refs[i].part += base
	}
	return encodeOrder(schema, parts, refs, workers, size)
}

// encodeOrder writes the rows refs names, in its order, as a table's
// msgpack form, column by column (messages.EncodeColumnsMsgpack).
func encodeOrder(schema []messages.ColumnSpec, parts []*Partial, refs []rowRef, workers, size int) ([]byte, error) {
	return messages.EncodeColumnsMsgpack(schema, len(refs), func(k int, c *messages.Column) {
		c.Type = schema[k].Type
		gatherColumn(c, parts, refs, k)
	}, workers, size)
}

// SourceFetches serves each source's windows, held whole, in order: Stream's
// fetches for an answer gathered whole. With drop, a window's slot in
// sources is cleared as it is served (the merge holds it now), so that a
// window merged can be collected before the answer ends (an answer sent as a
// stream); without, sources keep every window for a release once the answer
// is written.
func SourceFetches(sources [][]Partial, drop bool) []Fetch {
	out := make([]Fetch, len(sources))
	for i, run := range sources {
		k := 0
		out[i] = func() (Partial, bool, error) {
			w := run[k]
			if drop {
				run[k] = Partial{}
			}
			k++
			return w, k < len(run), nil
		}
	}
	return out
}

// splitTime is a time that splits the rows of parts (total rows, each part
// in time order) about in half: the median of a sample of their times.
func splitTime(parts []*Partial, total int) int64 {
	const samples = 256
	var sample []int64
	for _, p := range parts {
		n := len(p.Times)
		k := max(1, n*samples/max(1, total))
		for j := range k {
			sample = append(sample, p.Times[j*n/k])
		}
	}
	slices.Sort(sample)
	return sample[len(sample)/2]
}

// slice is rows lo to hi of p, validated as p was.
func (p *Partial) slice(lo, hi int) *Partial {
	return &Partial{Version: p.Version, Rows: p.Rows.Slice(lo, hi), Times: p.Times[lo:hi:hi], validated: p.validated}
}
