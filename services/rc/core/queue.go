package core

import (
	"slices"

	"github.com/sg-project/sg/messages"
)

// The queue is indexed so that a dequeue decision does not scan: items are
// grouped into subqueues by (table, label set, locked vintage or none), and
// each subqueue keeps, per distinct purview of its group's DAPs, a heap of
// the items intersecting that purview, oldest first. "The oldest item whose
// range intersects the DAP's purview" is the top of the heap of the DAP's
// own purview: O(1) to find, O(log n) to take out (lazily: an item taken
// leaves stale slots in its heaps, dropped as they come to the top). The placement chain
// (feasible.go) has the last word on that item; when it refuses it (the DAP
// still runs an earlier attempt, the request's scope excludes the DAP), the
// walk goes on through the heap in age order.
//
// A group's purviews change only when its DAPs register, change status or
// leave; the heaps are rebuilt then (refreshPurviews), never on a decision.

// item is a queued part of a label set of a request.
type item struct {
	req        *request
	ls         *labelSet
	start, end int64
	// age orders the queue (oldest first); seq breaks ties.
	age int64
	seq uint64
	// idx is the item's position in ls.items, subIdx in sub.items.
	idx    int
	subIdx int
	sub    *subqueue
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
	return a.start < b.start || (a.start == b.start && a.seq < b.seq)
}

// A purview is the messages' TimeRange, its one home: [Start, End) with
// open ends at TSMin and TSMax (MinTS and MaxTS here).

// wholeRange is the one purview of a table that is not time-partitioned.
var wholeRange = []messages.TimeRange{messages.Unbounded}

// meets: the item's range intersects the purview.
func meets(p messages.TimeRange, it *item) bool { return it.start < p.End && it.end > p.Start }

// subKey names a subqueue: the items of one group whose label set has locked
// vintage `vintage` (locked) or has locked none.
type subKey struct {
	group   groupKey
	locked  bool
	vintage uint64
}

type subqueue struct {
	key   subKey
	g     *queueGroup
	items []*item
	// heaps[i] holds the items meeting purviews[i].
	purviews []messages.TimeRange
	heaps    []ageHeap
	n        int
}

// ageHeap is a min-heap of items by age. Slots carry the key, so sifting
// never reads an item; an item leaves its heaps lazily: remove only counts
// it out (live), and its slot is dropped when it reaches the top, or when
// stale slots outnumber live ones (compact). A slot is stale when its item
// has left the subqueue or been reused (seq differs).
type ageHeap struct {
	slots []heapSlot
	live  int
}

type heapSlot struct {
	key ageKey
	it  *item
}

func (s heapSlot) stale(q *subqueue) bool { return s.it.sub != q || s.it.seq != s.key.seq }

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
	h.slots = append(h.slots, heapSlot{it.ageKey(), it})
	h.up(len(h.slots) - 1)
	h.live++
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

// top drops stale slots from the top and returns the oldest live index (-1
// when none).
func (h *ageHeap) top(q *subqueue) int {
	for len(h.slots) > 0 {
		if !h.slots[0].stale(q) {
			return 0
		}
		h.popTop()
	}
	return -1
}

// compact drops every stale slot once they outnumber the live ones, so that
// a heap whose top rarely moves does not grow with the queue's history.
func (h *ageHeap) compact(q *subqueue) {
	if len(h.slots) <= 2*h.live+64 {
		return
	}
	kept := h.slots[:0]
	for _, s := range h.slots {
		if !s.stale(q) {
			kept = append(kept, s)
		}
	}
	clear(h.slots[len(kept):])
	h.slots = kept
	for i := len(kept)/2 - 1; i >= 0; i-- {
		h.down(i)
	}
}

func (q *subqueue) insert(it *item) {
	it.sub, it.subIdx = q, len(q.items)
	q.items = append(q.items, it)
	q.n++
	q.place(it)
}

// place puts the item in the heap of every purview it meets.
func (q *subqueue) place(it *item) {
	for b, p := range q.purviews {
		if meets(p, it) {
			q.heaps[b].push(it)
		}
	}
}

func (q *subqueue) remove(it *item) {
	last := len(q.items) - 1
	q.items[it.subIdx] = q.items[last]
	q.items[it.subIdx].subIdx = it.subIdx
	q.items[last] = nil
	q.items = q.items[:last]
	it.sub = nil // its heap slots are stale from here on
	q.n--
	for b, p := range q.purviews {
		if meets(p, it) {
			q.heaps[b].live--
			q.heaps[b].compact(q)
		}
	}
}

// setPurviews rebuilds the heaps for the group's purviews (sorted, distinct),
// in the buffers it has.
func (q *subqueue) setPurviews(ps []messages.TimeRange) {
	q.purviews = ps
	for i := range q.heaps {
		clear(q.heaps[i].slots)
	}
	if cap(q.heaps) < len(ps) {
		q.heaps = append(q.heaps[:cap(q.heaps)], make([]ageHeap, len(ps)-cap(q.heaps))...)
	}
	q.heaps = q.heaps[:len(ps)]
	for i := range q.heaps {
		q.heaps[i] = ageHeap{slots: q.heaps[i].slots[:0]}
	}
	for _, it := range q.items {
		q.place(it)
	}
}

// release empties a subqueue that left its group, keeping its buffers and
// holding no item.
func (q *subqueue) release() {
	clear(q.items)
	q.items = q.items[:0]
	for i := range q.heaps {
		clear(q.heaps[i].slots)
		q.heaps[i] = ageHeap{slots: q.heaps[i].slots[:0]}
	}
	q.g, q.purviews = nil, nil
}

// walk visits the subqueue in start order.
func (q *subqueue) walk(fn func(*item)) {
	items := slices.Clone(q.items)
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

// oldest returns the oldest item meeting purview p that the placement chain
// finds feasible for d. scratch is reused between calls.
func (q *subqueue) oldest(p messages.TimeRange, c *Core, d *dap, scratch *frontier) *item {
	b := slices.Index(q.purviews, p)
	if b < 0 {
		return nil // no DAP of the group has this purview: refreshPurviews keeps them in step
	}
	h := &q.heaps[b]
	if h.top(q) < 0 {
		return nil
	}
	if top := h.slots[0].it; c.feasible(d, top) {
		return top
	}
	// Refused: visit the heap best-first (a slot's children are younger),
	// passing over stale slots.
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
	push(1)
	push(2)
	for len(f) > 0 {
		i := pop()
		if s := h.slots[i]; !s.stale(q) && c.feasible(d, s.it) {
			return s.it
		}
		push(2*i + 1)
		push(2*i + 2)
	}
	return nil
}
