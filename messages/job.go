package messages

import "math"

// Async jobs (issue 11; seed: dynamic-retry-after-design). A client asks for
// opts.async; the GW answers at once with ACCEPTED and a JobStatus, runs the
// request itself and keeps the state and the answer in JetStream; the client
// polls with the job id (subjects.GWJob over NATS, GET /v1/jobs/{id} over
// HTTP) and gets ACCEPTED + JobStatus while it runs, then the request's own
// answer, byte for byte as the sync path would have given it.

// JobVersion is the version of the job messages.
const JobVersion = 1

// Job states, as JobStatus.State names them: the stages of a request as an
// async caller sees them, which services/retryafter reckons Retry-After for.
// A job whose answer is gone is answered CodeExpired, not with a state.
const (
	JobQueued      = "queued"      // portions wait in an RC queue
	JobExecuting   = "executing"   // every portion is at a DAP
	JobAggregating = "aggregating" // the Agg merges
	JobWaiting     = "waiting"     // accepted; nothing to estimate from yet (B(E))
	JobDone        = "done"        // the answer is ready (OK or an error answer)
	JobFailed      = "failed"      // the answer is an error
)

// JobStatus is the payload of an ACCEPTED answer: where the job stands and
// when to come back. RetryAfter and ETA are whole seconds (RetryAfter is
// also in the response header, in ms, and Retry-After over HTTP).
type JobStatus struct {
	V     uint8  `msgpack:"v" json:"v"`
	JobID string `msgpack:"jobId" json:"jobId"`
	State string `msgpack:"state" json:"state"`
	// RetryAfter: when to poll again (seed's formula); 0 in terminal states.
	RetryAfter int `msgpack:"retryAfter" json:"retryAfter"`
	// ETA: the unpadded estimate of when the answer is ready; 0 unknown.
	ETA int `msgpack:"eta" json:"eta"`
	// Position: portions ahead of the job in its RC's queue (own included), when queued.
	Position int `msgpack:"position,omitempty" json:"position,omitempty"`
	// Elapsed: seconds since the job was accepted.
	Elapsed int `msgpack:"elapsed" json:"elapsed"`
}

// PositionQuery is GW -> RC (subjects.RCPosition): where does the request
// the GW's job runner sent with this Sg-Client-Request-Id and Sg-Caller
// stand? The RC that holds it reports on subjects.GWPosition(GWID); the others
// stay silent.
type PositionQuery struct {
	V               uint8  `msgpack:"v"`
	GWID            string `msgpack:"gw"` // the report goes to subjects.GWPosition(GWID)
	ClientRequestID string `msgpack:"client"`
	Caller          string `msgpack:"caller,omitempty"` // "": any caller (job ids are unique)
}

// Validate checks the query.
func (m *PositionQuery) Validate() error {
	const typ = "position query"
	if err := checkVersion(typ, m.V, JobVersion); err != nil {
		return err
	}
	if err := validateID(typ, "client request id", m.ClientRequestID); err != nil {
		return err
	}
	if err := validateID(typ, "GW id", m.GWID); err != nil {
		return err
	}
	if len(m.Caller) > maxReplyLen {
		return invalid(typ, "caller above %d bytes", maxReplyLen)
	}
	return nil
}

// PositionReport is the RC's answer to a PositionQuery: the core's Position.
type PositionReport struct {
	V    uint8  `msgpack:"v"`
	RCID string `msgpack:"rc"`
	// ClientRequestID: the query's, so the GW matches report and query.
	ClientRequestID string        `msgpack:"client"`
	Status          RequestStatus `msgpack:"status"` // the core's status: allocating, executing, aggregating, ...
	Ahead           int           `msgpack:"ahead"`  // queue items older than its oldest queued item
	Queued          int           `msgpack:"queued"`
	// DrainRate: items/s of the DAPs that can serve it, measured (0 unknown).
	DrainRate float64 `msgpack:"drain"`
	ExecMS    int64   `msgpack:"execMs"` // measured mean execution of a portion (0 unknown)
}

// Validate checks the report: counts and rates must be sane numbers.
func (m *PositionReport) Validate() error {
	const typ = "position report"
	if err := checkVersion(typ, m.V, JobVersion); err != nil {
		return err
	}
	if err := validateID(typ, "RC id", m.RCID); err != nil {
		return err
	}
	if err := validateID(typ, "client request id", m.ClientRequestID); err != nil {
		return err
	}
	if len(m.Status) > 64 || m.Ahead < 0 || m.Queued < 0 || m.ExecMS < 0 ||
		m.DrainRate < 0 || math.IsNaN(m.DrainRate) || math.IsInf(m.DrainRate, 0) {
		return invalid(typ, "status, counts or rates out of range")
	}
	return nil
}
