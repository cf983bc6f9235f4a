package rc

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sg-project/sg/services/rc/core"
)

// metrics are the RC's Prometheus series; the gauges are read from the core
// after every step.
type metrics struct {
	queueLength prometheus.Gauge
	byStatus    *prometheus.GaugeVec
	requests    *prometheus.CounterVec
	dispatches  prometheus.Counter
	retries     prometheus.Counter
	timeouts    prometheus.Counter
	badMessages prometheus.Counter
	latency     *prometheus.HistogramVec
	// peerMessages counts multi-RC traffic by kind (portion_sent,
	// portion_relayed, completion_forwarded, status_query_sent, ...).
	peerMessages *prometheus.CounterVec
	// recoveredDAPs: DAPs rebuilt from the DAP state stream at start.
	recoveredDAPs prometheus.Gauge
	// rememberedLabelSets: label sets whose DAPs all left within the
	// retention (requests selecting them wait for a DAP).
	rememberedLabelSets prometheus.Gauge
	// cancels counts cancellations: received (from a GW or a primary), and
	// sent to a dap, a peer RC or an agg.
	cancels *prometheus.CounterVec
	// aggsLost counts Aggs declared lost; aggRedrives the requests moved to another.
	aggsLost prometheus.Counter
	// stalls counts the times the RC's loop came back late by a quarter
	// period or more (stall.go); any lateness is discounted from silence.
	stalls      prometheus.Counter
	aggRedrives prometheus.Counter
	// refused counts requests refused RATE_LIMITED, by limit.
	refused *prometheus.CounterVec
	// warmHeld counts requests held while the fleet view warmed up.
	warmHeld prometheus.Counter
	// refusals counts the DAPs' and Aggs' refusals received, by outcome
	// (accepted: the request was answered; forwarded: to the primary RC of
	// a relayed portion; dropped: forged or stale; bad: did not decode).
	refusals *prometheus.CounterVec

	// The seed's (KX's) names, beside ours: kxi_rc_queue_length,
	// kxi_rc_retry_count, kxi_rc_reqs_total, kxi_rc_connected_daps,
	// kxi_rc_req_complete_time.
	kxQueueLength   prometheus.Gauge
	kxRetryCount    prometheus.Counter
	kxReqsTotal     prometheus.Counter
	kxConnectedDAPs prometheus.Gauge
	kxCompleteTime  prometheus.Histogram
}

