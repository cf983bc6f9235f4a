package rc

import "time"

// Silence is judged on the RC's own running time. The loop wakes at least
// every AnnounceEvery (its announcement ticker); when it comes back later
// than that, the RC itself was stalled: a starved or stopped process, a long
// pause. The DAPs, Aggs and peer RCs it judges could not be heard meanwhile
// (in `sg run` they are the same process, stalled alike, and their beats,
// due at the same moment, come just after the RC's first tick), so the
// stall does not count as their silence. Judged on wall time, one 7 s stall
// of `sg run` lost the Agg and every DAP at once, and the requests in flight
// were answered NO_RESOURCES ("Agg ... was lost and no other Agg is
// connected"). A peer that really died during the stall is found silent
// that much later.

// discountStall moves the last-heard times of the DAPs, Aggs and peer RCs
// forward by the part of the time since the loop last judged that exceeds
// AnnounceEvery (never past now). Call it before judging silence. Lateness
// under a quarter period is scheduling jitter, which the silence thresholds
// (several periods) absorb.
func (r *RC) discountStall(now time.Time) {
	stall := now.Sub(r.awake) - r.cfg.AnnounceEvery
	if r.awake.IsZero() || stall < r.cfg.AnnounceEvery/4 {
		r.awake = now
		return
	}
	r.awake = now
	credit := func(t time.Time) time.Time {
		if t = t.Add(stall); t.After(now) {
			return now
		}
		return t
	}
	for _, rec := range r.daps {
		rec.lastSeen = credit(rec.lastSeen)
	}
	for _, rec := range r.aggs {
		rec.lastSeen = credit(rec.lastSeen)
	}
	for _, p := range r.peers {
		p.lastSeen = credit(p.lastSeen)
	}
	r.metrics.stalls.Inc()
	if stall >= r.cfg.AnnounceEvery {
		r.log.Warn().Dur("stalled", stall).Msg("rc loop stalled: not counted as silence of DAPs, Aggs and peer RCs")
	}
}
