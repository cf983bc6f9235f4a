package ratelimit

import (
	"context"
	"sync"
	"time"
)

// ThrottleConfig describes an endpoint like the seed's ad platform, in the
// platform's own time; Scale speeds that time up for tests and demos.
type ThrottleConfig struct {
	Endpoint string  // key named in its errors
	Rate     float64 // allowed calls per second of platform time; default 2
	// Pause is the first pause asked on a violation (seed: "GoogleAds will
	// initially request a 15-second wait"); default 15 s.
	Pause time.Duration
	// MaxPause caps the escalation ("exponentially increase that up to 15
	// minutes as requests come within that cessation period"); default 15 min.
	MaxPause time.Duration
	// Scale is wall-clock time per unit of platform time: 0.01 runs the
	// platform 100 times faster (a 15 s pause lasts 150 ms, 2 calls/s become
	// 200/s). Default 1.
	Scale float64
	// Burst is how many calls a full bucket lets through at once; default
	// Rate × Pause, so that a caller that pauses exactly as asked, then
	// sends as fast as allowed, gets the allowed rate.
	Burst int
	// Grace: calls arriving within Grace (platform time) of a pause's start
	// were in flight before the caller could be told; they are refused with
	// what is left of the pause but do not escalate it. Default Pause/5.
	Grace time.Duration
}

// ThrottleStats counts what a Throttle saw.
type ThrottleStats struct {
	Served      int64 // calls let through
	Refused     int64 // calls refused with a pause (violations, in grace, escalations)
	Violations  int64 // refusals that started a pause (not inside one)
	Escalations int64 // calls inside a pause, past the grace: each lengthened it
	// FirstViolation and LastViolation bound the steady state; ServedBetween
	// counts the calls served from the first to the last violation.
	FirstViolation, LastViolation time.Time
	ServedBetween                 int64
}

// SteadyRate is the served calls per wall-clock second from the first
// violation to the last: whole pause-and-burst cycles, without the first
// burst of a full bucket or a pause cut by the end of a run. 0 with fewer
// than two violations.
func (s ThrottleStats) SteadyRate() float64 {
	d := s.LastViolation.Sub(s.FirstViolation)
	if s.Violations < 2 || d <= 0 {
		return 0
	}
	return float64(s.ServedBetween) / d.Seconds()
}

// Throttle is a rate-limited endpoint that behaves like the seed's ad
// platform: a token bucket lets the allowed rate through; a first violation
// asks for a pause; each call inside a pause (past the grace) escalates it,
// doubling up to MaxPause. It is safe for concurrent use.
type Throttle struct {
	cfg   ThrottleConfig
	rate  float64       // tokens per wall-clock second
	pause time.Duration // first pause, wall clock
	max   time.Duration
	grace time.Duration
	burst float64
	now   func() time.Time

	mu          sync.Mutex
	tokens      float64
	refilled    time.Time
	pauseStart  time.Time
	pausedUntil time.Time
	asked       time.Duration // length of the current (or last) pause; 0 after a served call
	stats       ThrottleStats
	servedAt    int64 // Served at the first violation
}

// NewThrottle returns a throttle with a full bucket.
func NewThrottle(cfg ThrottleConfig) *Throttle {
	if cfg.Rate <= 0 {
		cfg.Rate = 2
	}
	if cfg.Pause <= 0 {
		cfg.Pause = 15 * time.Second
	}
	if cfg.MaxPause <= 0 {
		cfg.MaxPause = 15 * time.Minute
	}
	cfg.MaxPause = max(cfg.MaxPause, cfg.Pause)
	if cfg.Scale <= 0 {
		cfg.Scale = 1
	}
	if cfg.Burst <= 0 {
		cfg.Burst = max(1, int(cfg.Rate*cfg.Pause.Seconds()))
	}
	if cfg.Grace <= 0 {
		cfg.Grace = cfg.Pause / 5
	}
	scale := func(d time.Duration) time.Duration { return time.Duration(float64(d) * cfg.Scale) }
	t := &Throttle{
		cfg:   cfg,
		rate:  cfg.Rate / cfg.Scale,
		pause: scale(cfg.Pause),
		max:   scale(cfg.MaxPause),
		grace: scale(cfg.Grace),
		burst: float64(cfg.Burst),
		now:   time.Now,
	}
	t.tokens = t.burst
	t.refilled = t.now()
	return t
}

// Call is one call to the endpoint: nil when served, an *Error with the
// pause asked (wall-clock time) when refused.
func (t *Throttle) Call(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	t.tokens = min(t.burst, t.tokens+now.Sub(t.refilled).Seconds()*t.rate)
	t.refilled = now
	if now.Before(t.pausedUntil) {
		t.stats.Refused++
		if now.Sub(t.pauseStart) < t.grace {
			return &Error{Endpoint: t.cfg.Endpoint, Delay: t.pausedUntil.Sub(now)}
		}
		// Seed: the penalty grows as requests keep coming inside the pause.
		t.stats.Escalations++
		t.asked = min(2*t.asked, t.max)
		t.pauseStart, t.pausedUntil = now, now.Add(t.asked)
		return &Error{Endpoint: t.cfg.Endpoint, Delay: t.asked}
	}
	if t.tokens >= 1 {
		t.tokens--
		t.stats.Served++
		t.asked = 0
		return nil
	}
	t.stats.Refused++
	t.stats.Violations++
	if t.stats.FirstViolation.IsZero() {
		t.stats.FirstViolation = now
		t.servedAt = t.stats.Served
	}
	t.stats.LastViolation = now
	t.stats.ServedBetween = t.stats.Served - t.servedAt
	t.asked = max(t.asked, t.pause)
	t.pauseStart, t.pausedUntil = now, now.Add(t.asked)
	return &Error{Endpoint: t.cfg.Endpoint, Delay: t.asked}
}

// Stats returns what the throttle has seen so far.
func (t *Throttle) Stats() ThrottleStats {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.stats
}
