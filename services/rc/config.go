package rc

import (
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/sg-project/sg/subjects"
)

// Config of one RC. Defaults are the seed's (KXI_SG_...), noted per field.
type Config struct {
	// ID names the RC in subjects; Addr in timeout messages (ID if empty).
	ID   string
	Addr string
	// Assembly is the RC's assembly; "" makes it a global RC.
	Assembly string

	NC       *nats.Conn
	Subjects subjects.Subjects
	Log      zerolog.Logger

	// MaxRetry: retries per request before it fails (default 3, SG_MAX_RETRY).
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
	// RecoverTimeout bounds the replay at start (default 10 s).
	RecoverTimeout time.Duration
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
	if c.MaxRetry == 0 {
		c.MaxRetry = 3
	}
	if c.TickEvery <= 0 {
		c.TickEvery = 10 * time.Second
	}
	if c.MultiRCMaxWait <= 0 {
		c.MultiRCMaxWait = 1
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
		c.AnnounceEvery = time.Second
	}
	if c.RecoverTimeout <= 0 {
		c.RecoverTimeout = 10 * time.Second
	}
	return c, nil
}
