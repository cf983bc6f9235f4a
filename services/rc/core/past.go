package core

import (
	"cmp"
	"math"
	"slices"
)

// The label sets the fleet had. Seed (Queueing): "If there are no feasible
// DAPs to service a portion of the request, then the portion is queued ...
// The RC moves request portions out of the queue as DAPs that can service
// them become available", and a portion no DAP covers times out with "No DAP
// covers labels/time range" and an empty dap list. A label set whose DAPs
// have all just left (a restart, a rolling upgrade, heartbeats missed under
// load) is such a portion: a request that selects it is planned over it too,
// and its portion waits for a DAP of it, instead of the request being
// answered without it (a silently partial answer) or refused "No DAP has
// label set".
//
// So the fleet remembers, per table, its routing kind and each label set a
// DAP left, with the scope (assembly, tier) of each DAP that left, for
// Config.LabelSetRetention after it left. A DAP that registers again with
// that scope takes its entry back; entries past the retention are forgotten
// at the first step after it (forget), so that a label set that was really
// decommissioned stops holding requests to their deadline. Every DAPLost
// counts alike: a clean shutdown says nothing of coming back (a rolling
// upgrade shuts down cleanly too).

// pastTable is what the fleet remembers of a table: its kind (for a table
// no DAP serves now) and its label sets whose DAPs left.
type pastTable struct {
	kind TableKind
	sets []*pastSet // by label set key; for an unsharded table one, key ""
}

// pastSet is a label set of a table that DAPs left: its labels and the
// scope of each DAP that left and has not come back.
type pastSet struct {
	key    labelKey
	labels Labels
	scopes []pastScope
}

type pastScope struct {
	assembly string
	tier     Tier
	leftAt   int64
}

// maxPastSets bounds the (table, label set) pairs remembered: DAPs that come
// and go under ever new label sets make the oldest be forgotten first.
const maxPastSets = 10_000

// inScope: a DAP of the label set that left was in the request's scope.
func (p *pastSet) inScope(r *request) bool {
	for _, s := range p.scopes {
		if scopeHas(r, s.assembly, s.tier) {
			return true
		}
	}
	return false
}

// lastLeft is when the last of its DAPs left.
func (p *pastSet) lastLeft() int64 {
	var t int64 = math.MinInt64
	for _, s := range p.scopes {
		t = max(t, s.leftAt)
	}
	return t
}

// remember records that DAP d leaves the fleet now (before it is unindexed:
// the table kinds are read).
func (f *fleet) remember(d *dap, now int64) {
	if f.retention <= 0 {
		return
	}
	for _, t := range d.tables {
		kind := f.kind(t)
		if f.past == nil {
			f.past = map[string]*pastTable{}
		}
		pt := f.past[t]
		if pt == nil {
			pt = &pastTable{}
			f.past[t] = pt
		}
		pt.kind = kind
		key, labels := d.key, d.Labels
		if kind == Unsharded {
			key, labels = "", Labels{}
		}
		i, ok := pt.find(key)
		if !ok {
			pt.sets = slices.Insert(pt.sets, i, &pastSet{key: key, labels: labels})
			f.pastN++
		}
		ps := pt.sets[i]
		ps.labels = labels // (the newest: a registration installs a new map)
		j := slices.IndexFunc(ps.scopes, func(s pastScope) bool { return s.assembly == d.Assembly && s.tier == d.Tier })
		if j < 0 {
			ps.scopes = append(ps.scopes, pastScope{assembly: d.Assembly, tier: d.Tier})
			j = len(ps.scopes) - 1
		}
		ps.scopes[j].leftAt = now
		f.forgetAt = min(f.forgetAt, f.dueAt(now))
	}
	for f.pastN > maxPastSets {
		f.forgetOldest()
	}
}

// returned: a DAP of that scope serves the table's label set again (d is
// being indexed); its entry goes.
func (f *fleet) returned(d *dap, table string, key labelKey) {
	pt := f.past[table]
	if pt == nil {
		return
	}
	i, ok := pt.find(key)
	if !ok {
		return
	}
	ps := pt.sets[i]
	ps.scopes = slices.DeleteFunc(ps.scopes, func(s pastScope) bool { return s.assembly == d.Assembly && s.tier == d.Tier })
	if len(ps.scopes) == 0 {
		f.dropPast(table, pt, i)
	}
}

func (f *fleet) dropPast(table string, pt *pastTable, i int) {
	pt.sets = slices.Delete(pt.sets, i, i+1)
	f.pastN--
	if len(pt.sets) == 0 {
		delete(f.past, table)
	}
	f.epoch++
}

// forget drops what has been remembered for the retention: at every step,
// an inlined compare until something is due.
func (f *fleet) forget(now int64) {
	if now >= f.forgetAt {
		f.forgetDue(now)
	}
}

func (f *fleet) forgetDue(now int64) {
	f.forgetAt = math.MaxInt64
	for t, pt := range f.past {
		for i := 0; i < len(pt.sets); {
			ps := pt.sets[i]
			ps.scopes = slices.DeleteFunc(ps.scopes, func(s pastScope) bool { return now-s.leftAt >= f.retention })
			if len(ps.scopes) == 0 {
				f.dropPast(t, pt, i)
				continue
			}
			for _, s := range ps.scopes {
				f.forgetAt = min(f.forgetAt, f.dueAt(s.leftAt))
			}
			i++
		}
	}
}

// dueAt is when what left at leftAt is forgotten (a retention of
// centuries does not wrap around).
func (f *fleet) dueAt(leftAt int64) int64 {
	if leftAt > math.MaxInt64-f.retention {
		return math.MaxInt64
	}
	return leftAt + f.retention
}

// forgetOldest drops the label set whose DAPs left first (over maxPastSets).
func (f *fleet) forgetOldest() {
	var (
		table  string
		at     int
		oldest int64 = math.MaxInt64
	)
	for t, pt := range f.past {
		for i, ps := range pt.sets {
			if l := ps.lastLeft(); l < oldest || (l == oldest && (t < table || t == table && i < at)) {
				table, at, oldest = t, i, l
			}
		}
	}
	if pt := f.past[table]; pt != nil {
		f.dropPast(table, pt, at)
	}
}

// tableKind is a table's routing kind, as its DAPs declare it or, when none
// serves it now, as the last that left did; ok is false for a table unknown.
func (f *fleet) tableKind(table string) (TableKind, bool) {
	if k, ok := f.kinds[table]; ok {
		return k, true
	}
	if pt := f.past[table]; pt != nil {
		return pt.kind, true
	}
	return TimePartitioned, false
}

// find is the index of the table's remembered label set key (or where
// it would go) and whether it is there.
func (pt *pastTable) find(key labelKey) (int, bool) {
	return slices.BinarySearchFunc(pt.sets, key, func(p *pastSet, k labelKey) int { return cmp.Compare(p.key, k) })
}
