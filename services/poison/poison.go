// Package poison handles the poison records of JetStream streams: a stored
// message that does not decode, or decodes to something invalid. Issue 8: such
// a record is skipped, counted (sg_stream_poison_records_total{stream}) and
// logged once with its stream sequence (lines limited per stream: package
// loglimit; the counter counts every record); it is never retried forever and never
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
	"github.com/sg-project/sg/services/loglimit"
)

// MetricName is the name of the counter of poison records, MetricHelp its help:
// every registration in one registry must use both, or the second one fails.
const (
	MetricName = "sg_stream_poison_records_total"
	MetricHelp = "Stream records skipped because they do not decode or are invalid, by stream."
)

// Counter counts poison records by stream. Its methods are safe for
// concurrent use; the zero value is not usable, call NewCounter.
type Counter struct {
	vec *prometheus.CounterVec
	lim *loglimit.Limiter // a stream full of poison must not flood the log
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
		return &Counter{vec: vec, lim: loglimit.Default()}, nil
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
	return &Counter{vec: vec, lim: loglimit.Default()}, nil
}

// Skip records one poison record of stream: it counts it and logs it, with
// its sequence, subject and the decode error, at warn level (at most
// loglimit's burst per stream in each of its periods). The caller
// skips the record (and acks or terminates it if its consumer acks).
func (c *Counter) Skip(log zerolog.Logger, stream string, seq uint64, subject string, err error) {
	c.vec.WithLabelValues(stream).Inc()
	c.lim.Warn(&log, stream).Err(err).Str("stream", stream).Uint64("seq", seq).Str("subject", subject).Msg("poison record skipped")
}
