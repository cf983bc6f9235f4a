package dap

import (
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"github.com/sg-project/sg/messages"
	"github.com/sg-project/sg/services/defaults"
	"github.com/sg-project/sg/services/limits"
	"github.com/sg-project/sg/subjects"
)

// Defaults of Config.
const (
	DefaultHeartbeat   = defaults.DAPHeartbeat
	DefaultConcurrency = 1
	DefaultMaxQueue    = defaults.DAPMaxQueue // SG_DAP_MAX_QUEUE
)

// EnvMaxQueue names MaxQueue in the environment (README: Configuration).
const EnvMaxQueue = "SG_DAP_MAX_QUEUE"

// MaxQueueFromEnv is the MaxQueue the environment sets (look is os.LookupEnv), or 0
// (the default) if it sets none.
func MaxQueueFromEnv(look func(string) (string, bool)) (int, error) {
	n, err := limits.Int(look, EnvMaxQueue, 0)
	if err != nil {
		return 0, fmt.Errorf("dap: %w", err)
	}
	return int(min(n, 1<<31-1)), nil
}

// Config describes one DAP. The fields up to Concurrency are those of its registration.
type Config struct {
	ID       string // DAP id, a subject token
	RCID     string // owning RC; "" = any RC may use it
	Addr     string // host:port shown in timeout messages; default: ID
	Assembly string // "" = none

	Labels           messages.LabelSet
	Tier             messages.Tier
	Purview          messages.TimeRange // zero value: Unbounded
	Tables           []messages.TableInfo
	PurviewVersion   uint64
	ReferenceVintage uint64
	Concurrency      int           // portions run at once; default DefaultConcurrency
	Heartbeat        time.Duration // default DefaultHeartbeat
	// MaxQueue bounds the dispatches waiting for a slot; one more is refused
	// RATE_LIMITED (limits.DAPQueue). Default DefaultMaxQueue (SG_DAP_MAX_QUEUE).
	MaxQueue int
	// PartialWindow is the size in bytes of one window of a partial result
	// that is sent in several (window.go). Default defaults.DAPPartialWindow;
	// the max payload bounds it.
	PartialWindow int

	NC       *nats.Conn
	Subjects subjects.Subjects // zero value: subjects.Default()
	Log      zerolog.Logger
	Source   Source

	// Registry receives the DAP's metrics (kxi_da_requests,
	// kxi_da_request_time, labelled dap); nil: not exposed. DAPs of one
	// process may share one.
	Registry prometheus.Registerer

	// Unavailable, when set, starts the DAP unavailable with this reason (e.g. "replaying
	// the stream"); it registers so, and Apply or SetAvailable make it available.
	Unavailable string
}

// withDefaults fills the zero fields and validates the result, so New reports every
// mistake at start with the field's name rather than at the first message.
func (c Config) withDefaults() (Config, error) {
	if c.Subjects.Prefix() == "" {
		c.Subjects = subjects.Default()
	}
	if c.Addr == "" {
		c.Addr = c.ID
	}
	if c.Purview == (messages.TimeRange{}) {
		c.Purview = messages.Unbounded
	}
	if c.Concurrency == 0 {
		c.Concurrency = DefaultConcurrency
	}
	if c.Heartbeat == 0 {
		c.Heartbeat = DefaultHeartbeat
	}
	if c.MaxQueue == 0 {
		c.MaxQueue = DefaultMaxQueue
	}
	if c.PartialWindow == 0 {
		c.PartialWindow = defaults.DAPPartialWindow
	}
	var errs []error
	if c.NC == nil {
		errs = append(errs, errors.New("NC is nil"))
	}
	if c.Source == nil {
		errs = append(errs, errors.New("Source is nil"))
	}
	if c.MaxQueue < 0 {
		errs = append(errs, fmt.Errorf("MaxQueue %d is negative", c.MaxQueue))
	}
	if c.PartialWindow < 0 {
		errs = append(errs, fmt.Errorf("PartialWindow %d is negative", c.PartialWindow))
	}
	if c.Heartbeat < 0 || c.Heartbeat > messages.MaxHeartbeat {
		errs = append(errs, fmt.Errorf("Heartbeat %v: want 0 (default) up to %v, what RCs accept", c.Heartbeat, messages.MaxHeartbeat))
	}
	// The registration's own checks cover id, labels, tier, purview, tables, concurrency.
	reg := registration(c, true)
	if err := reg.Validate(); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return c, fmt.Errorf("dap: config of %q: %w", c.ID, err)
	}
	return c, nil
}

// registration builds the registration message from a config and the current availability.
func registration(c Config, available bool) messages.DAPRegistration {
	return messages.DAPRegistration{
		V: messages.DAPVersion, DAPID: c.ID, RCID: c.RCID, Addr: c.Addr, Assembly: c.Assembly,
		Labels: c.Labels, Tier: c.Tier, Purview: c.Purview, Tables: c.Tables,
		PurviewVersion: c.PurviewVersion, ReferenceVintage: c.ReferenceVintage,
		Available: available, Concurrency: c.Concurrency,
	}
}
