package ratelimit

import (
	"time"

	"github.com/rs/zerolog"
)

// Defaults, in one place; a zero Config field takes these.
const (
	DefaultSlots        = 8                // calls in flight to one endpoint at once (the pool)
	DefaultQueueLen     = 1024             // calls waiting in the fan-in queue; more block their callers
	DefaultMaxAttempts  = 5                // tries of one call across pauses before its caller gets the error
	DefaultMinPause     = time.Second      // pause when the endpoint asks one without saying how long
	DefaultMaxPause     = 15 * time.Minute // an asked pause above it is clamped (the seed's worst escalation)
	DefaultMaxEndpoints = 1024             // actors in one Registry (each is a metric label value)
	MaxKeyLen           = 200              // bytes of an endpoint key
)

// Config configures an actor (and every actor of a Registry).
type Config struct {
	Slots       int           // calls in flight at once; DefaultSlots
	QueueLen    int           // fan-in queue capacity; DefaultQueueLen
	MaxAttempts int           // attempts of one call, counting the first; DefaultMaxAttempts
	MinPause    time.Duration // DefaultMinPause
	MaxPause    time.Duration // DefaultMaxPause

	// FailFast: while the endpoint is paused, calls are answered at once
	// with an *Error carrying what is left of the pause, instead of waiting
	// in the queue. For a caller that can send the work elsewhere (a DAP
	// answers its portion THROTTLED and the RC places it on a replica).
	// Use it with MaxAttempts 1.
	FailFast bool

	// Classify says whether err asks for a pause, and how long (the seed's
	// delayError). Default: Delay, which recognises *Error.
	Classify func(err error) (time.Duration, bool)

	Metrics *Metrics       // nil: no metrics
	Log     zerolog.Logger // pauses and resumes, with the endpoint key
}

func (c Config) withDefaults() Config {
	if c.Slots <= 0 {
		c.Slots = DefaultSlots
	}
	if c.QueueLen <= 0 {
		c.QueueLen = DefaultQueueLen
	}
	if c.MaxAttempts <= 0 {
		c.MaxAttempts = DefaultMaxAttempts
	}
	if c.MinPause <= 0 {
		c.MinPause = DefaultMinPause
	}
	if c.MaxPause <= 0 {
		c.MaxPause = DefaultMaxPause
	}
	if c.MaxPause < c.MinPause {
		c.MaxPause = c.MinPause
	}
	if c.Classify == nil {
		c.Classify = Delay
	}
	return c
}
