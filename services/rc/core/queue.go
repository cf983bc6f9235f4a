package core

import (
	"slices"

	"github.com/sg-project/sg/messages"
)

// The queue is indexed so that a dequeue decision does not scan: items are
// grouped into subqueues by (table, label set, locked vintage or none), and
// each subqueue keeps, per distinct purview of its group's DAPs, an age
// order (ageHeap: a FIFO for items that come in age order, a heap for the
// rest) of the items intersecting that purview, oldest first. "The oldest
// item whose range intersects the DAP's purview" is the head of the order of
// the DAP's own purview: O(1) to find, O(1) or O(log n) to take out (lazily:
// an item taken leaves stale slots behind, dropped as they come to the
// head). A dispatch that takes one end of an item shrinks it in place: it
// keeps its age and its slots in the heaps of the purviews it still meets
// (shrink). The placement chain
// (feasible.go) has the last word on that item; when it refuses it (the DAP
// still runs an earlier attempt, the request's scope excludes the DAP), the
// walk goes on through the heap in age order.
//
// Items are numbered and held in chunks (itemTable): a slot is a key and a
// number, no pointer, and finding its item costs no load but the item's.
//
// A group's purviews change only when its DAPs register, change status or
// leave; the heaps are rebuilt then (refreshPurviews), never on a decision.

// item is a queued part of a label set of a request. The fields a heap
// slot's staleness reads come first (heapSlot.stale).
type item struct {
	// seq breaks ties of age; a slot names the item with it.
	seq uint64
	sub *subqueue
	rng TimeRange
	// age orders the queue (oldest first).
	age int64
	req *request
	ls  *labelSet
	// idx is the item's position in ls.items (its position in sub.items
	// is in the item table: itemTable.subIdx).
	idx int
	// ix is the item's number in the core's itemTable, for its life (an
	// item reused keeps it).
	ix uint32
}

// itemTable holds the core's items in chunks and numbers them densely, so
// that a heap slot names its item by number and holds no pointer (the GC
// does not scan the heaps, the largest part of the queue), and finds it
// without a load: the chunk is at a known place, and the item's staleness
// fields are in its first bytes (one cache miss per slot looked at, where
// an array of item pointers and one of staleness fields beside the items
// cost two or three).
type itemTable struct {
	chunks []*[itemChunk]item
	n      uint32 // items made
	// subIdx is each item's position in its subqueue's items: beside the
	// other items' (a small array), so that taking an item out of the
	// middle of a subqueue does not write to the item moved into its place.
	subIdx []int32
}

const (
	itemChunkBits = 10
	itemChunk     = 1 << itemChunkBits
)

// at is the item numbered ix.
func (t *itemTable) at(ix uint32) *item { return &t.chunks[ix>>itemChunkBits][ix&(itemChunk-1)] }

// newItem is an empty item, reused when one was unqueued.
func (c *Core) newItem() *item {
	if n := len(c.freeItems); n > 0 {
		it := c.freeItems[n-1]
		c.freeItems = c.freeItems[:n-1]
		return it
	}
	t := &c.items
	if int(t.n>>itemChunkBits) == len(t.chunks) {
		t.chunks = append(t.chunks, new([itemChunk]item))
	}
	it := t.at(t.n)
	it.ix = t.n
	t.n++
	t.subIdx = append(t.subIdx, 0)
	return it
}

type ageKey struct {
	age int64
	seq uint64
}

func (a ageKey) less(b ageKey) bool {
	return a.age < b.age || (a.age == b.age && a.seq < b.seq)
}

func (it *item) ageKey() ageKey { return ageKey{it.age, it.seq} }

// less orders items by start, then seq: the order of queue blocks in a
// timeout message and of walk.
func less(a, b *item) bool {
	return a.rng.Start < b.rng.Start || (a.rng.Start == b.rng.Start && a.seq < b.seq)
}

// A purview is the messages' TimeRange, its one home: [Start, End) with
// open ends at TSMin and TSMax (MinTS and MaxTS here).

