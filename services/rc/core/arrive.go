package core

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/sg-project/sg/messages"
)

// arrive splits a new request into label sets (and, for time-partitioned
// tables, one item per label set over the whole range), queues them and
// dispatches whatever feasible DAPs can take now.
func (c *Core) arrive(q Request) {
	if _, dup := c.requests[q.ID]; dup {
		// A duplicate delivery of a request in flight: it is already being
		// coordinated, and answering twice is worse than not at all.
		c.stats.Duplicates++
		return
	}
	r := c.newRequest()
	r.Request = q
	r.arrived = c.now
	r.firstQueuedDay = utcDay(c.now)
	r.purviewEpoch = c.fleet.purviewEpoch
	c.requests[q.ID] = r
	c.schedule(timerEntry{at: q.Deadline, kind: timerDeadline, id: q.ID})
	c.stats.Arrived++

	if err := c.split(r); err != nil {
		c.reply(r, err.kind, err.text)
		return
	}
	n := c.expectedPortions(r)
	if cap(r.portions) < n || cap(r.ids) < n {
		r.portions, r.ids = make([]*portionState, 0, n), make([]PortionID, 0, n)
	}
	if err := c.chooseAgg(r); err != nil {
		c.reply(r, err.kind, err.text)
		return
	}
	if q.Deadline <= c.now {
		c.arrivedLate(r) // timeout_more.go
		return
	}
	rng := c.queueRange(r)
	for _, ls := range r.sets {
		c.enqueue(r, ls, rng)
	}
	c.placeRequest(r)
	if r.live() {
		c.admit(r)
	}
}

// expectedPortions is how many portions the request should take: per label
// set one, or for a time-partitioned table one per purview of its DAPs that
// meets the range; its portion map is made that size, so that decisions do
// not grow it.
func (c *Core) expectedPortions(r *request) int {
	if r.kind != TimePartitioned {
		return len(r.sets)
	}
	n := 0
	for _, ls := range r.sets {
		k := 0
		for _, p := range c.queueGroupOf(ls).purviews {
			if _, ok := p.Intersect(r.Range); ok {
				k++
			}
		}
		n += max(k, 1)
	}
	return n
}

type replyError struct {
	kind ReplyKind
	text string
}

func (c *Core) queueRange(r *request) TimeRange {
	if r.kind == TimePartitioned {
		return r.Range
	}
	return messages.Unbounded
}

// split finds the request's label sets. A label set that no DAP has and
// none had within the retention (past.go) fails the request at once; one
// whose range no DAP covers now waits in the queue.
func (c *Core) split(r *request) *replyError {
	if r.ID == "" {
		return &replyError{ReplyBadRequest, "Request has no id"}
	}
	kind, ok := c.fleet.tableKind(r.Table)
	if !ok {
		return &replyError{ReplyNoResources, fmt.Sprintf("No DAP serves table %q", r.Table)}
	}
	r.kind = kind
	if kind == TimePartitioned && !r.Range.Valid() {
		return &replyError{ReplyBadRequest, fmt.Sprintf("Invalid time range: startTS %s is not before endTS %s", formatTS(r.Range.Start), formatTS(r.Range.End))}
	}
	if kind == Unsharded {
		ls := &r.labelSets(1)[0]
		ls.group, ls.labels = groupKey{table: r.Table}, Labels{}
		r.sets = append(r.sets[:0], ls)
		return nil
	}
	// Every label set of the table's DAPs, or remembered since its DAPs left
	// (past.go), that the selector accepts (and, for a scoped request, that
	// a DAP in scope has or had), in key order.
	known := c.labelSetsOf(r.Table)
	sets := r.labelSets(len(known))
	if cap(r.sets) < len(known) {
		r.sets = make([]*labelSet, 0, len(known))
	}
	for i := range known {
		key, ds := known[i].key, known[i].daps
		if !r.Labels.Selects(known[i].labels) {
			continue
		}
		if r.Assembly != "" || r.Tier != "" {
			in := known[i].past != nil && known[i].past.inScope(r)
			for j := 0; !in && j < len(ds); j++ {
				in = ds[j].serves(r.Table) && c.inScope(r, ds[j])
			}
			if !in {
				continue
			}
		}
		ls := &sets[len(r.sets)]
		// Shared, not cloned: a DAP's labels are never changed in place (a
		// registration installs a new map), and nothing downstream writes them.
		ls.group, ls.labels = groupKey{table: r.Table, key: key}, known[i].labels
		if known[i].g == nil || known[i].g.dropped {
			known[i].g = c.groupFor(ls.group)
		}
		ls.qg = known[i].g
		r.sets = append(r.sets, ls)
	}
	// Each explicitly selected combination must be held by some DAP.
	var missing []string
	for _, combo := range r.Labels.Combinations() {
		found := false
		for _, ls := range r.sets {
			if combo.SubsetOf(ls.labels) {
				found = true
				break
			}
		}
		if !found {
			missing = append(missing, combo.String())
		}
	}
	if len(missing) > 0 || len(r.sets) == 0 {
		if len(missing) == 0 {
			missing = []string{"{}"}
		}
		return &replyError{ReplyNoResources, fmt.Sprintf("No DAP has label set %s for table %q", strings.Join(missing, ", "), r.Table)}
	}
	return nil
}

