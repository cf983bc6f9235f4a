package core

import (
	"math"
	"slices"
	"sort"
)

// dap is the core's view of one DAP.
type dap struct {
	DAPInfo
	key labelKey
	// running holds the portions this core knows the DAP is executing,
	// current or superseded attempts alike: they all hold a slot.
	running []runningPortion
	// pausedUntil: no dispatch before this time (rate-limit signal).
	pausedUntil int64
	// lastCompletionAt is when the DAP last reported a completion; a DAP that
	// responded at or after a deadline "timed out before we could process
	// its response".
	lastCompletionAt int64
	// changedAt is when the DAP's state last changed (registration, status,
	// vintage, pause): a DAP that became feasible at or after a deadline
	// "timed out before we were able to dequeue".
	changedAt int64
	// tables are the DAP's tables in sorted order, for deterministic dequeue.
	tables []string
	// groups is the DAP's queue group per table, as of fleet epoch
	// groupsEpoch (Core.dapGroups).
	groups      []dapGroup
	groupsEpoch uint64
	// execMean is the DAP's mean portion execution time in ns, when
	// measured (position.go).
	execMean float64
	measured bool
	// gone: removed from the fleet; a portion state's pointer to it no
	// longer stands for the DAP with its id.
	gone bool
}

type dapGroup struct {
	g           *queueGroup
	partitioned bool
}

type runningPortion struct {
	id      PortionID
	request string
	key     labelKey
	attempt uint32
	// relayed marks portions run for a peer (this core is secondary).
	relayed bool
	// started is when it was dispatched: its execution time (position.go).
	started int64
	// ps is the portion's state at dispatch (nil when relayed), as in the
	// running index (running.go).
	ps *portionState
}

func (d *dap) own(self string) bool { return d.RC == "" || d.RC == self }

func (d *dap) freeSlots() int { return d.Concurrency - len(d.running) }

func (d *dap) removeRunning(id PortionID) (runningPortion, bool) {
	for i, r := range d.running {
		if r.id == id {
			d.running = append(d.running[:i], d.running[i+1:]...)
			return r, true
		}
	}
	return runningPortion{}, false
}

// runs reports whether the DAP holds a slot for the portion.
func (d *dap) runs(id PortionID) bool {
	for _, r := range d.running {
		if r.id == id {
			return true
		}
	}
	return false
}

// runsPreviousAttempt: the seed's "Busy executing a previous version of this
// request (auto-retry)": the DAP has not reported back from an earlier attempt
// of this request's label set, so it is not used for the new one.
func (d *dap) runsPreviousAttempt(request string, key labelKey, attempt uint32) bool {
	for _, r := range d.running {
		if r.request == request && r.key == key && r.attempt < attempt {
			return true
		}
	}
	return false
}

func (d *dap) serves(table string) bool {
	_, ok := d.Tables[table]
	return ok
}

// fleet indexes DAPs by id, label set and table.
type fleet struct {
	byID    map[string]*dap
	byLabel map[labelKey][]*dap // sorted by id
	byTable map[string][]*dap   // sorted by id
	// kinds is each table's routing kind, as the DAPs serving it declare it.
	kinds map[string]TableKind
	// purviewEpoch counts purview changes anywhere in the fleet (SQL restarts).
	purviewEpoch uint64
	// topVintage caches maxVintage per group; any change to the fleet's
	// membership or vintages clears it.
	topVintage map[groupKey]uint64
	// vintageEpoch counts the clearings of topVintage, so that a queue
	// group can keep its own copy (Core.groupTop).
	vintageEpoch uint64
	// setsOf lists per table the distinct label sets of the DAPs serving it,
	// sorted, and setDAPs counts those DAPs per group: a request is split by
	// label set without a walk over the fleet.
	setsOf  map[string][]labelKey
	setDAPs map[groupKey]int
	// epoch counts changes to the fleet's membership, label sets and tables.
	epoch uint64
	// dirty lists the groups whose DAPs changed since the core last rebuilt
	// its purview heaps (refreshPurviews).
	dirty []groupKey
	// past: per table, its kind and the label sets DAPs left, remembered
	// for retention (ns; none when 0) after they left; pastN counts the
	// sets, forgetAt is when the first is due to be forgotten (past.go).
	past      map[string]*pastTable
	pastN     int
	retention int64
	forgetAt  int64
}

func newFleet(retention int64) fleet {
	return fleet{
		retention: retention,
		forgetAt:  math.MaxInt64,

		byID:    map[string]*dap{},
		byLabel: map[labelKey][]*dap{},
		byTable: map[string][]*dap{},
		kinds:   map[string]TableKind{},

		topVintage: map[groupKey]uint64{},
		setsOf:     map[string][]labelKey{},
		setDAPs:    map[groupKey]int{},
	}
}

func insertSorted(list []*dap, d *dap) []*dap {
	i := sort.Search(len(list), func(i int) bool { return list[i].ID >= d.ID })
	list = append(list, nil)
	copy(list[i+1:], list[i:])
	list[i] = d
	return list
}

func removeSorted(list []*dap, d *dap) []*dap {
	i := sort.Search(len(list), func(i int) bool { return list[i].ID >= d.ID })
	if i < len(list) && list[i] == d {
		list = append(list[:i], list[i+1:]...)
	}
	return list
}