// wholeRange is the one purview of a table that is not time-partitioned.
var wholeRange = []messages.TimeRange{messages.Unbounded}

// subKey names a subqueue: the items of one group whose label set has locked
// vintage `vintage` (locked) or has locked none.
type subKey struct {
	group   groupKey
	locked  bool
	vintage uint64
}

type subqueue struct {
	key subKey
	g   *queueGroup
	// id tells a label set's remembered subqueue (labelSet.subID) from the
	// same storage reused for another; a subqueue reused gets a new one.
	// tab is the core's item table.
	id  uint64
	tab *itemTable
	// items are the subqueue's items by number (itemTable).
	items []uint32
	// heaps: one per distinct purview of the group's DAPs (ageHeap.p), in
	// the group's order (queueGroup.purviews).
	heaps []ageHeap
	n     int
}

// ageHeap orders items by age: a FIFO for the items that come in age order
// (a new request is younger than everything queued, and its leftovers keep
// its age: most items), and a min-heap for the rest (retries, leftovers of an
// old request, items moved by a vintage lock). The oldest is the older of the
// FIFO's head and the heap's top. Slots carry the key, so ordering never
// reads an item; an item leaves lazily: remove only counts it out (live), and
// its slots are dropped when they reach the head or top, or when stale slots
// outnumber live ones (compact). A slot is stale when its item has left the
// subqueue or been reused (seq differs).
type ageHeap struct {
	p     messages.TimeRange // the purview whose items it orders
	slots []heapSlot         // the heap
	fifo  []heapSlot         // in age order from head on
	head  int
	live  int
}

type heapSlot struct {
	key ageKey
	ix  uint32 // the item's number in q.tab
}

// stale: the slot's item has left the subqueue (or was reused: seq
// differs), or was shrunk to a range that no longer meets the heap's
// purview p. (A subqueue's heaps are emptied when it is released, so its
// slots never outlive its id.)
func (s heapSlot) stale(q *subqueue, p messages.TimeRange) bool {
	it := q.tab.at(s.ix)
	return it.sub != q || it.seq != s.key.seq || it.rng.Start >= p.End || p.Start >= it.rng.End
}

func (s heapSlot) item(q *subqueue) *item { return q.tab.at(s.ix) }

// size is the number of slots, live and stale.
func (h *ageHeap) size() int { return len(h.slots) + len(h.fifo) - h.head }

func (h *ageHeap) up(i int) {
	s := h.slots[i]
	for i > 0 {
		p := (i - 1) / 2
		if !s.key.less(h.slots[p].key) {
			break
		}
		h.slots[i] = h.slots[p]
		i = p
	}
	h.slots[i] = s
}

func (h *ageHeap) down(i int) {
	s := h.slots[i]
	n := len(h.slots)
	for {
		l := 2*i + 1
		if l >= n {
			break
		}
		m := l
		if r := l + 1; r < n && h.slots[r].key.less(h.slots[l].key) {
			m = r
		}
		if !h.slots[m].key.less(s.key) {
			break
		}
		h.slots[i] = h.slots[m]
		i = m
	}
	h.slots[i] = s
}

func (h *ageHeap) push(it *item) {
	s := heapSlot{it.ageKey(), it.ix}
	h.live++
	if n := len(h.fifo); n == h.head || !s.key.less(h.fifo[n-1].key) {
		h.fifo = append(h.fifo, s)
		return
	}
	h.slots = append(h.slots, s)
	h.up(len(h.slots) - 1)
}

func (h *ageHeap) popTop() {
	last := len(h.slots) - 1
	h.slots[0] = h.slots[last]
	h.slots[last] = heapSlot{}
	h.slots = h.slots[:last]
	if last > 0 {
		h.down(0)
	}
}

// popHead drops the FIFO's head; an emptied FIFO starts again at the front
// of its buffer, and a long dead prefix is cut off.
func (h *ageHeap) popHead() {
	h.fifo[h.head] = heapSlot{}
	h.head++
	switch {
	case h.head == len(h.fifo):
		h.fifo, h.head = h.fifo[:0], 0
	case h.head >= 1024 && 2*h.head >= len(h.fifo):
		n := copy(h.fifo, h.fifo[h.head:])
		clear(h.fifo[n:])
		h.fifo, h.head = h.fifo[:n], 0
	}
}

