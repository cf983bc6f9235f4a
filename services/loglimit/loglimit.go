// Package loglimit is the one home of the limit on log lines that input
// from the network causes: a malformed or forged message, a poison record, a
// loop stall. The guide's rule: nothing that arrives on a subject may crash,
// wedge or exhaust a service. A publisher sending 100k bad messages a second
// must not make a service write 100k lines a second (disk, CPU, the
// operator's log pipeline), nor drown the real ones.
//
// Lines are limited per kind (one kind per call site, a constant: never a
// string from the message, or the kinds themselves would grow without
// bound): at most burst lines of a kind in each period (New; the
// services take defaults.LogBurst, defaults.LogPeriod), the rest not
// written. The first line written after some were not carries their number
// (field lines_suppressed). Only lines are limited: the counters next to
// them (sg_*_malformed_messages_total, sg_stream_poison_records_total, ...)
// count every message.
//
// Zerolog's BurstSampler limits alike but cannot say how many lines it
// dropped, and reads the clock itself; this one takes the time (Allow) so
// that a test passes it in.
package loglimit

import (
	"sync"
	"time"

	"github.com/rs/zerolog"
	"github.com/sg-project/sg/services/defaults"
)

// Limiter limits log lines per kind. Its methods are safe for concurrent
// use (NATS handlers log from their subscriptions' goroutines). A nil
// *Limiter limits nothing.
type Limiter struct {
	burst  int
	period time.Duration
	now    func() time.Time

	mu    sync.Mutex
	kinds map[string]*window
}

// window is one kind's current period.
type window struct {
	start      time.Time // the period began
	written    int       // lines written in it
	suppressed uint64    // lines not written since the last written
}

// New returns a limiter of burst lines per kind in each period, reading
// time.Now; burst or period zero take defaults.LogBurst, defaults.LogPeriod.
func New(burst int, period time.Duration) *Limiter {
	if burst <= 0 {
		burst = defaults.LogBurst
	}
	if period <= 0 {
		period = defaults.LogPeriod
	}
	return &Limiter{burst: burst, period: period, now: time.Now, kinds: map[string]*window{}}
}

// Default returns a limiter with the defaults (defaults.LogBurst lines per
// kind in each defaults.LogPeriod).
func Default() *Limiter { return New(0, 0) }

// Allow reports whether a line of kind may be written at now and, when it
// may, how many lines of kind were not written since the last one that was.
// A period starts at the first line of a kind after the last period ended
// (a fixed window: at most 2×burst lines in any span of one period).
func (l *Limiter) Allow(kind string, now time.Time) (ok bool, suppressed uint64) {
	if l == nil {
		return true, 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	w := l.kinds[kind]
	if w == nil {
		w = &window{start: now}
		l.kinds[kind] = w
	}
	// A clock stepped back starts a period too: never a kind silenced for
	// as long as the step.
	if now.Sub(w.start) >= l.period || now.Before(w.start) {
		w.start, w.written = now, 0
	}
	if w.written >= l.burst {
		w.suppressed++
		return false, 0
	}
	w.written++
	suppressed, w.suppressed = w.suppressed, 0
	return true, suppressed
}

// Warn returns a warn event of log for a line of kind, or nil when the
// kind is over its limit (or log would not write it): zerolog's nil event
// writes nothing, so a call site reads as without the limit,
// lim.Warn(&log, "kind").Err(err).Msg("...").
func (l *Limiter) Warn(log *zerolog.Logger, kind string) *zerolog.Event {
	return l.event(log, zerolog.WarnLevel, kind)
}

// WarnAt is Warn at now, for a caller that has the time (a loop that
// measures its own stalls on the clock it is given).
func (l *Limiter) WarnAt(log *zerolog.Logger, kind string, now time.Time) *zerolog.Event {
	return l.eventAt(log, zerolog.WarnLevel, kind, now)
}

// SuppressedField names the field of a line that follows lines of its kind
// that were not written: how many.
const SuppressedField = "lines_suppressed"

func (l *Limiter) event(log *zerolog.Logger, level zerolog.Level, kind string) *zerolog.Event {
	now := time.Now
	if l != nil && l.now != nil {
		now = l.now
	}
	return l.eventAt(log, level, kind, now())
}

func (l *Limiter) eventAt(log *zerolog.Logger, level zerolog.Level, kind string, now time.Time) *zerolog.Event {
	// A line the logger drops by its level does not use up the kind's lines.
	if log.GetLevel() > level || zerolog.GlobalLevel() > level {
		return nil
	}
	ok, suppressed := l.Allow(kind, now)
	if !ok {
		return nil
	}
	e := log.WithLevel(level)
	if suppressed > 0 {
		e = e.Uint64(SuppressedField, suppressed)
	}
	return e
}
