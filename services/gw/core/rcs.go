package core

import (
	"slices"

	"github.com/sg-project/sg/services/stall"
)

// rcState is one RC incarnation as the core tracks it.
type rcState struct {
	RCInfo
	submitted int  // submitted by this GW since the last announced load
	suspect   bool // silent for three periods: no new requests
}

// rcs is the RC table: pure, stepped by the core.
type rcs struct {
	m      map[string]*rcState
	turn   int
	recent map[string]int64 // per assembly: when one of its RCs last served
	served bool             // some RC has been warm: the GW has been ready
}

func newRCs() rcs { return rcs{m: map[string]*rcState{}, recent: map[string]int64{}} }

// announce records an announcement; it reports whether an incarnation ended
// or an RC became available (requests must be looked at).
func (t *rcs) announce(a RCInfo, now, period int64) bool {
	if a.Period <= 0 {
		a.Period = period
	}
	rc := t.m[a.ID]
	changed := rc == nil || rc.suspect
	if rc != nil && rc.StartedAt != a.StartedAt {
		// A restart: requests submitted to the old incarnation will not be
		// answered by it.
		changed = true
	}
	if rc != nil && !rc.Draining && a.Draining {
		changed = true
	}
	if rc != nil && rc.Warming && !a.Warming {
		changed = true // it can take what waits for it
	}
	if !a.Warming && !a.Draining {
		t.served = true
	}
	t.m[a.ID] = &rcState{RCInfo: a}
	t.m[a.ID].LastSeen = now
	if !a.Draining {
		t.recent[a.Assembly] = now
	}
	return changed
}

// discountStall: silence is counted on the GW's own running time. A Tick's
// Late (the shell measures it, package stall) tells of a stall of the GW (a
// stopped or starved process): the RCs' announcements could not be heard
// meanwhile (in `sg run` the RC is the same process, stalled alike, and its
// announcement due at the same moment comes just after), so the lateness is
// not counted as their silence.
func (t *rcs) discountStall(late, now int64) {
	if late <= 0 {
		return
	}
	for _, rc := range t.m {
		rc.LastSeen = stall.CreditNanos(rc.LastSeen, late, now)
	}
}

// prune marks RCs silent for three periods suspect and those silent for
// deadAfter ended; it reports whether any incarnation ended.
func (t *rcs) prune(now, deadAfter int64) bool {
	ended := false
	for id, rc := range t.m {
		silent := now - rc.LastSeen
		if silent > announceMisses*rc.Period {
			rc.suspect = true
		}
		if silent > max(deadAfter, announceMisses*rc.Period) {
			delete(t.m, id)
			ended = true
		}
	}
	return ended
}

// alive: incarnation startedAt of RC id will still answer what it was given.
func (t *rcs) alive(id string, startedAt int64) bool {
	rc := t.m[id]
	return rc != nil && rc.StartedAt == startedAt && !rc.Draining
}

// failover: until when a request for the scope waits for an RC to come
// back: window after one of the scope's RCs last served. A restarting RC
// replays the fleet state before it announces itself, which may take longer
// than a few announcement periods.
func (t *rcs) failover(assembly, affinity string, window int64) int64 {
	until := int64(0)
	if at, ok := t.recent[assembly]; ok {
		until = at + window
	}
	if assembly != "" && affinity == AffinitySoft {
		if at, ok := t.recent[""]; ok {
			until = max(until, at+window)
		}
	}
	return until
}

// pick chooses the RC for a scope.
//
// Seed (scope and assemblies): "If specified, the GW attempts to send to an
// RC in the specified assembly. If no RC in the specified assembly is found
// ... hard (default), then the request fails immediately with a 'No
// resources connected' error ... soft, then the GW sends to a global RC";
// "If the scope parameter is not specified ... the GW targets one of the
// global RCs." Among candidates the least loaded wins; ties rotate.
func (t *rcs) pick(assembly, affinity string) (*rcState, string) {
	var cands []*rcState
	if assembly != "" {
		cands = t.candidates(assembly)
		if len(cands) == 0 && affinity != AffinitySoft {
			return nil, "no RC of assembly " + assembly + " (hard affinity)"
		}
	}
	if len(cands) == 0 {
		cands = t.candidates("")
	}
	if len(cands) == 0 {
		return nil, "no global RC connected"
	}
	slices.SortFunc(cands, func(a, b *rcState) int {
		switch {
		case a.ID < b.ID:
			return -1
		case a.ID > b.ID:
			return 1
		}
		return 0
	})
	load := func(rc *rcState) int { return rc.Outstanding + rc.submitted }
	least := load(cands[0])
	for _, rc := range cands[1:] {
		least = min(least, load(rc))
	}
	var best []*rcState
	for _, rc := range cands {
		if load(rc) == least {
			best = append(best, rc)
		}
	}
	chosen := best[t.turn%len(best)]
	t.turn++
	chosen.submitted++
	return chosen, ""
}

func (t *rcs) candidates(assembly string) []*rcState {
	var out []*rcState
	for _, rc := range t.m {
		if rc.Assembly == assembly && !rc.Draining && !rc.suspect && !rc.Warming {
			out = append(out, rc)
		}
	}
	return out
}

// list returns the RCs that get new requests, sorted by id.
func (t *rcs) list() []RCInfo {
	out := make([]RCInfo, 0, len(t.m))
	for _, rc := range t.m {
		if !rc.suspect {
			out = append(out, rc.RCInfo)
		}
	}
	slices.SortFunc(out, func(a, b RCInfo) int {
		switch {
		case a.ID < b.ID:
			return -1
		case a.ID > b.ID:
			return 1
		}
		return 0
	})
	return out
}
