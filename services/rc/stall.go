package rc

import (
	"time"

	"github.com/sg-project/sg/services/defaults"
	"github.com/sg-project/sg/services/stall"
)

// Silence is judged on the RC's own running time (package stall): the loop
// wakes at least every wake period (its wake ticker), and the lateness of a
// wake is not counted as the silence of the DAPs, Aggs and peer RCs it
// judges. Judged on wall time, one 7 s stall of `sg run` lost the Agg and
// every DAP at once, and the requests in flight were answered NO_RESOURCES
// ("Agg ... was lost and no other Agg is connected").
//
// A stall is measured no finer than the wake period: what a wake cannot
// tell from a punctual one (up to a period) is left as silence. So the wake
// period is half the shortest heartbeat interval of the DAPs and Aggs the RC
// judges (a stall then leaves at most a heartbeat interval and a half of
// silence uncounted, under the three that lose one), at most AnnounceEvery
// and, for a heartbeat's sake, at least defaults.RCWakeFloor. Measured at
// AnnounceEvery alone, a DAP beating every 200 ms was dropped for a stall of
// the RC's of 700 ms.

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

// wakeFor is the wake period that a heartbeat interval asks for.
func wakeFor(interval time.Duration) time.Duration {
	return max(interval/2, defaults.RCWakeFloor)
}

// heardInterval notes a DAP's or Agg's heartbeat interval: one shorter than
// the wake period asks for takes effect at once (armWake), a longer one at
// the next announcement (wakePeriod).
func (r *RC) heardInterval(interval time.Duration) {
	r.wantWake = min(r.wantWake, wakeFor(interval))
}

// wakePeriod is the wake period for the DAPs and Aggs known now.
func (r *RC) wakePeriod() time.Duration {
	p := r.cfg.AnnounceEvery
	for _, rec := range r.daps {
		p = min(p, wakeFor(rec.interval))
	}
	for _, rec := range r.aggs {
		if !rec.dead {
			p = min(p, wakeFor(rec.interval))
		}
	}
	return p
}

// armWake moves the wake ticker to the wake period wanted, if it changed.
// The lateness until now is measured on the old period first: that period
// is what the loop kept to until now.
func (r *RC) armWake(t *time.Ticker) {
	if r.wantWake == r.stall.Period {
		return
	}
	r.discountStall(r.cfg.Now())
	r.stall.Period = r.wantWake
	t.Reset(r.wantWake)
}
