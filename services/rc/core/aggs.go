package core

import (
	"fmt"
	"sort"
)

// Aggs: the RC chooses each request's Agg among those alive, in turn, and
// tracks their liveness as it does the DAPs' (the shell turns heartbeats into
// AggUp and silence into AggLost). A request whose Agg is lost is driven
// again on another: its partials died with the Agg, so every label set is
// restarted (not counted as a retry, as for a lost DAP); with no Agg left it
// is answered at once with a clear error rather than left to time out.

// aggSet is the Aggs the core knows, alive or not.
type aggSet struct {
	// known: Config.Aggs was given or an AggUp came. Until then a request
	// keeps the Agg it arrived with (the caller chose it).
	known bool
	alive map[string]bool
	order []string // alive Aggs, sorted
	next  int      // round-robin position
}

func newAggSet(ids []string) aggSet {
	s := aggSet{alive: map[string]bool{}}
	for _, id := range ids {
		s.up(id)
	}
	return s
}

func (s *aggSet) up(id string) bool {
	s.known = true
	if id == "" || s.alive[id] {
		return false
	}
	s.alive[id] = true
	s.order = append(s.order, id)
	sort.Strings(s.order)
	return true
}

func (s *aggSet) lost(id string) bool {
	if !s.alive[id] {
		return false
	}
	delete(s.alive, id)
	for i, a := range s.order {
		if a == id {
			s.order = append(s.order[:i], s.order[i+1:]...)
			break
		}
	}
	return true
}

// pick chooses an alive Agg in turn; ok is false when none is alive.
func (s *aggSet) pick() (string, bool) {
	if len(s.order) == 0 {
		return "", false
	}
	a := s.order[s.next%len(s.order)]
	s.next++
	return a, true
}

// chooseAgg gives a new request its Agg: the one it names if that one is
// alive (or whatever it names if the core tracks no Aggs), else the next
// alive one.
func (c *Core) chooseAgg(r *request) *replyError {
	if !c.aggs.known {
		return nil
	}
	if r.Agg != "" && c.aggs.alive[r.Agg] {
		return nil
	}
	a, ok := c.aggs.pick()
	if !ok {
		return &replyError{ReplyNoResources, errNoAgg}
	}
	r.Agg = a
	return nil
}

const errNoAgg = "No Agg connected to merge the request"

// aggLost: the Agg is gone with the partials it held. Every request it was
// merging is driven again on another Agg, or answered if none is left. A
// request timing out keeps its Agg: it is being answered by the RC anyway.
func (c *Core) aggLost(id string) {
	if !c.aggs.lost(id) {
		return
	}
	c.stats.AggsLost++
	var hit []*request
	for _, r := range c.requests {
		if r.Agg == id && !r.timingOut {
			hit = append(hit, r)
		}
	}
	sort.Slice(hit, func(i, j int) bool {
		if hit[i].arrived != hit[j].arrived {
			return hit[i].arrived < hit[j].arrived
		}
		return hit[i].ID < hit[j].ID
	})
	for _, r := range hit {
		if !r.live() {
			continue
		}
		to, ok := c.aggs.pick()
		if !ok {
			// Nobody to tell: the Agg is dead, so no CancelAgg for it.
			r.Agg = ""
			c.reply(r, ReplyNoResources, fmt.Sprintf("Agg %s was lost and no other Agg is connected", id))
			continue
		}
		c.redrive(r, id, to)
	}
}

// redrive moves a request to Agg `to`. If anything was dispatched, every
// label set restarts: the superseded portions keep their DAPs' slots until
// they answer, and their partials go to the dead Agg.
func (c *Core) redrive(r *request, from, to string) {
	c.flushTrack(r)
	r.Agg = to
	c.stats.Redriven++
	c.emit(AggChanged{Request: r.ID, From: from, To: to})
	if len(r.portions) == 0 {
		return
	}
	// What still runs works for the dead Agg: stop it, so that the new
	// attempt need not wait for it ("Busy executing a previous version").
	// A peer's DAP is left alone: a peer is only told to stop a whole request.
	// Portions superseded before (a retry, an earlier Agg loss) keep the
	// seed's rules for a previous version.
	ids := r.portionIDs(func(ps *portionState) bool { return !ps.finished && !ps.superseded && ps.via == "" })
	for _, id := range ids {
		dapID := r.portion(id).dap
		if d := c.fleet.byID[dapID]; d != nil && d.runs(id) {
			c.emit(CancelDAP{Request: r.ID, DAP: dapID, Portion: id})
			c.stats.Cancels++
		}
	}
	r.aggregating, r.errored = false, false
	for _, ls := range r.sets {
		c.restart(r, ls)
	}
	c.placeRequest(r)
}

// portionIDs lists, in id order (deterministic commands), the request's
// portions that keep says to.
func (r *request) portionIDs(keep func(*portionState) bool) []PortionID {
	ids := make([]PortionID, 0, len(r.portions))
	for _, ps := range r.portions {
		if keep(ps) {
			ids = append(ids, ps.ID)
		}
	}
	return ids
}
