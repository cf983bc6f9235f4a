package agg

import (
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sg-project/sg/messages"
	"github.com/sg-project/sg/services/promshare"
	"github.com/sg-project/sg/subjects"
)

// metrics: the seed's (KX's) kxi_agg_fn_time, and ours beside it, labelled
// by Agg so the Aggs of one process share them.
type metrics struct {
	fnTime prometheus.ObserverVec // by api
	// fnTimeOf: fnTime's observer of each API the Agg merges
	// (mergedAPIs), looked up once (newMetrics): a label lookup (hashing, a
	// slice of values) on every answer cost an allocation and a few percent
	// of a small answer's CPU. Any other API is looked up each time.
	fnTimeOf [len(mergedAPIs)]prometheus.Observer
	answers  *prometheus.CounterVec // by code
	refused  prometheus.Counter     // refusals sent to RCs (refuse.go)
	// malformed counts every message that did not decode or validate
	// (Stats.Malformed): exact, where the lines about them are limited
	// (package loglimit).
	malformed prometheus.Counter
	// startWaits: answer streams that reached their wait for the GW's start
	// signal (start.go); startWaitsEnded: how each wait ended, by outcome
	// (signal, cancel, stop, deadline).
	startWaits      prometheus.Counter
	startWaitsEnded *prometheus.CounterVec
}

// How a wait for a start signal ends (sg_agg_stream_start_waits_ended_total).
const (
	waitSignal   = "signal"   // the GW's start signal came
	waitCancel   = "cancel"   // the RC cancelled the request
	waitStop     = "stop"     // the Agg stopped
	waitDeadline = "deadline" // the request's deadline passed first
)

func newMetrics(reg prometheus.Registerer, aggID string) (*metrics, error) {
	fn, err := promshare.Register(reg, prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "kxi_agg_fn_time", Help: "Seconds the Agg spent merging a request's partial results into its answer (seed: kxi_agg_fn_time).",
		Buckets: prometheus.ExponentialBuckets(0.0001, 2, 20),
	}, []string{"agg", "api"}))
	if err != nil {
		return nil, err
	}
	ans, err := promshare.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sg_agg_answers_total", Help: "Answers the Agg sent, by return code.",
	}, []string{"agg", "code"}))
	if err != nil {
		return nil, err
	}
	ref, err := promshare.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sg_agg_refusals_sent_total", Help: "Messages of a request (expectations, partials) the Agg could not decode or validate and refused to the request's RC, which answers at once.",
	}, []string{"agg"}))
	if err != nil {
		return nil, err
	}
	waits, err := promshare.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sg_agg_stream_start_waits_total", Help: "Answer streams that waited for the GW's start signal after their first frames.",
	}, []string{"agg"}))
	if err != nil {
		return nil, err
	}
	ended, err := promshare.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sg_agg_stream_start_waits_ended_total", Help: "Waits for the GW's start signal that ended, by outcome: signal, cancel (the RC's), stop (the Agg's), deadline.",
	}, []string{"agg", "outcome"}))
	if err != nil {
		return nil, err
	}
	mal, err := promshare.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sg_agg_malformed_messages_total", Help: "Messages the Agg received that did not decode or validate (every one; the log lines about them are limited).",
	}, []string{"agg"}))
	if err != nil {
		return nil, err
	}
	l := prometheus.Labels{"agg": aggID}
	m := &metrics{malformed: mal.WithLabelValues(aggID), fnTime: fn.MustCurryWith(l), answers: ans.MustCurryWith(l), refused: ref.WithLabelValues(aggID), startWaits: waits.With(l), startWaitsEnded: ended.MustCurryWith(l)}
	for _, o := range []string{waitSignal, waitCancel, waitStop, waitDeadline} {
		m.startWaitsEnded.WithLabelValues(o) // exported at 0 from the start
	}
	for i, api := range mergedAPIs {
		m.fnTimeOf[i] = m.fnTime.WithLabelValues(api)
	}
	return m, nil
}

// merged observes the time of one merge (the aggregation function).
func (m *metrics) merged(api string, start time.Time) {
	m.fnTimeObserver(api).Observe(time.Since(start).Seconds())
}

// mergedAPIs are the APIs whose fnTime observer is kept (metrics.fnTimeOf).
var mergedAPIs = [...]string{subjects.APIGetData, subjects.APISQL, subjects.APIPing}

// fnTimeObserver is fnTime's observer of api.
func (m *metrics) fnTimeObserver(api string) prometheus.Observer {
	if i := slices.Index(mergedAPIs[:], api); i >= 0 {
		return m.fnTimeOf[i]
	}
	return m.fnTime.WithLabelValues(api)
}

func (m *metrics) answered(st messages.Status) { m.answers.WithLabelValues(st.RC.String()).Inc() }

func (m *metrics) refusalSent() { m.refused.Inc() }

// countMalformed counts one message that did not decode or validate, in
// Stats and in sg_agg_malformed_messages_total.
func (a *Agg) countMalformed() {
	a.stats.malformed.Add(1)
	a.metrics.malformed.Inc()
}