// upsert applies a registration or status update and returns the DAP.
func (f *fleet) upsert(info DAPInfo, keepVintage bool) *dap {
	if info.Addr == "" {
		info.Addr = info.ID
	}
	if info.Concurrency <= 0 {
		info.Concurrency = 1
	}
	d, ok := f.byID[info.ID]
	if ok {
		if d.Purview != info.Purview || d.PurviewVersion != info.PurviewVersion {
			f.purviewEpoch++
		}
		f.unindex(d)
		if keepVintage {
			info.Vintage = d.Vintage
		}
		d.DAPInfo = info
	} else {
		d = &dap{DAPInfo: info, lastCompletionAt: MinTS, changedAt: MinTS}
		f.byID[info.ID] = d
		f.purviewEpoch++
	}
	d.Labels = info.Labels.Clone()
	d.key = keyOf(d.Labels)
	d.tables = d.tables[:0]
	for t := range info.Tables {
		d.tables = append(d.tables, t)
	}
	sort.Strings(d.tables)
	f.index(d)
	return d
}

func (f *fleet) setVintage(d *dap, v uint64) {
	d.Vintage = v
	f.clearVintages()
}

func (f *fleet) index(d *dap) {
	f.clearVintages()
	f.epoch++
	f.byLabel[d.key] = insertSorted(f.byLabel[d.key], d)
	for t, k := range d.Tables {
		f.byTable[t] = insertSorted(f.byTable[t], d)
		if !k.Valid() {
			k = TimePartitioned // as the shell always read a kind it did not know
		}
		f.kinds[t] = k
		gk := f.groupOf(d, t)
		f.dirty = append(f.dirty, gk)
		if f.past != nil {
			f.returned(d, t, gk.key)
		}
		g := groupKey{table: t, key: d.key}
		if f.setDAPs[g]++; f.setDAPs[g] == 1 {
			keys := f.setsOf[t]
			i, _ := slices.BinarySearch(keys, d.key)
			f.setsOf[t] = slices.Insert(keys, i, d.key)
		}
	}
}

func (f *fleet) unindex(d *dap) {
	f.clearVintages()
	f.epoch++
	f.byLabel[d.key] = removeSorted(f.byLabel[d.key], d)
	if len(f.byLabel[d.key]) == 0 {
		delete(f.byLabel, d.key)
	}
	for t := range d.Tables {
		f.dirty = append(f.dirty, f.groupOf(d, t))
		g := groupKey{table: t, key: d.key}
		if f.setDAPs[g]--; f.setDAPs[g] <= 0 {
			delete(f.setDAPs, g)
			keys := f.setsOf[t]
			if i, ok := slices.BinarySearch(keys, d.key); ok {
				keys = slices.Delete(keys, i, i+1)
			}
			if len(keys) == 0 {
				delete(f.setsOf, t)
			} else {
				f.setsOf[t] = keys
			}
		}
		f.byTable[t] = removeSorted(f.byTable[t], d)
		if len(f.byTable[t]) == 0 {
			delete(f.byTable, t)
			delete(f.kinds, t)
		}
	}
}

// remove takes a lost DAP out of the fleet; its label sets are remembered
// (past.go).
func (f *fleet) remove(d *dap, now int64) {
	f.remember(d, now)
	f.unindex(d)
	delete(f.byID, d.ID)
	d.gone = true
	f.purviewEpoch++
}

// group is the set of DAPs among which a portion's reference vintage is
// judged: the label set's DAPs, or for an unsharded table every DAP that
// serves it (such a table has no label set; we treat its servers as one).
func (f *fleet) group(g groupKey) []*dap {
	if f.kind(g.table) == Unsharded {
		return f.byTable[g.table]
	}
	return f.byLabel[g.key]
}

func (f *fleet) clearVintages() {
	clear(f.topVintage)
	f.vintageEpoch++
}

// maxVintage is the highest vintage in a group: the vintage a DAP must have
// to be up to date when the request has not locked one yet.
func (f *fleet) maxVintage(g groupKey) (uint64, bool) {
	if m, ok := f.topVintage[g]; ok {
		return m, true
	}
	var m uint64
	ds := f.group(g)
	for _, d := range ds {
		m = max(m, d.Vintage)
	}
	if len(ds) > 0 {
		f.topVintage[g] = m
	}
	return m, len(ds) > 0
}

// kind is a table's routing kind (tableKind); a table unknown reads as
// time-partitioned.
func (f *fleet) kind(table string) TableKind {
	k, _ := f.tableKind(table)
	return k
}

// groupKey names a queue group: a table and a label set ("" for unsharded).
type groupKey struct {
	table string
	key   labelKey
}

// serves: a DAP of the fleet serves the group (its table, and for a table
// that is not unsharded, in its label set).
func (f *fleet) serves(g groupKey) bool {
	if f.kind(g.table) == Unsharded {
		return len(f.byTable[g.table]) > 0
	}
	return f.setDAPs[g] > 0
}

// groupOf is the group a DAP serves for a table.
func (f *fleet) groupOf(d *dap, table string) groupKey {
	if f.kind(table) == Unsharded {
		return groupKey{table: table}
	}
	return groupKey{table: table, key: d.key}
}
