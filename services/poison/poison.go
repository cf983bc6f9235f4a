// Package poison handles the poison records of JetStream streams: a stored
// message that does not decode, or decodes to something invalid. Issue 8: such
// a record is skipped, counted (sg_stream_poison_records_total{stream}) and
// logged once with its stream sequence; it is never retried forever and never
// fatal, so a service that replays a stream always comes up.
//
// Every service that reads a stream (the RC's DAP state replay, the DAPs'
// live ingest, the GW's request-log replay) counts through one Counter, under
// one metric name, labelled by stream.
package poison

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
)

// MetricName is the name of the counter of poison records; MetricHelp its
// help, the same for every service that registers it (a registry refuses
// one name with two helps).
const (
	MetricName = "sg_stream_poison_records_total"
	MetricHelp = "Records of a JetStream stream skipped because they do not decode or are invalid, by stream."
)

// Counter counts poison records by stream. Its methods are safe for
// concurrent use; the zero value is not usable, call NewCounter.
type Counter struct {
	vec *prometheus.CounterVec
}

// NewCounter returns a counter registered on reg (nil: not exposed). Several
// services in one process share one registry: the second registration finds
// the first and uses it, so they count into the same series.
func NewCounter(reg prometheus.Registerer) (*Counter, error) {
	vec := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: MetricName,
		Help: MetricHelp,
	}, []string{"stream"})
	if reg == nil {
		return &Counter{vec: vec}, nil
	}
	err := reg.Register(vec)
	var are prometheus.AlreadyRegisteredError
	switch {
	case errors.As(err, &are):
		existing, ok := are.ExistingCollector.(*prometheus.CounterVec)
		if !ok {
			return nil, fmt.Errorf("poison: %s is registered as %T", MetricName, are.ExistingCollector)
		}
		vec = existing
	case err != nil:
		return nil, fmt.Errorf("poison: register %s: %w", MetricName, err)
	}
	return &Counter{vec: vec}, nil
}

// Skip records one poison record of stream: it counts it and logs it, with
// its sequence, subject and the decode error, at warn level. The caller
// skips the record (and acks or terminates it if its consumer acks).
func (c *Counter) Skip(log zerolog.Logger, stream string, seq uint64, subject string, err error) {
	c.vec.WithLabelValues(stream).Inc()
	log.Warn().Err(err).Str("stream", stream).Uint64("seq", seq).Str("subject", subject).Msg("poison record skipped")
}