// top drops stale slots from the FIFO's head and the heap's top and returns
// the oldest live slot (false when none).
func (h *ageHeap) top(q *subqueue) (heapSlot, bool) {
	for h.head < len(h.fifo) && h.fifo[h.head].stale(q, h.p) {
		h.popHead()
	}
	for len(h.slots) > 0 && h.slots[0].stale(q, h.p) {
		h.popTop()
	}
	switch {
	case h.head < len(h.fifo) && (len(h.slots) == 0 || h.fifo[h.head].key.less(h.slots[0].key)):
		return h.fifo[h.head], true
	case len(h.slots) > 0:
		return h.slots[0], true
	}
	return heapSlot{}, false
}

// compact drops every stale slot once they outnumber the live ones, so that
// a heap whose top rarely moves does not grow with the queue's history.
func (h *ageHeap) compact(q *subqueue) {
	if h.size() <= 2*h.live+64 {
		return
	}
	kept := h.slots[:0]
	for _, s := range h.slots {
		if !s.stale(q, h.p) {
			kept = append(kept, s)
		}
	}
	clear(h.slots[len(kept):])
	h.slots = kept
	for i := len(kept)/2 - 1; i >= 0; i-- {
		h.down(i)
	}
	f := h.fifo[:0]
	for _, s := range h.fifo[h.head:] {
		if !s.stale(q, h.p) {
			f = append(f, s)
		}
	}
	clear(h.fifo[len(f):])
	h.fifo, h.head = f, 0
}

func (q *subqueue) insert(it *item) {
	it.sub = q
	q.tab.subIdx[it.ix] = int32(len(q.items))
	q.items = append(q.items, it.ix)
	q.n++
	q.place(it)
}

// place puts the item in the heap of every purview it meets.
func (q *subqueue) place(it *item) {
	for b := range q.heaps {
		if h := &q.heaps[b]; meets(h.p, it.rng) {
			h.push(it)
		}
	}
}

func (q *subqueue) remove(it *item) {
	i, last := q.tab.subIdx[it.ix], len(q.items)-1
	moved := q.items[last]
	q.items[i] = moved
	q.tab.subIdx[moved] = i
	q.items = q.items[:last]
	it.sub = nil // its heap slots are stale from here on
	q.n--
	for b := range q.heaps {
		if h := &q.heaps[b]; meets(h.p, it.rng) {
			h.live--
			h.compact(q)
		}
	}
}

// shrink narrows a queued item to part of its range (rng within it.rng), in
// place: it keeps its age, seq and the slots of the purviews it still meets,
// and the slots of those it no longer meets go stale. A dispatch that takes
// one end of an item leaves the rest queued this way instead of unqueueing
// it and queueing a new item (a heap push per purview it meets, and a stale
// slot per purview the old one met).
func (q *subqueue) shrink(it *item, rng TimeRange) {
	old := it.rng
	it.rng = rng
	for b := range q.heaps {
		if h := &q.heaps[b]; meets(h.p, old) && !meets(h.p, rng) {
			h.live--
			h.compact(q)
		}
	}
}

// meets: the purview p and the range r intersect.
func meets(p messages.TimeRange, r TimeRange) bool {
	_, ok := p.Intersect(r)
	return ok
}

// setPurviews rebuilds the heaps for the group's purviews (sorted, distinct),
// in the buffers it has.
func (q *subqueue) setPurviews(ps []messages.TimeRange) {
	for i := range q.heaps {
		q.heaps[i].reset()
	}
	if cap(q.heaps) < len(ps) {
		q.heaps = append(q.heaps[:cap(q.heaps)], make([]ageHeap, len(ps)-cap(q.heaps))...)
	}
	q.heaps = q.heaps[:len(ps)]
	for i := range q.heaps {
		q.heaps[i].reset()
		q.heaps[i].p = ps[i]
	}
	// In age order, so that the items go to the FIFOs.
	slices.SortFunc(q.items, func(a, b uint32) int {
		ka, kb := q.tab.at(a).ageKey(), q.tab.at(b).ageKey()
		if ka.less(kb) {
			return -1
		}
		if kb.less(ka) {
			return 1
		}
		return 0
	})
	for i, ix := range q.items {
		q.tab.subIdx[ix] = int32(i)
		q.place(q.tab.at(ix))
	}
}

