package agg

import (
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"
	"github.com/sg-project/sg/messages"
	"github.com/sg-project/sg/subjects"
)

// Defaults of Config.
const (
	// DefaultPartialTTL is how long partials of a request without expectation are kept.
	DefaultPartialTTL = 2 * time.Minute
	// DefaultHeartbeat is the heartbeat period, the DAPs' default: an RC declares an
	// Agg lost after three missed periods, as it does a DAP.
	DefaultHeartbeat = 2 * time.Second
)

// Config configures an Agg.
type Config struct {
	ID       string // Agg id, a subject token
	NC       *nats.Conn
	Subjects subjects.Subjects // zero value: subjects.Default()
	Log      zerolog.Logger
	// MaxAnswerBytes bounds an answer and the partials buffered for one request; above
	// it the request is answered TOO_LARGE. Default messages.DefaultChunkLimit (256 MiB).
	MaxAnswerBytes int64
	// PartialTTL: partials of a request whose expectation has not come are dropped after
	// it, and answered ids are remembered for it past their deadline. Default 2 min.
	PartialTTL time.Duration
	// Heartbeat is the period of the heartbeat on subjects.AggHeartbeat(ID), by which
	// RCs know the Agg is alive. Default DefaultHeartbeat.
	Heartbeat time.Duration
}

func (c Config) withDefaults() (Config, error) {
	if c.Subjects.Prefix() == "" {
		c.Subjects = subjects.Default()
	}
	if c.MaxAnswerBytes == 0 {
		c.MaxAnswerBytes = messages.DefaultChunkLimit
	}
	if c.PartialTTL == 0 {
		c.PartialTTL = DefaultPartialTTL
	}
	if c.Heartbeat == 0 {
		c.Heartbeat = DefaultHeartbeat
	}
	var errs []error
	if err := subjects.Validate("Agg id", c.ID); err != nil {
		errs = append(errs, err)
	}
	if c.NC == nil {
		errs = append(errs, errors.New("NC is nil"))
	}
	if c.MaxAnswerBytes < 0 {
		errs = append(errs, fmt.Errorf("MaxAnswerBytes %d is negative", c.MaxAnswerBytes))
	}
	if c.Heartbeat < 0 || c.Heartbeat > time.Hour {
		errs = append(errs, fmt.Errorf("Heartbeat %v: want 0 (default) up to 1h", c.Heartbeat))
	}
	if c.PartialTTL < 0 {
		errs = append(errs, fmt.Errorf("PartialTTL %v is negative", c.PartialTTL))
	}
	if err := errors.Join(errs...); err != nil {
		return c, fmt.Errorf("agg: config of %q: %w", c.ID, err)
	}
	return c, nil
}
