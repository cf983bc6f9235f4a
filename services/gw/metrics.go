package gw

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sg-project/sg/messages"
	"github.com/sg-project/sg/services/poison"
)

type metrics struct {
	requests *prometheus.CounterVec   // by api and rc, when the answer ended (answered)
	latency  *prometheus.HistogramVec // by api
	inFlight prometheus.GaugeFunc
	dropped  prometheus.Counter // answers for a request already answered (or unknown)
	busy     prometheus.Counter // requests refused past MaxInFlight
	// sendFailed: answer messages (whole, chunk or frame) not published.
	sendFailed prometheus.Counter

	limited      *prometheus.CounterVec // refusals over a limit, by limit
	heldFull     prometheus.Counter     // answers ended at SG_GW_MAX_HELD_BYTES (core Stats.HeldFull)
	refusedReply prometheus.Counter     // requests dropped: reply subject not a client inbox
	malformed    *prometheus.CounterVec // messages on the GW's internal subjects that do not decode, by kind
	poison       *poison.Counter        // stream records skipped, by stream

	byRC      *prometheus.CounterVec // drives submitted, by RC
	redrives  *prometheus.CounterVec // by reason
	adopted   prometheus.Counter
	logErrors *prometheus.CounterVec // by operation

	jobs        *prometheus.CounterVec // async jobs, by event (jobs.go)
	jobsRunning prometheus.Gauge

	answerStore *prometheus.CounterVec // answers for callers that do not reassemble chunks, by outcome (answerstore.go)

	streamStarts *prometheus.CounterVec // start signals to Aggs (core.StartStream), by outcome

	// stalls counts the times the loop's tick came back late by a quarter
	// period or more (shell.go stalled); any lateness is not counted as
	// silence.
	stalls prometheus.Counter
}