func newMetrics(reg *prometheus.Registry, rcID string) (*metrics, error) {
	labels := prometheus.Labels{"rc": rcID}
	m := &metrics{
		// The seed's kxi_rc_queue_length, under our name.
		queueLength: prometheus.NewGauge(prometheus.GaugeOpts{Name: "sg_rc_queue_length", Help: "Queued request portions.", ConstLabels: labels}),
		byStatus:    prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "sg_rc_requests", Help: "Requests in flight by status.", ConstLabels: labels}, []string{"status"}),
		requests:    prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sg_rc_requests_total", Help: "Requests received, by API.", ConstLabels: labels}, []string{"api"}),
		dispatches:  prometheus.NewCounter(prometheus.CounterOpts{Name: "sg_rc_dispatches_total", Help: "Portions dispatched to DAPs.", ConstLabels: labels}),
		retries:     prometheus.NewCounter(prometheus.CounterOpts{Name: "sg_rc_retries_total", Help: "Label set or request retries.", ConstLabels: labels}),
		timeouts:    prometheus.NewCounter(prometheus.CounterOpts{Name: "sg_rc_timeouts_total", Help: "Requests timed out by the RC.", ConstLabels: labels}),
		badMessages: prometheus.NewCounter(prometheus.CounterOpts{Name: "sg_rc_bad_messages_total", Help: "Messages that could not be decoded or did not fit.", ConstLabels: labels}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "sg_rc_request_seconds", Help: "Time from submission to answer, by return code.",
			ConstLabels: labels, Buckets: prometheus.ExponentialBuckets(0.001, 2, 16)}, []string{"code"}),
		peerMessages:        prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sg_rc_peer_messages_total", Help: "Messages between primary and secondary RCs, by kind.", ConstLabels: labels}, []string{"kind"}),
		rememberedLabelSets: prometheus.NewGauge(prometheus.GaugeOpts{Name: "sg_rc_remembered_label_sets", Help: "(Table, label set) pairs whose DAPs all left within SG_RC_LABEL_SET_RETENTION: requests that select them wait for a DAP of them.", ConstLabels: labels}),
		recoveredDAPs:       prometheus.NewGauge(prometheus.GaugeOpts{Name: "sg_rc_recovered_daps", Help: "DAPs rebuilt from the DAP state stream at start, without re-registering.", ConstLabels: labels}),
		aggsLost:            prometheus.NewCounter(prometheus.CounterOpts{Name: "sg_rc_aggs_lost_total", Help: "Aggs declared lost (missed heartbeats, restart, stop).", ConstLabels: labels}),
		stalls:              prometheus.NewCounter(prometheus.CounterOpts{Name: "sg_rc_loop_stalls_total", Help: "Times the RC's loop came back later than its wake period (half the shortest heartbeat interval of its DAPs and Aggs, at most its announcement period) by a quarter period or more; its lateness (any, not only these) is not counted as silence of DAPs, Aggs and peer RCs.", ConstLabels: labels}),
		aggRedrives:         prometheus.NewCounter(prometheus.CounterOpts{Name: "sg_rc_agg_redrives_total", Help: "Requests driven again on another Agg after theirs was lost.", ConstLabels: labels}),
		refused:             prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sg_rc_refused_total", Help: "Requests refused RATE_LIMITED over a limit, by limit.", ConstLabels: labels}, []string{"limit"}),
		warmHeld:            prometheus.NewCounter(prometheus.CounterOpts{Name: "sg_rc_warmup_held_total", Help: "Requests held while the RC's fleet view warmed up after start.", ConstLabels: labels}),
		refusals:            prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sg_rc_refusals_received_total", Help: "Refusals of a request's message received from DAPs and Aggs, by outcome: accepted (the request was answered), forwarded (a relayed portion's, to its primary RC), dropped (forged or stale: it named what this RC did not send), bad (did not decode).", ConstLabels: labels}, []string{"outcome"}),
		cancels:             prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sg_rc_cancels_total", Help: "Cancellations received (received) and sent (dap, peer, agg).", ConstLabels: labels}, []string{"kind"}),
	}
	m.kxQueueLength = prometheus.NewGauge(prometheus.GaugeOpts{Name: "kxi_rc_queue_length", Help: "Queued request portions (seed: kxi_rc_queue_length; sg_rc_queue_length).", ConstLabels: labels})
	m.kxRetryCount = prometheus.NewCounter(prometheus.CounterOpts{Name: "kxi_rc_retry_count", Help: "Label set or request retries (seed: kxi_rc_retry_count; sg_rc_retries_total).", ConstLabels: labels})
	m.kxReqsTotal = prometheus.NewCounter(prometheus.CounterOpts{Name: "kxi_rc_reqs_total", Help: "Requests received (seed: kxi_rc_reqs_total; sg_rc_requests_total by API).", ConstLabels: labels})
	m.kxConnectedDAPs = prometheus.NewGauge(prometheus.GaugeOpts{Name: "kxi_rc_connected_daps", Help: "DAPs this RC knows and hears from (seed: kxi_rc_connected_daps).", ConstLabels: labels})
	m.kxCompleteTime = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "kxi_rc_req_complete_time", Help: "Seconds from a request's arrival at the RC to its answer (seed: kxi_rc_req_complete_time; sg_rc_request_seconds by code).",
		ConstLabels: labels, Buckets: prometheus.ExponentialBuckets(0.001, 2, 16)})
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.kxQueueLength, m.kxRetryCount, m.kxReqsTotal, m.kxConnectedDAPs, m.kxCompleteTime} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("rc: register metrics: %w", err)
		}
	}
	for _, c := range []prometheus.Collector{m.queueLength, m.byStatus, m.requests, m.dispatches, m.retries, m.timeouts, m.badMessages, m.latency, m.peerMessages, m.recoveredDAPs, m.rememberedLabelSets, m.cancels, m.aggsLost, m.stalls, m.aggRedrives, m.refused, m.warmHeld, m.refusals} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("rc: register metrics: %w", err)
		}
	}
	return m, nil
}

func (m *metrics) observe(c *core.Core) {
	st, by := c.Stats()
	m.queueLength.Set(float64(st.QueueLength))
	m.kxQueueLength.Set(float64(st.QueueLength))
	m.rememberedLabelSets.Set(float64(st.RememberedLabelSets))
	for _, s := range []core.Status{core.StatusAllocating, core.StatusExecuting, core.StatusPendingAggregation,
		core.StatusAggregating, core.StatusInactive, core.StatusTimingOut} {
		m.byStatus.WithLabelValues(s.String()).Set(float64(by[s]))
	}
}
