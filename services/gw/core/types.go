package core

import (
	"github.com/nats-io/nats.go"

	"github.com/sg-project/sg/messages"
)

// Texts of the GW's own answers that clients may match on.
const (
	// TextNoResources is the seed's text when no RC can take a request.
	TextNoResources = "No resources connected"
	// TextTimeout is the seed's text of a timeout issued by the GW.
	TextTimeout = "Request was timed out by the service gateway"
	// TextCancelled answers a request its caller cancelled.
	TextCancelled = "Request was cancelled by the caller"
	// TextShuttingDown refuses a request that arrives while the GW stops:
	// nothing was accepted.
	TextShuttingDown = "The service gateway is shutting down; retry on another"
	// TextShutDown answers a request left unanswered at shutdown by a GW
	// without a request log (with one, a peer adopts it instead).
	TextShutDown = "The service gateway shut down before the request was answered"
)

// Names of the limits a refusal names in messages.HdrLimit.
const (
	// LimitInFlight: Config.MaxInFlight, requests open at this GW.
	LimitInFlight = "gw_in_flight"
	// LimitInFlightPerCaller: Config.MaxInFlightPerCaller, requests open at
	// this GW for one caller.
	LimitInFlightPerCaller = "gw_in_flight_per_caller"
	// LimitHeldBytes: Config.MaxHeldBytes, answers' bytes this GW holds
	// for all requests together.
	LimitHeldBytes = "gw_held_bytes"
)

// Request is an accepted-to-be request as the shell decoded and checked it.
type Request struct {
	// ID is the GW's own unique id of the request (a nuid): the key of
	// everything about it here, in the log and downstream. ClientID is the
	// caller's Sg-Request-Id, a label only.
	ID       string
	ClientID string
	// Caller is what per-caller limits and cancels count by: the reply
	// subject without its last token (the client connection's inbox).
	Caller  string
	Reply   string
	API     string
	Content messages.Content
	LogCorr string
	// Chunks: the caller reassembles chunked answers (Sg-Accept-Chunks); a
	// caller that has not said so never gets a cut answer.
	Chunks bool
	// Sub is the submission for the RC, complete but for its RequestID
	// (the drive's id, set by the core) and with ReplyTo, Deadline and
	// ReceivedAt filled in by the shell.
	Sub      messages.RCSubmission
	Received int64 // unix ns
	Deadline int64 // unix ns
}

// Info is what the shell needs to shape and log an answer.
type Info struct {
	ID, ClientID, Caller, Reply, API string
	Content                          messages.Content
	LogCorr                          string
	Received                         int64
	RCID                             string // the RC of the current drive, "" if none
	Drive                            uint32
	Chunks                           bool
}

func (r *Request) info() Info {
	return Info{ID: r.ID, ClientID: r.ClientID, Caller: r.Caller, Reply: r.Reply, API: r.API, Content: r.Content,
		LogCorr: r.LogCorr, Received: r.Received, Chunks: r.Chunks}
}

// RCInfo is what the GW knows of one RC, from its announcements.
type RCInfo struct {
	ID          string
	Assembly    string // "" = global RC
	Addr        string
	Outstanding int
	Queued      int
	DAPs        int
	Draining    bool
	Warming     bool // its fleet view is not warm yet: it gets nothing until it is
	StartedAt   int64
	LastSeen    int64 // unix ns
	Period      int64 // announcement period, ns
}

// answer is an answer the core holds until it may send it: the RC's or
// Agg's bytes (fwd), or a status of the GW's own.
type answer struct {
	fwd    bool
	chunk  bool // data is chunk 0 of a chunked answer relayed as it comes
	header nats.Header
	data   []byte
	err    error // arrived but cannot be forwarded (too large, broken)
	status messages.Status
	limit  string // a status answer over this limit (Answer.Limit, with RetryAfter)
}
