package dap

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sg-project/sg/services/promshare"
)

// metrics are the DAP's Prometheus series under the seed's (KX's) names,
// kxi_da_requests and kxi_da_request_time, labelled by DAP so the DAPs of
// one process (the demo fleet) share them.
type metrics struct {
	requests prometheus.Counter
	time     prometheus.Observer
	refused  prometheus.Counter // malformed dispatches refused to their RC
	// malformed counts every message that did not decode or validate
	// (Stats.Malformed): exact, where the lines about them are limited
	// (package loglimit).
	malformed prometheus.Counter
}

func newMetrics(reg prometheus.Registerer, dapID string) (*metrics, error) {
	req, err := promshare.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "kxi_da_requests", Help: "Portions a DAP started executing (seed: kxi_da_requests).",
	}, []string{"dap"}))
	if err != nil {
		return nil, err
	}
	tm, err := promshare.Register(reg, prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "kxi_da_request_time", Help: "Seconds a DAP spent executing a portion (seed: kxi_da_request_time).",
		Buckets: prometheus.ExponentialBuckets(0.0005, 2, 18),
	}, []string{"dap"}))
	if err != nil {
		return nil, err
	}
	ref, err := promshare.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sg_dap_refusals_sent_total", Help: "Portion dispatches the DAP could not decode or validate and refused to the RC that sent them, which answers at once.",
	}, []string{"dap"}))
	if err != nil {
		return nil, err
	}
	mal, err := promshare.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sg_dap_malformed_messages_total", Help: "Messages the DAP received that did not decode or validate (every one; the log lines about them are limited).",
	}, []string{"dap"}))
	if err != nil {
		return nil, err
	}
	return &metrics{requests: req.WithLabelValues(dapID), time: tm.WithLabelValues(dapID), refused: ref.WithLabelValues(dapID),
		malformed: mal.WithLabelValues(dapID)}, nil
}

// executing counts a portion that starts executing at start; executed
// observes its time when it ends (a pair, not a returned closure: that was
// an allocation per portion).
func (m *metrics) executing() { m.requests.Inc() }

func (m *metrics) executed(start time.Time) { m.time.Observe(time.Since(start).Seconds()) }

func (m *metrics) refusalSent() { m.refused.Inc() }

// countMalformed counts one message that did not decode or validate, in
// Stats and in sg_dap_malformed_messages_total.
func (d *DAP) countMalformed() {
	d.stats.malformed.Add(1)
	d.metrics.malformed.Inc()
}