// release empties a subqueue that left its group, keeping its buffers and
// holding no item.
func (q *subqueue) release() {
	q.items = q.items[:0]
	for i := range q.heaps {
		q.heaps[i].reset()
	}
	q.heaps = q.heaps[:0]
	q.g, q.id = nil, 0 // (no label set's subFor answer stands)
}

// reset empties the heap, keeping its buffers.
func (h *ageHeap) reset() {
	clear(h.slots)
	clear(h.fifo)
	*h = ageHeap{slots: h.slots[:0], fifo: h.fifo[:0]}
}

// walk visits the subqueue in start order.
func (q *subqueue) walk(fn func(*item)) {
	items := make([]*item, len(q.items))
	for i, ix := range q.items {
		items[i] = q.tab.at(ix)
	}
	slices.SortFunc(items, func(a, b *item) int {
		if less(a, b) {
			return -1
		}
		if less(b, a) {
			return 1
		}
		return 0
	})
	for _, it := range items {
		fn(it)
	}
}

// frontier is the scratch of oldest's walk past refused items: heap slots by
// age.
type frontier []int32

// peek is the heap of purview p and its oldest live slot, without asking the
// placement chain: no item can be older than it (ok false when none).
func (q *subqueue) peek(p messages.TimeRange) (*ageHeap, heapSlot, bool) {
	for b := range q.heaps {
		if h := &q.heaps[b]; h.p == p {
			top, ok := h.top(q)
			return h, top, ok
		}
	}
	return nil, heapSlot{}, false // no DAP of the group has this purview: refreshPurviews keeps them in step
}

// oldestFrom is oldest, given the heap and its top (peek).
func (q *subqueue) oldestFrom(h *ageHeap, top heapSlot, c *Core, d *dap, scratch *frontier) *item {
	topIt := top.item(q)
	if c.feasible(d, topIt) {
		return topIt
	}
	// Refused: visit the FIFO in order and the heap best-first (a slot's
	// children are younger), merged by age, passing over stale slots.
	f := (*scratch)[:0]
	defer func() { *scratch = f[:0] }()
	push := func(i int) {
		if i >= len(h.slots) {
			return
		}
		f = append(f, int32(i))
		for j := len(f) - 1; j > 0; {
			p := (j - 1) / 2
			if !h.slots[f[j]].key.less(h.slots[f[p]].key) {
				break
			}
			f[j], f[p] = f[p], f[j]
			j = p
		}
	}
	pop := func() int {
		top := f[0]
		last := len(f) - 1
		f[0] = f[last]
		f = f[:last]
		for j := 0; ; {
			l, r, m := 2*j+1, 2*j+2, j
			if l < len(f) && h.slots[f[l]].key.less(h.slots[f[m]].key) {
				m = l
			}
			if r < len(f) && h.slots[f[r]].key.less(h.slots[f[m]].key) {
				m = r
			}
			if m == j {
				break
			}
			f[j], f[m] = f[m], f[j]
			j = m
		}
		return int(top)
	}
	push(0)
	next := h.head // the FIFO's next slot
	for len(f) > 0 || next < len(h.fifo) {
		var s heapSlot
		if next < len(h.fifo) && (len(f) == 0 || h.fifo[next].key.less(h.slots[f[0]].key)) {
			s = h.fifo[next]
			next++
		} else {
			i := pop()
			s = h.slots[i]
			push(2*i + 1)
			push(2*i + 2)
		}
		if s.ix == top.ix || s.stale(q, h.p) {
			continue
		}
		if it := s.item(q); c.feasible(d, it) {
			return it
		}
	}
	return nil
}
