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
// AnnounceEvery (never past now). Call it before judging silence. Any
// lateness is credited: the credit is never more than the lateness, and
// silence still grows by the period at every wake, so crediting jitter is
// harmless, while a threshold relative to the RC's period would leave a DAP
// beating faster than that (a 200 ms heartbeat: dropped after 600 ms) to be
// judged on the RC's own stall. Only lateness of a quarter period or more is
// counted as a stall (metric) and warned of from a full period.
func (r *RC) discountStall(now time.Time) {
	stall := now.Sub(r.awake) - r.cfg.AnnounceEvery
	if r.awake.IsZero() || stall <= 0 {
		if now.After(r.awake) {
			r.awake = now
		}
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
	if stall < r.cfg.AnnounceEvery/4 {
		return // jitter: credited, not a stall
	}
	r.metrics.stalls.Inc()
	if stall >= r.cfg.AnnounceEvery {
		r.log.Warn().Dur("stalled", stall).Msg("rc loop stalled: not counted as silence of DAPs, Aggs and peer RCs")
	}
}
