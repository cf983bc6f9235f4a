package core

import (
	"time"

	"github.com/sg-project/sg/services/defaults"
	"github.com/sg-project/sg/services/retryafter"
)

// Config of a core. Zero values take the defaults noted per field, which are
// the seed's (KXI_SG_MAX_RETRY, KXI_SG_MULTI_RC_TO_MAX_WAIT).
type Config struct {
	// Self is this RC's id; DAPs whose RC is Self or empty are ours.
	Self string
	// Addr is how this RC is named in timeout messages (rc=...); Self if empty.
	Addr string
	// MaxRetry: retries allowed per request before it fails (0:
	// defaults.MaxRetry; negative, e.g. defaults.NoRetry: none).
	MaxRetry int
	// MultiRCMaxWait: ticks the primary waits for secondaries' status before
	// composing a timeout message (default 1).
	MultiRCMaxWait int
	// TickEvery is the RC timer period (default 10 s, SG_RC_TIMER); the
	// multi-RC wait lasts MultiRCMaxWait periods.
	TickEvery time.Duration
	// FirstPortion: portion ids start after it. The shell passes its start
	// time, so that a restarted RC never reuses an id of its previous life
	// (a late completion of an old portion then frees nothing of a new one).
	FirstPortion PortionID
	// Aggs are the Aggs the core may give requests to, alive until an
	// AggLost says otherwise. Empty: a request keeps the Agg it names (until
	// an AggUp makes the core track Aggs).
	Aggs []string
	// MaxQueued: queue items (portions waiting for a DAP) this RC holds
	// before it refuses new requests RATE_LIMITED; MaxQueuedPerCaller the
	// same per Request.Caller. 0: no limit. The RC shell's config sets the
	// defaults (SG_RC_MAX_QUEUED, SG_RC_MAX_QUEUED_PER_CALLER).
	MaxQueued          int
	MaxQueuedPerCaller int
	// RetryAfter: the seed's clamp, margin and nominal times for the
	// Retry-After of a refusal over a limit (zero: the seed's defaults).
	RetryAfter retryafter.Config
	// LabelSetRetention: how long a label set (per table) is remembered
	// after its last DAP left, so that a request selecting it waits for a
	// DAP of it instead of being answered without it (past.go). 0:
	// defaults.LabelSetRetention; negative: not remembered.
	LabelSetRetention time.Duration
}

func (c Config) withDefaults() Config {
	c.RetryAfter = c.RetryAfter.WithDefaults()
	if c.Addr == "" {
		c.Addr = c.Self
	}
	if c.MaxRetry == 0 {
		c.MaxRetry = defaults.MaxRetry
	}
	if c.MaxRetry < 0 {
		c.MaxRetry = 0
	}
	if c.TickEvery <= 0 {
		c.TickEvery = defaults.RCTimer
	}
	if c.MultiRCMaxWait <= 0 {
		c.MultiRCMaxWait = defaults.MultiRCMaxWait
	}
	if c.LabelSetRetention == 0 {
		c.LabelSetRetention = defaults.LabelSetRetention
	}
	return c
}
