package gw

import (
	"slices"
	"sync"
	"time"

	"github.com/sg-project/sg/messages"
)

// RCInfo is what the GW knows of one RC, from its announcements and heartbeats.
type RCInfo struct {
	ID          string
	Assembly    string // "" = global RC
	Addr        string
	Outstanding int // as last announced
	Queued      int
	DAPs        int
	Draining    bool
	StartedAt   int64
	LastSeen    time.Time
	Period      time.Duration // announcement/heartbeat period; 3 missed periods drop the RC
	submitted   int           // submitted by this GW since the last announced load
	gone        chan struct{} // closed when this incarnation restarts, drains or is dropped
	ended       bool          // gone is closed
}

// end closes the incarnation's gone channel, once.
func (rc *RCInfo) end() {
	if !rc.ended {
		close(rc.gone)
		rc.ended = true
	}
}

// rcRegistry tracks the RCs and picks one per request. Safe for concurrent use.
type rcRegistry struct {
	mu      sync.Mutex
	rcs     map[string]*RCInfo
	period  time.Duration
	changed chan struct{} // closed and replaced on every change
	turn    int           // rotates ties between equally loaded RCs
	// recent: per assembly ("" = global), when an RC of it last served (was
	// live and not draining). During a rolling restart the scope has no RC
	// for a moment; a request then waits for the next one instead of failing.
	recent map[string]time.Time
	// suspects: RCs silent for three periods. They get no new requests, but
	// the requests they hold are driven again only after deadAfter of
	// silence (or at once if they come back restarted): a busy RC that
	// misses a few announcements must not set off a storm of re-drives.
	suspects  map[string]*RCInfo
	deadAfter time.Duration
}

// Failover reports until when a request for the scope should wait for an RC
// to come back: three periods after an RC of that scope last served.
func (r *rcRegistry) Failover(assembly, affinity string) time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	until := r.recent[assembly].Add(announceMisses * r.period)
	if assembly != "" && affinity == AffinitySoft {
		if g := r.recent[""].Add(announceMisses * r.period); g.After(until) {
			until = g
		}
	}
	return until
}

func newRCRegistry(period, deadAfter time.Duration) *rcRegistry {
	return &rcRegistry{rcs: map[string]*RCInfo{}, period: period, changed: make(chan struct{}), recent: map[string]time.Time{},
		suspects: map[string]*RCInfo{}, deadAfter: deadAfter}
}

// notifyLocked wakes requests waiting for an RC.
func (r *rcRegistry) notifyLocked() {
	close(r.changed)
	r.changed = make(chan struct{})
}

// Changed returns a channel closed at the next change.
func (r *rcRegistry) Changed() <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.changed
}

// announce records an announcement. A new StartedAt means a restart.
func (r *rcRegistry) announce(a *messages.RCAnnouncement, now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	rc, ok := r.rcs[a.RCID]
	if !ok {
		if sus := r.suspects[a.RCID]; sus != nil {
			// Back from silence: the same incarnation keeps its requests.
			delete(r.suspects, a.RCID)
			rc, ok = sus, true
		} else {
			rc = &RCInfo{ID: a.RCID, Period: r.period, gone: make(chan struct{})}
		}
		r.rcs[a.RCID] = rc
	}
	// A restart (new start time) or a drain ends the incarnation: requests
	// submitted to it will not be answered by it, so their GWs drive them again.
	if ok && a.StartedAt != rc.StartedAt {
		rc.end()
		rc.gone, rc.ended = make(chan struct{}), false
	}
	if a.Draining {
		rc.end() // nothing new goes to a draining RC
	}
	rc.Assembly, rc.Addr, rc.Draining, rc.StartedAt = a.Assembly, a.Addr, a.Draining, a.StartedAt
	rc.Outstanding, rc.Queued, rc.DAPs, rc.submitted = a.Outstanding, a.Queued, a.DAPs, 0
	rc.LastSeen = now
	if !a.Draining {
		r.recent[a.Assembly] = now
	}
	r.notifyLocked()
}

