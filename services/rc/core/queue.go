package core

// The queue is indexed so that a dequeue decision does not scan: items are
// grouped into subqueues by (table, label set, locked vintage or none), and
// each subqueue is a treap ordered by start time and augmented with the
// subtree's latest end and oldest age. "The oldest item whose range
// intersects the DAP's purview" is then a best-first walk that visits
// subtrees in age order and prunes those that cannot intersect.

// item is a queued part of a label set of a request.
type item struct {
	req        *request
	ls         *labelSet
	start, end int64
	// age orders the queue (oldest first); seq breaks ties and keys the treap.
	age int64
	seq uint64
	// idx is the item's position in ls.items.
	idx int
	sub *subqueue

	left, right *item
	prio        uint64
	maxEnd      int64
	minAge      ageKey
}

type ageKey struct {
	age int64
	seq uint64
}

func (a ageKey) less(b ageKey) bool {
	return a.age < b.age || (a.age == b.age && a.seq < b.seq)
}

func (it *item) ageKey() ageKey { return ageKey{it.age, it.seq} }

// subKey names a subqueue: the items of one group whose label set has locked
// vintage `vintage` (locked) or has locked none.
type subKey struct {
	group   groupKey
	locked  bool
	vintage uint64
}

type subqueue struct {
	key  subKey
	root *item
	n    int
}

func less(a, b *item) bool {
	return a.start < b.start || (a.start == b.start && a.seq < b.seq)
}

// splitmix64 gives treap priorities from sequence numbers: deterministic,
// and no global random source.
func splitmix64(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

func (n *item) update() {
	n.maxEnd = n.end
	n.minAge = n.ageKey()
	for _, c := range [2]*item{n.left, n.right} {
		if c == nil {
			continue
		}
		n.maxEnd = max(n.maxEnd, c.maxEnd)
		if c.minAge.less(n.minAge) {
			n.minAge = c.minAge
		}
	}
}

// split divides t into items less than k and the rest.
func split(t, k *item) (l, r *item) {
	if t == nil {
		return nil, nil
	}
	if less(t, k) {
		t.right, r = split(t.right, k)
		t.update()
		return t, r
	}
	l, t.left = split(t.left, k)
	t.update()
	return l, t
}

func merge(l, r *item) *item {
	switch {
	case l == nil:
		return r
	case r == nil:
		return l
	case l.prio > r.prio:
		l.right = merge(l.right, r)
		l.update()
		return l
	default:
		r.left = merge(l, r.left)
		r.update()
		return r
	}
}

func (q *subqueue) insert(it *item) {
	it.left, it.right, it.sub = nil, nil, q
	it.prio = splitmix64(it.seq)
	it.update()
	l, r := split(q.root, it)
	q.root = merge(merge(l, it), r)
	q.n++
}

func (q *subqueue) remove(it *item) {
	q.root = removeNode(q.root, it)
	it.left, it.right, it.sub = nil, nil, nil
	q.n--
}

func removeNode(t, it *item) *item {
	if t == nil {
		return nil
	}
	if t == it {
		return merge(t.left, t.right)
	}
	if less(it, t) {
		t.left = removeNode(t.left, it)
	} else {
		t.right = removeNode(t.right, it)
	}
	t.update()
	return t
}

// walk visits the subqueue in start order.
func (q *subqueue) walk(fn func(*item)) {
	var rec func(*item)
	rec = func(n *item) {
		if n == nil {
			return
		}
		rec(n.left)
		fn(n)
		rec(n.right)
	}
	rec(q.root)
}

// ageHeap is the frontier of the best-first walk: subtrees keyed by their
// oldest age, and single items keyed by their own.
type ageHeap []heapEntry

type heapEntry struct {
	key  ageKey
	node *item
	self bool
}

func (h *ageHeap) push(e heapEntry) {
	*h = append(*h, e)
	s := *h
	i := len(s) - 1
	for i > 0 {
		p := (i - 1) / 2
		if !s[i].key.less(s[p].key) {
			break
		}
		s[i], s[p] = s[p], s[i]
		i = p
	}
}

func (h *ageHeap) pop() heapEntry {
	s := *h
	top := s[0]
	last := len(s) - 1
	s[0] = s[last]
	s = s[:last]
	i := 0
	for {
		l, r, m := 2*i+1, 2*i+2, i
		if l < len(s) && s[l].key.less(s[m].key) {
			m = l
		}
		if r < len(s) && s[r].key.less(s[m].key) {
			m = r
		}
		if m == i {
			break
		}
		s[i], s[m] = s[m], s[i]
		i = m
	}
	*h = s
	return top
}

// oldest returns the oldest item intersecting [s, e) that is eligible for d.
// scratch is reused between calls to avoid allocation.
func (q *subqueue) oldest(s, e int64, c *Core, d *dap, scratch *ageHeap) *item {
	h := (*scratch)[:0]
	defer func() { *scratch = h[:0] }()
	if q.root != nil && q.root.maxEnd > s {
		h.push(heapEntry{key: q.root.minAge, node: q.root})
	}
	for len(h) > 0 {
		top := h.pop()
		n := top.node
		if top.self {
			if c.eligible(d, n) {
				return n
			}
			continue
		}
		if n.start < e && n.end > s {
			h.push(heapEntry{key: n.ageKey(), node: n, self: true})
		}
		if c := n.left; c != nil && c.maxEnd > s {
			h.push(heapEntry{key: c.minAge, node: c})
		}
		// Items right of n start at or after n.start: none can intersect
		// if n already starts at or after e.
		if c := n.right; c != nil && c.maxEnd > s && n.start < e {
			h.push(heapEntry{key: c.minAge, node: c})
		}
	}
	return nil
}