// tableSets is a table's label sets as split reads them (fleet.setsOf, with
// each one's DAPs and queue group, and the ones remembered), kept until the
// fleet changes: a request is split without two map lookups per label set.
type tableSets struct {
	epoch uint64
	sets  []knownSet
}

type knownSet struct {
	key    labelKey
	labels Labels
	daps   []*dap      // fleet.byLabel[key]
	past   *pastSet    // remembered: DAPs of it left (nil: none)
	g      *queueGroup // its queue group, once a request has had it (until dropped)
}

// labelSetsOf is the table's label sets, of DAPs in the fleet or
// remembered, in key order.
func (c *Core) labelSetsOf(table string) []knownSet {
	ts := c.tableSets[table]
	if ts != nil && ts.epoch == c.fleet.epoch {
		return ts.sets
	}
	live := c.fleet.setsOf[table]
	var past []*pastSet
	if pt := c.fleet.past[table]; pt != nil {
		past = pt.sets
	}
	if len(live) == 0 && len(past) == 0 {
		delete(c.tableSets, table) // (no DAP serves it: nothing kept)
		return nil
	}
	if ts == nil {
		if c.tableSets == nil {
			c.tableSets = map[string]*tableSets{}
		}
		ts = &tableSets{}
		c.tableSets[table] = ts
	}
	clear(ts.sets)
	ts.sets, ts.epoch = ts.sets[:0], c.fleet.epoch
	// A merge of the two key orders; a key in both is one label set.
	for len(live) > 0 || len(past) > 0 {
		var k knownSet
		switch {
		case len(past) == 0 || len(live) > 0 && live[0] < past[0].key:
			k.key, live = live[0], live[1:]
		case len(live) == 0 || past[0].key < live[0]:
			k.key, k.past, k.labels, past = past[0].key, past[0], past[0].labels, past[1:]
		default:
			k.key, k.past, live, past = live[0], past[0], live[1:], past[1:]
		}
		if k.daps = c.fleet.byLabel[k.key]; len(k.daps) > 0 {
			k.labels = k.daps[0].Labels
		}
		ts.sets = append(ts.sets, k)
	}
	return ts.sets
}

// sweepTableSets runs after a step that changed the fleet: a table no DAP
// serves or is remembered for goes from tableSets (labelSetsOf deletes it
// only when asked again, and a table that disappeared may never be), and
// the others, out of date now, let go of their label sets' DAPs and queue
// groups until they are asked again.
func (c *Core) sweepTableSets() {
	c.tableSetsEpoch = c.fleet.epoch
	for t, ts := range c.tableSets {
		if len(c.fleet.setsOf[t]) == 0 && c.fleet.past[t] == nil {
			delete(c.tableSets, t)
			continue
		}
		if ts.epoch != c.fleet.epoch {
			clear(ts.sets)
			ts.sets = ts.sets[:0]
		}
	}
}

// inScope applies the request's scope (assembly, tier) to a DAP.
func (c *Core) inScope(r *request, d *dap) bool { return scopeHas(r, d.Assembly, d.Tier) }

// scopeHas: the request's scope admits a DAP of this assembly and tier.
func scopeHas(r *request, assembly string, tier Tier) bool {
	return (r.Assembly == "" || r.Assembly == assembly) && (r.Tier == "" || r.Tier == tier)
}

// placeRequest offers a new or retried request's items to the DAPs of its
// groups. The queue was quiescent before (no DAP could take any older item),
// so running the ordinary dequeue per DAP keeps oldest-first.
func (c *Core) placeRequest(r *request) {
	for _, ls := range r.sets {
		if len(ls.items) == 0 {
			continue
		}
		// Least loaded first, so that replicas share the work. order is the
		// core's scratch, taken while in use: dequeue can retry, which
		// places the request again.
		order := c.placeOrder[:0]
		c.placeOrder = nil
		// The DAPs that can take something now: the chain's DAP checks
		// (ready) and its group check (inGroup), not copies of them.
		for _, d := range c.groupDAPs(c.queueGroupOf(ls)) {
			if c.ready(d) && c.inGroup(d, ls) {
				order = append(order, d)
			}
		}
		if len(order) > 1 {
			slices.SortStableFunc(order, func(a, b *dap) int {
				return cmp.Compare(len(a.running)*b.Concurrency, len(b.running)*a.Concurrency)
			})
		}
		for _, d := range order {
			if len(ls.items) == 0 || !r.live() {
				break
			}
			c.dequeue(d)
		}
		clear(order)
		c.placeOrder = order[:0]
	}
}