func newMetrics(reg *prometheus.Registry, rcs, inFlight func() int) (*metrics, error) {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sg_gw_requests_total",
			Help: "Requests answered by the GW, by API and return code (rc), counted when the answer ended: an answer passed on chunk by chunk (or frame by frame) once its last message went out, OK if it went out whole, else the code of its error end (ERR); ERR too for an answer that could not be published.",
		}, []string{"api", "code"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "sg_gw_request_duration_seconds",
			Help:    "Time from a request's arrival at the GW to its answer, by API.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 20), // 0.5 ms .. ~4.4 min
		}, []string{"api"}),
		inFlight: prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "sg_gw_requests_in_flight",
			Help: "Requests accepted (or adopted) by the GW and not answered yet.",
		}, func() float64 { return float64(inFlight()) }),
		dropped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sg_gw_answers_dropped_total",
			Help: "Answer messages the GW did not forward (duplicates, late answers after a GW timeout, chunks or frames out of place, an earlier drive's transfer that broke while a later drive may still answer), and requests or adoptions it let go (another GW took the request over, or its answer is being relayed here): core.Dropped, its reason in the debug log.",
		}),
		sendFailed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sg_gw_answer_send_failures_total",
			Help: "Answer messages (whole answers, chunks, frames) the GW could not publish to the caller; an answer passed on as it comes is then ended with its error end.",
		}),
		busy: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sg_gw_requests_refused_busy_total",
			Help: "Requests refused RATE_LIMITED because the GW had MaxInFlight requests in flight.",
		}),
	}
	m.byRC = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sg_gw_submissions_total",
		Help: "Requests (and drives of re-driven requests) submitted, by RC.",
	}, []string{"rc"})
	m.redrives = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sg_gw_redrives_total",
		Help: "Requests driven again: their RC restarted, drained or went silent (rc gone), an RC became available, or the request was adopted.",
	}, []string{"reason"})
	m.adopted = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "sg_gw_requests_adopted_total",
		Help: "Open requests taken over from the request log (a stopped, restarted or silent GW's).",
	})
	m.logErrors = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sg_gw_request_log_errors_total",
		Help: "Request log operations that failed, by operation (create, refuse, update, answered, adopt, read, purge, scan).",
	}, []string{"op"})
	m.limited = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sg_gw_requests_limited_total",
		Help: "Requests refused or answered RATE_LIMITED over a limit, by limit (gw_in_flight, gw_in_flight_per_caller, gw_running_jobs, gw_held_bytes).",
	}, []string{"limit"})
	m.jobs = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sg_gw_jobs_total",
		Help: "Async jobs by event: accepted, resubmitted (same idempotency key), resumed (after a restart), done, failed, refused (over a limit at submission).",
	}, []string{"event"})
	m.jobsRunning = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "sg_gw_jobs_running",
		Help: "Async jobs this GW runs now.",
	})
	m.answerStore = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sg_gw_answer_store_total",
		Help: "Answers above the max payload for callers that do not reassemble chunks, by outcome: stored (in the answer store, named in the error), busy (every write slot taken), failed (the write failed).",
	}, []string{"outcome"})
	m.streamStarts = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sg_gw_stream_starts_total",
		Help: "Start signals to Aggs for the rest of an answer stream (sent once its frame 0 went out to the caller), by outcome: sent, resent (again, each core.StartResend, until the frame the Agg sends once it has the signal comes: one may have been lost), failed (not published: sent again like a lost one).",
	}, []string{"outcome"})
	m.stalls = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "sg_gw_loop_stalls_total",
		Help: "Times the GW's loop came back later than its announcement period by a quarter period or more; its lateness (any, not only these) is not counted as silence of RCs and peer GWs.",
	})
	m.malformed = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sg_gw_malformed_messages_total",
		Help: "Messages on the GW's internal subjects skipped because they do not decode or are invalid, by kind (position_report; stream_frame: an answer stream's frame, whose answer then ends with an error).",
	}, []string{"kind"})
	m.heldFull = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "sg_gw_answers_held_full_total",
		Help: "Answers ended because what the GW holds of answers, all requests together, would pass SG_GW_MAX_HELD_BYTES (reassembled for callers that take no chunks, or waiting for the request log's answered write).",
	})
	m.refusedReply = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "sg_gw_requests_refused_reply_total",
		Help: "Requests dropped unanswered because their reply subject is not a client inbox (an sg or $ subject, or not under an allowed prefix).",
	})
	// The seed's (KX's) names beside ours.
	kxPending := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "kxi_sg_pending",
		Help: "Requests pending at the GW (seed: kxi_sg_pending; sg_gw_requests_in_flight).",
	}, func() float64 { return float64(inFlight()) })
	kxRCs := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "kxi_sg_connected_coordinators",
		Help: "RCs connected to the GW (seed: kxi_sg_connected_coordinators; sg_gw_rcs_connected).",
	}, func() float64 { return float64(rcs()) })
	rcGauge := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "sg_gw_rcs_connected",
		Help: "RCs the GW has heard from within three announcement periods.",
	}, func() float64 { return float64(rcs()) })
	for _, c := range []prometheus.Collector{m.requests, m.latency, m.inFlight, m.dropped, m.busy, m.sendFailed, rcGauge, m.byRC, m.redrives, m.adopted, m.logErrors,
		m.limited, m.heldFull, m.refusedReply, m.jobs, m.jobsRunning, m.answerStore, m.streamStarts, m.malformed, m.stalls, kxPending, kxRCs} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	// One counter for every service's poison records (services/poison),
	// shared with the services of the same process.
	var err error
	if m.poison, err = poison.NewCounter(reg); err != nil {
		return nil, err
	}
	return m, nil
}

// answered counts a request's answer once it ended, with the code of its
// outcome (sg_gw_requests_total) and its time from arrival
// (sg_gw_request_duration_seconds).
func (m *metrics) answered(api string, code messages.Code, elapsed time.Duration) {
	m.requests.WithLabelValues(api, code.String()).Inc()
	m.latency.WithLabelValues(api).Observe(elapsed.Seconds())
}

// PoisonMetric is the name every sg service counts skipped stream records
// under (label stream).
const PoisonMetric = poison.MetricName