// heartbeat refreshes a known RC's liveness and load; an unknown RC stays
// unknown until it announces its assembly.
func (r *rcRegistry) heartbeat(h *messages.RCHeartbeat, now time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	rc, ok := r.rcs[h.RCID]
	if !ok {
		return false
	}
	rc.Outstanding, rc.Queued, rc.submitted, rc.LastSeen = h.Outstanding, h.Queued, 0, now
	if h.IntervalMS > 0 {
		rc.Period = time.Duration(h.IntervalMS) * time.Millisecond
	}
	return true
}

// live reports whether rc was heard from within announceMisses periods.
func live(rc *RCInfo, now time.Time) bool {
	return now.Sub(rc.LastSeen) <= announceMisses*rc.Period
}

// List returns the live RCs, sorted by id, and forgets the dead ones.
func (r *rcRegistry) List(now time.Time) []RCInfo {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.pruneLocked(now)
	out := make([]RCInfo, 0, len(r.rcs))
	for _, rc := range r.rcs {
		out = append(out, *rc)
	}
	slices.SortFunc(out, func(a, b RCInfo) int { return compareStrings(a.ID, b.ID) })
	return out
}

func compareStrings(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func (r *rcRegistry) pruneLocked(now time.Time) {
	for id, rc := range r.rcs {
		if !live(rc, now) {
			delete(r.rcs, id)
			r.suspects[id] = rc
			r.notifyLocked()
		}
	}
	for id, rc := range r.suspects {
		if now.Sub(rc.LastSeen) > max(r.deadAfter, announceMisses*rc.Period) {
			delete(r.suspects, id)
			rc.end()
		}
	}
}

// Prune stops choosing RCs not heard from within three periods, and declares
// dead those silent for deadAfter (their requests' GWs then drive them again).
func (r *rcRegistry) Prune(now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.pruneLocked(now)
}

// closedCh is a channel that is always closed.
var closedCh = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// Gone returns a channel closed when incarnation startedAt of RC id restarts,
// drains or is dropped (at once if that has already happened).
func (r *rcRegistry) Gone(id string, startedAt int64) <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	rc, ok := r.rcs[id]
	if !ok {
		rc, ok = r.suspects[id]
	}
	if !ok || rc.StartedAt != startedAt || rc.Draining {
		return closedCh
	}
	return rc.gone
}

// Alive reports whether incarnation startedAt of RC id is live and not draining.
func (r *rcRegistry) Alive(id string, startedAt int64) bool {
	select {
	case <-r.Gone(id, startedAt):
		return false
	default:
		return true
	}
}

// pick chooses the RC for a request with the given assembly scope.
//
// Seed (scope and assemblies): "If specified, the GW attempts to send to an
// RC in the specified assembly. If no RC in the specified assembly is found
// ... hard (default), then the request fails immediately with a 'No
// resources connected' error ... soft, then the GW sends to a global RC";
// "If the scope parameter is not specified ... the GW targets one of the
// global RCs." Among candidates the least loaded wins; ties rotate.
// It returns "" when no RC fits, and why.
func (r *rcRegistry) pick(assembly, affinity string, now time.Time) (id string, startedAt int64, why string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.pruneLocked(now)
	var cands []*RCInfo
	if assembly != "" {
		cands = r.candidatesLocked(assembly)
		if len(cands) == 0 && affinity != AffinitySoft {
			return "", 0, "no RC of assembly " + assembly + " (hard affinity)"
		}
	}
	if len(cands) == 0 {
		cands = r.candidatesLocked("")
	}
	if len(cands) == 0 {
		if len(r.rcs) == 0 {
			return "", 0, "no RC connected"
		}
		return "", 0, "no global RC connected"
	}
	slices.SortFunc(cands, func(a, b *RCInfo) int { return compareStrings(a.ID, b.ID) })
	load := func(rc *RCInfo) int { return rc.Outstanding + rc.submitted }
	least := load(cands[0])
	for _, rc := range cands[1:] {
		least = min(least, load(rc))
	}
	var best []*RCInfo
	for _, rc := range cands {
		if load(rc) == least {
			best = append(best, rc)
		}
	}
	chosen := best[r.turn%len(best)]
	r.turn++
	chosen.submitted++
	return chosen.ID, chosen.StartedAt, ""
}

func (r *rcRegistry) candidatesLocked(assembly string) []*RCInfo {
	var out []*RCInfo
	for _, rc := range r.rcs {
		if rc.Assembly == assembly && !rc.Draining {
			out = append(out, rc)
		}
	}
	return out
}
