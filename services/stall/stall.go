// Package stall measures how late a service's own loop wakes, so that
// silence is judged on the service's running time: the one home of the rule
// the GW's shell and the RC share.
//
// A loop that judges others' silence wakes at least every period (its
// ticker). When it comes back later than that, the service itself was
// stalled: a stopped or starved process, a long pause. What it judges could
// not be heard meanwhile (in `sg run` its peers are the same process, stalled
// alike, and their beats, due at the same moment, come just after the first
// wake), so the lateness is credited to them: their last-heard times move
// forward by it (Credit). Judged on wall time, one 7 s stall of `sg run` lost
// the Agg and every DAP at once, and a stalled GW judged every peer dead and
// adopted their requests. A peer that really fell silent is found so that
// much later.
//
// Any lateness is credited: the credit is never more than the lateness, and
// silence still grows by the period at every wake, so crediting jitter is
// harmless, while a threshold relative to the loop's period would judge a
// peer beating faster than that (a DAP's 200 ms heartbeat: dropped after
// 600 ms) on the service's own stall. Only lateness of a quarter period or
// more counts as a stall (the metric), and from a whole period it is warned
// of.
package stall

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"github.com/sg-project/sg/services/loglimit"
)

// Watch measures the lateness of one loop's wakes. Its zero value with a
// Period measures without counting or warning; one goroutine (the loop's)
// uses it.
type Watch struct {
	Period time.Duration      // the loop wakes at least this often
	Stalls prometheus.Counter // counts stalls (a quarter period late or more); nil: not counted
	Log    *zerolog.Logger    // warns of stalls of a whole period or more; nil: not warned
	Warn   string             // the warning's message: what the stall is not counted as
	// Limit limits the warnings (a starved process can stall at every wake,
	// down to the RC's 10 ms): the GW and the RC pass theirs; nil limits
	// nothing, as a nil *loglimit.Limiter. Stalls counts every stall.
	Limit *loglimit.Limiter

	awake time.Time // the last wake
}

// Wake records a wake of the loop at now, to judge silence, and returns its
// lateness: how much longer than Period it came after the last wake (0 for
// the first, or one on time). That lateness is to be credited (Credit) to
// everything whose silence the loop judges, before judging it.
func (w *Watch) Wake(now time.Time) time.Duration {
	last := w.awake
	if now.After(last) {
		w.awake = now
	}
	late := now.Sub(last) - w.Period
	if last.IsZero() || late <= 0 {
		return 0
	}
	if late < w.Period/4 {
		return late // jitter: credited, not a stall
	}
	if w.Stalls != nil {
		w.Stalls.Inc()
	}
	if w.Log != nil && late >= w.Period {
		w.Limit.WarnAt(w.Log, "loop_stall", now).Dur("stalled", late).Msg(w.Warn)
	}
	return late
}

// Credit moves a last-heard time forward by a wake's lateness, never past
// the wake (now); a time heard after it is left alone.
func Credit(last time.Time, late time.Duration, now time.Time) time.Time {
	if late <= 0 || !last.Before(now) {
		return last
	}
	if last = last.Add(late); last.After(now) {
		return now
	}
	return last
}

// CreditNanos is Credit on unix nanoseconds (the GW core's clock).
func CreditNanos(last, late, now int64) int64 {
	if late <= 0 || last >= now {
		return last
	}
	return min(last+late, now)
}
