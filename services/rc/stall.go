package rc

import (
	"time"

	"github.com/sg-project/sg/services/stall"
)

// Silence is judged on the RC's own running time (package stall): the loop
// wakes at least every AnnounceEvery (its announcement ticker), and the
// lateness of a wake is not counted as the silence of the DAPs, Aggs and
// peer RCs it judges. Judged on wall time, one 7 s stall of `sg run` lost the
// Agg and every DAP at once, and the requests in flight were answered
// NO_RESOURCES ("Agg ... was lost and no other Agg is connected").

// discountStall measures the loop's lateness at now (stall.Watch: any is
// credited, a quarter period counts in sg_rc_loop_stalls_total, a whole one
// is warned of) and moves the last-heard times of the DAPs, Aggs and peer
// RCs forward by it. Call it before judging silence.
func (r *RC) discountStall(now time.Time) {
	late := r.stall.Wake(now)
	if late <= 0 {
		return
	}
	for _, rec := range r.daps {
		rec.lastSeen = stall.Credit(rec.lastSeen, late, now)
	}
	for _, rec := range r.aggs {
		rec.lastSeen = stall.Credit(rec.lastSeen, late, now)
	}
	for _, p := range r.peers {
		p.lastSeen = stall.Credit(p.lastSeen, late, now)
	}
}
