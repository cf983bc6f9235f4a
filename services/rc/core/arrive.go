package core

import (
	"fmt"
	"sort"
	"strings"
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
	r := &request{
		Request:        q,
		arrived:        c.now,
		firstQueuedDay: utcDay(c.now),
		purviewEpoch:   c.fleet.purviewEpoch,
		setByKey:       map[labelKey]*labelSet{},
		portions:       map[uint64]*portionState{},
		peerBlocks:     map[string]string{},
	}
	c.requests[q.ID] = r
	c.schedule(timerEntry{at: q.Deadline, kind: timerDeadline, id: q.ID})
	c.stats.Arrived++

	if err := c.split(r); err != nil {
		c.reply(r, err.kind, err.text)
		return
	}
	if err := c.chooseAgg(r); err != nil {
		c.reply(r, err.kind, err.text)
		return
	}
	if q.Deadline <= c.now {
		c.arrivedLate(r) // timeout_more.go
		return
	}
	s, e := c.queueRange(r)
	for _, ls := range r.sets {
		c.enqueue(r, ls, s, e)
	}
	c.placeRequest(r)
	if c.requests[r.ID] == r {
		c.admit(r)
	}
}

type replyError struct {
	kind ReplyKind
	text string
}

func (c *Core) queueRange(r *request) (int64, int64) {
	if r.kind == TimePartitioned {
		return r.Start, r.End
	}
	return MinTS, MaxTS
}

// split finds the request's label sets. A label set that no DAP has fails
// the request at once; one whose range no DAP covers waits in the queue.
func (c *Core) split(r *request) *replyError {
	if r.ID == "" {
		return &replyError{ReplyBadRequest, "Request has no id"}
	}
	kind, ok := c.fleet.kinds[r.Table]
	if !ok {
		return &replyError{ReplyNoResources, fmt.Sprintf("No DAP serves table %q", r.Table)}
	}
	r.kind = kind
	if kind == TimePartitioned && r.Start >= r.End {
		return &replyError{ReplyBadRequest, fmt.Sprintf("Invalid time range: startTS %s is not before endTS %s", formatTS(r.Start), formatTS(r.End))}
	}
	if kind == Unsharded {
		ls := &labelSet{group: groupKey{table: r.Table}, labels: Labels{}}
		r.sets = []*labelSet{ls}
		r.setByKey[""] = ls
		return nil
	}
	// Every known label set of the table's DAPs that the selector accepts.
	for _, d := range c.fleet.byTable[r.Table] {
		if !r.Labels.matches(d.Labels) || !c.inScope(r, d) {
			continue
		}
		if _, seen := r.setByKey[d.key]; seen {
			continue
		}
		// Shared, not cloned: a DAP's labels are never changed in place (a
		// registration installs a new map), and nothing downstream writes them.
		ls := &labelSet{group: groupKey{table: r.Table, key: d.key}, labels: d.Labels}
		r.setByKey[d.key] = ls
		r.sets = append(r.sets, ls)
	}
	// Each explicitly selected combination must be held by some DAP.
	var missing []string
	for _, combo := range r.Labels.combinations() {
		found := false
		for _, ls := range r.sets {
			if combo.subsetOf(ls.labels) {
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
	sortLabelSets(r.sets)
	return nil
}

// inScope applies the request's scope (assembly, tier) to a DAP.
func (c *Core) inScope(r *request, d *dap) bool {
	return (r.Assembly == "" || r.Assembly == d.Assembly) && (r.Tier == "" || r.Tier == d.Tier)
}

// placeRequest offers a new or retried request's items to the DAPs of its
// groups. The queue was quiescent before (no DAP could take any older item),
// so running the ordinary dequeue per DAP keeps oldest-first.
func (c *Core) placeRequest(r *request) {
	for _, ls := range r.sets {
		if len(ls.items) == 0 {
			continue
		}
		cands := c.fleet.group(ls.group)
		// Least loaded first, so that replicas share the work.
		order := make([]*dap, 0, len(cands))
		for _, d := range cands {
			if d.freeSlots() > 0 && d.Available && d.serves(r.Table) {
				order = append(order, d)
			}
		}
		sort.SliceStable(order, func(i, j int) bool {
			return len(order[i].running)*order[j].Concurrency < len(order[j].running)*order[i].Concurrency
		})
		for _, d := range order {
			if len(ls.items) == 0 || c.requests[r.ID] != r {
				break
			}
			c.dequeue(d)
		}
	}
}
