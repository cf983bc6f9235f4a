package agg

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
	// DefaultPartialTTL is how long partials of a request without expectation are kept.
	DefaultPartialTTL = 2 * time.Minute
	// DefaultMaxHeldBytes bounds the partials an Agg holds for all requests.
	DefaultMaxHeldBytes = defaults.AggMaxHeldBytes // SG_AGG_MAX_BYTES
	// DefaultHeartbeat is the heartbeat period, the DAPs' default: an RC declares an
	// Agg lost after three missed periods, as it does a DAP.
	DefaultHeartbeat = defaults.DAPHeartbeat
)

// Config configures an Agg.
type Config struct {
	ID       string // Agg id, a subject token
	NC       *nats.Conn
	Subjects subjects.Subjects // zero value: subjects.Default()
	Log      zerolog.Logger
	// MaxAnswerBytes bounds an answer and the partials buffered for one request; above
	// it the request is answered TOO_LARGE. Default defaults.MaxAnswerBytes (256 MiB).
	MaxAnswerBytes int64
	// PartialTTL: partials of a request whose expectation has not come are dropped after
	// it, and answered ids are remembered for it past their deadline. Default 2 min.
	PartialTTL time.Duration
	// MaxRequestBytes bounds the partial results held for one request; over it the
	// request is answered TOO_LARGE naming the limit (limits.AggRequestBytes). Default
	// MaxAnswerBytes (SG_AGG_MAX_REQUEST_BYTES).
	MaxRequestBytes int64
	// MaxHeldBytes bounds the partial results held for all requests together; a
	// request whose partial would pass it is answered RATE_LIMITED (limits.AggHeldBytes)
	// with Sg-Retry-After. Default DefaultMaxHeldBytes (SG_AGG_MAX_BYTES).
	MaxHeldBytes int64
	// Registry receives the Agg's metrics (kxi_agg_fn_time, labelled agg);
	// nil: not exposed.
	Registry prometheus.Registerer
	// StreamWindow is the size in bytes of one frame of an answer streamed to a caller
	// that reads streams (messages/stream.go), at most the max payload: the Agg encodes
	// and sends the merged answer a window at a time. Default defaults.AggStreamWindow.
	StreamWindow int
	// Heartbeat is the period of the heartbeat on subjects.AggHeartbeat(ID), by which
	// RCs know the Agg is alive. Default DefaultHeartbeat.
	Heartbeat time.Duration
	// DoneDelay is how long a done notice to an RC waits for others to the
	// same RC, to go in one message (done.go). Default defaults.AggDoneDelay.
	DoneDelay time.Duration
}

// Environment names of the Agg's limits (README: Configuration).
const (
	EnvMaxRequestBytes = "SG_AGG_MAX_REQUEST_BYTES"
	EnvMaxHeldBytes    = "SG_AGG_MAX_BYTES"
)

// LimitsFromEnv sets the limits that the environment names (look is os.LookupEnv),
// leaving the others as they are.
func (c *Config) LimitsFromEnv(look func(string) (string, bool)) error {
	var err error
	if c.MaxRequestBytes, err = limits.Int(look, EnvMaxRequestBytes, c.MaxRequestBytes); err != nil {
		return fmt.Errorf("agg: %w", err)
	}
	if c.MaxHeldBytes, err = limits.Int(look, EnvMaxHeldBytes, c.MaxHeldBytes); err != nil {
		return fmt.Errorf("agg: %w", err)
	}
	return nil
}

func (c Config) withDefaults() (Config, error) {
	if c.Subjects.Prefix() == "" {
		c.Subjects = subjects.Default()
	}
	if c.MaxAnswerBytes == 0 {
		c.MaxAnswerBytes = defaults.MaxAnswerBytes
	}
	if c.PartialTTL == 0 {
		c.PartialTTL = DefaultPartialTTL
	}
	if c.Heartbeat == 0 {
		c.Heartbeat = DefaultHeartbeat
	}
	if c.StreamWindow == 0 {
		c.StreamWindow = defaults.AggStreamWindow
	}
	if c.DoneDelay == 0 {
		c.DoneDelay = defaults.AggDoneDelay
	}
	if c.MaxRequestBytes == 0 {
		c.MaxRequestBytes = c.MaxAnswerBytes
	}
	if c.MaxHeldBytes == 0 {
		c.MaxHeldBytes = DefaultMaxHeldBytes
	}
	var errs []error
	if err := subjects.Validate("Agg id", c.ID); err != nil {
		errs = append(errs, err)
	}
	if c.NC == nil {
		errs = append(errs, errors.New("NC is nil"))
	}
	if c.MaxRequestBytes < 0 || c.MaxHeldBytes < 0 {
		errs = append(errs, fmt.Errorf("MaxRequestBytes %d or MaxHeldBytes %d is negative", c.MaxRequestBytes, c.MaxHeldBytes))
	}
	if c.MaxAnswerBytes < 0 {
		errs = append(errs, fmt.Errorf("MaxAnswerBytes %d is negative", c.MaxAnswerBytes))
	}
	if c.Heartbeat < 0 || c.Heartbeat > messages.MaxHeartbeat {
		errs = append(errs, fmt.Errorf("Heartbeat %v: want 0 (default) up to %v", c.Heartbeat, messages.MaxHeartbeat))
	}
	if c.DoneDelay < 0 || c.DoneDelay > time.Minute {
		errs = append(errs, fmt.Errorf("DoneDelay %v: want 0 (default) up to 1m", c.DoneDelay))
	}
	if c.StreamWindow < 0 {
		errs = append(errs, fmt.Errorf("StreamWindow %d is negative", c.StreamWindow))
	}
	if c.PartialTTL < 0 {
		errs = append(errs, fmt.Errorf("PartialTTL %v is negative", c.PartialTTL))
	}
	if err := errors.Join(errs...); err != nil {
		return c, fmt.Errorf("agg: config of %q: %w", c.ID, err)
	}
	return c, nil
}
