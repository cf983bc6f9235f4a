package rc

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/sg-project/sg/services/defaults"
	"github.com/sg-project/sg/services/limits"
	"github.com/sg-project/sg/services/retryafter"
	"github.com/sg-project/sg/subjects"
)

// Config of one RC. Defaults are the seed's (KXI_SG_...), noted per field.
type Config struct {
	// ID names the RC in subjects; Addr in timeout messages (ID if empty).
	ID   string
	Addr string
	// Assembly is the RC's assembly; "" makes it a global RC.
	Assembly string
	// Labels are the RC's metadata labels, announced to GWs. With
	// AssemblyKey set, Assembly comes from Labels[AssemblyKey] (seed:
	// KXI_ASSEMBLY_KEY names the label; an Assembly that disagrees is an error).
	Labels      map[string]string
	AssemblyKey string

	NC       *nats.Conn
	Subjects subjects.Subjects
	Log      zerolog.Logger

	// MaxRetry: retries per request before it fails (0: defaults.MaxRetry,
	// SG_MAX_RETRY; defaults.NoRetry or any negative: none). The core applies
	// the default: this layer passes the value through.
	MaxRetry int
	// TickEvery: the RC timer (default 10 s, SG_RC_TIMER).
	TickEvery time.Duration
	// MultiRCMaxWait: timer periods a primary waits for secondaries' status
	// (default 1, SG_MULTI_RC_TO_MAX_WAIT).
	MultiRCMaxWait int
	// AggIDs are the Aggs this RC hands requests to, in turn (default agg-1).
	AggIDs []string
	// AnnounceEvery: how often the RC announces itself to GWs (default 1 s).
	AnnounceEvery time.Duration
	// Registry receives the RC's metrics; nil for none.
	Registry *prometheus.Registry

	// JetStream, when set, makes the RC rebuild the fleet at start from the
	// DAP state stream (created if missing) before it announces itself, so a
	// restarted or new RC knows every DAP without any re-registering. Nil:
	// the fleet is learnt from live events and heartbeats only.
	JetStream *Durability
	// Now is the RC's clock (default time.Now). Tests move it, e.g. to just
	// before a UTC midnight to drive the SQL date rollover through a running
	// system; deadlines and timers follow it.
	Now func() time.Time

	// WarmUp: after start (and the replay), how long the RC holds requests
	// while it hears from the fleet, unless every DAP the replay named is
	// heard from sooner (default defaults.DAPHeartbeat, one DAP heartbeat
	// period; negative: none). See warm.go.
	WarmUp time.Duration
	// RecoverTimeout bounds the replay at start (default 10 s).
	RecoverTimeout time.Duration

	// MaxQueued: portions this RC holds queued before it refuses new requests
	// RATE_LIMITED (default DefaultMaxQueued, SG_RC_MAX_QUEUED).
	MaxQueued int
	// MaxQueuedPerCaller: the same per caller, as the GW names it in Sg-Caller
	// (default DefaultMaxQueuedPerCaller, SG_RC_MAX_QUEUED_PER_CALLER).
	MaxQueuedPerCaller int
	// RetryAfter: the seed's parameters for the Retry-After of a refusal
	// over a limit (zero: the seed's defaults; SG_RETRY_*).
	RetryAfter retryafter.Config
	// LabelSetRetention: how long the RC remembers a label set after its
	// last DAP left, so that requests selecting it wait for it (default
	// defaults.LabelSetRetention, SG_RC_LABEL_SET_RETENTION; negative:
	// not at all). The core applies the default.
	LabelSetRetention time.Duration
}

// Defaults of the RC's limits.
const (
	DefaultMaxQueued          = defaults.RCMaxQueued
	DefaultMaxQueuedPerCaller = defaults.RCMaxQueuedPerCaller
)

// Environment names of the RC's limits (README: Configuration).
const (
	EnvMaxQueued          = "SG_RC_MAX_QUEUED"
	EnvMaxQueuedPerCaller = "SG_RC_MAX_QUEUED_PER_CALLER"
	// EnvLabelSetRetention: a Go duration or milliseconds; 0 remembers nothing.
	EnvLabelSetRetention = "SG_RC_LABEL_SET_RETENTION"
)

// LimitsFromEnv sets the limits (and the label set retention) that the
// environment names (look is os.LookupEnv), leaving the others as they are.
func (c *Config) LimitsFromEnv(look func(string) (string, bool)) error {
	for _, l := range []struct {
		name string
		v    *int
	}{{EnvMaxQueued, &c.MaxQueued}, {EnvMaxQueuedPerCaller, &c.MaxQueuedPerCaller}} {
		n, err := limits.Int(look, l.name, int64(*l.v))
		if err != nil {
			return fmt.Errorf("rc: %w", err)
		}
		*l.v = int(min(n, 1<<31-1))
	}
	if s, ok := look(EnvLabelSetRetention); ok && strings.TrimSpace(s) != "" {
		d, err := defaults.ParseDuration(EnvLabelSetRetention, strings.TrimSpace(s), true)
		if err != nil {
			return fmt.Errorf("rc: %w", err)
		}
		if d == 0 {
			d = -1 // none: in Config, 0 is the default
		}
		c.LabelSetRetention = d
	}
	return nil
}

func (c Config) withDefaults() (Config, error) {
	if c.NC == nil {
		return c, errors.New("rc: config: NC (a NATS connection) is required")
	}
	if err := subjects.Validate("RC id", c.ID); err != nil {
		return c, fmt.Errorf("rc: config: %w", err)
	}
	if c.Subjects.Prefix() == "" {
		c.Subjects = subjects.Default()
	}
	if c.Addr == "" {
		c.Addr = c.ID
	}
	if c.AssemblyKey != "" {
		v := c.Labels[c.AssemblyKey]
		if c.Assembly != "" && c.Assembly != v {
			return c, fmt.Errorf("rc: config: assembly %q disagrees with label %s=%q (the assembly key)", c.Assembly, c.AssemblyKey, v)
		}
		c.Assembly = v
	}
	if c.Assembly != "" {
		if err := subjects.Validate("assembly", c.Assembly); err != nil {
			return c, fmt.Errorf("rc: config: %w", err)
		}
	}
	if c.TickEvery <= 0 {
		c.TickEvery = defaults.RCTimer
	}
	if c.MultiRCMaxWait <= 0 {
		c.MultiRCMaxWait = defaults.MultiRCMaxWait
	}
	if len(c.AggIDs) == 0 {
		c.AggIDs = []string{"agg-1"}
	}
	for _, a := range c.AggIDs {
		if err := subjects.Validate("Agg id", a); err != nil {
			return c, fmt.Errorf("rc: config: %w", err)
		}
	}
	if c.AnnounceEvery <= 0 {
		c.AnnounceEvery = defaults.AnnounceEvery
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.WarmUp == 0 {
		c.WarmUp = defaults.DAPHeartbeat
	}
	if c.RecoverTimeout <= 0 {
		c.RecoverTimeout = defaults.RecoverTimeout
	}
	if c.MaxQueued <= 0 {
		c.MaxQueued = DefaultMaxQueued
	}
	if c.MaxQueuedPerCaller <= 0 {
		c.MaxQueuedPerCaller = DefaultMaxQueuedPerCaller
	}
	return c, nil
}
