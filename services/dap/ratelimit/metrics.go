package ratelimit

import (
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metric names, one table (the README lists them from here).
const (
	MetricPauses        = "sg_ratelimit_pauses_total"
	MetricPausedSeconds = "sg_ratelimit_paused_seconds_total"
	MetricEscalations   = "sg_ratelimit_escalations_total"
)

// Metrics are the rate-limit counters, per endpoint key. One Metrics may serve
// many actors and registries.
type Metrics struct {
	pauses      *prometheus.CounterVec
	paused      *prometheus.CounterVec
	escalations *prometheus.CounterVec
}

// NewMetrics registers the counters with reg (nil: not registered). When reg
// already holds them (two users in one process, as in `sg run`), the
// registered ones are shared.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		pauses: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: MetricPauses,
			Help: "Pauses of all calls to an endpoint started because it asked for one (rate limit), by endpoint key.",
		}, []string{"endpoint"}),
		paused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: MetricPausedSeconds,
			Help: "Seconds during which all calls to an endpoint were paused, by endpoint key.",
		}, []string{"endpoint"}),
		escalations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: MetricEscalations,
			Help: "Rate-limit answers that asked a longer pause than the one before (the endpoint escalated its penalty), by endpoint key.",
		}, []string{"endpoint"}),
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []**prometheus.CounterVec{&m.pauses, &m.paused, &m.escalations} {
		if err := reg.Register(*c); err != nil {
			var are prometheus.AlreadyRegisteredError
			if !errors.As(err, &are) {
				return nil, err
			}
			cv, ok := are.ExistingCollector.(*prometheus.CounterVec)
			if !ok {
				return nil, err
			}
			*c = cv
		}
	}
	return m, nil
}

func (m *Metrics) pauseStarted(key string) {
	if m != nil {
		m.pauses.WithLabelValues(key).Inc()
	}
}

func (m *Metrics) pausedFor(key string, d time.Duration) {
	if m != nil && d > 0 {
		m.paused.WithLabelValues(key).Add(d.Seconds())
	}
}

func (m *Metrics) escalation(key string) {
	if m != nil {
		m.escalations.WithLabelValues(key).Inc()
	}
}
