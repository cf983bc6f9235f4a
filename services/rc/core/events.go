package core

import "github.com/sg-project/sg/messages"

// Event is an input to the core. Every event carries the time at which the
// caller observed it (Unix nanoseconds); the core has no clock of its own.
type Event interface {
	at() int64
}

// DAPInfo is what a DAP says about itself at registration and on status
// updates.
type DAPInfo struct {
	ID string
	// Addr is the DAP's host/port as shown in timeout messages; ID if empty.
	Addr string
	// RC is the id of the RC that owns the DAP; empty or Config.Self means
	// this core. Portions for a peer's DAP go through that peer (secondary).
	RC       string
	Assembly string
	Labels   Labels
	Tier     Tier
	// Purview is the temporal purview; MinTS/MaxTS at an unbounded end.
	Purview TimeRange
	// Tables maps each table the DAP serves to its routing kind.
	Tables         map[string]TableKind
	PurviewVersion uint64
	Vintage        uint64
	Available      bool
	// Concurrency is how many portions the DAP runs at once (default 1).
	Concurrency int
}

// DAPRegistered: a DAP connected (or re-announced itself).
type DAPRegistered struct {
	At  int64
	DAP DAPInfo
}

// DAPStatusChanged: availability, purview, purview version or concurrency
// changed (e.g. after end of interval, end of day or log replay). The whole
// info is sent; Vintage in it is ignored (vintage has its own event).
type DAPStatusChanged struct {
	At  int64
	DAP DAPInfo
}

// DAPVintageChanged: the DAP's reference vintage moved.
type DAPVintageChanged struct {
	At      int64
	DAP     string
	Vintage uint64
}

// DAPLost: the DAP is gone (disconnected, heartbeats stopped). What it was
// running is requeued.
type DAPLost struct {
	At  int64
	DAP string
}

// Request is a request as the RC receives it.
type Request struct {
	ID    string
	API   string
	Table string
	// Labels selects label sets; see Selector.
	Labels Selector
	// Range is the requested time range; ignored for tables that are not
	// time-partitioned.
	Range TimeRange
	// Deadline is absolute (Unix nanoseconds).
	Deadline int64
	// SQL marks requests with the SQL retry rules (date rollover, restarts).
	SQL bool
	// Agg is the aggregator that merges this request's partial results.
	Agg string
	// Assembly and Tier restrict the DAPs used (the request's scope).
	Assembly string
	Tier     Tier
	// Caller is who the request counts against for the per-caller limit
	// ("" is a caller too).
	Caller string
}

// RequestArrived: a request to coordinate as primary RC.
type RequestArrived struct {
	At      int64
	Request Request
}

// Outcome of a portion at a DAP: messages.Outcome, its one home (Class there
// turns a completion into one of these).
type Outcome = messages.Outcome

// The outcomes the core acts on.
const (
	OutcomeOK = messages.OutcomeOK
	// OutcomeError: the DAP failed the portion; it has told the Agg too.
	OutcomeError = messages.OutcomeError
	// OutcomeRetry: purview version or reference vintage mismatch at the DAP.
	OutcomeRetry = messages.OutcomeRetry
	// OutcomeTimeout: the DAP gave up on the request's deadline.
	OutcomeTimeout = messages.OutcomeTimeout
	// OutcomeRefused: the DAP refused the portion over its queue limit
	// (limits.DAPQueue); the request is answered RATE_LIMITED.
	OutcomeRefused = messages.OutcomeRefused
)

// PortionCompleted: a DAP finished a portion (directly, or forwarded by the
// secondary RC that owns the DAP).
type PortionCompleted struct {
	At      int64
	Request string
	Portion PortionID
	DAP     string
	Outcome Outcome
	// Code and Message carry the DAP's error for OutcomeError, the mismatch
	// for OutcomeRetry.
	Code    int
	Message string
}

// AggDone: the Agg has answered the caller (with the result or the DAP's
// error); the request is over.
type AggDone struct {
	At      int64
	Request string
}

// RequestCancelled: the caller or the GW gave up on the request.
type RequestCancelled struct {
	At      int64
	Request string
	Reason  string
}

// Tick: the periodic timer. It also drives the multi-RC timeout wait.
type Tick struct {
	At int64
}

// PeerDispatch: a primary RC asks this RC (its secondary) to run a portion
// on a DAP this RC owns.
type PeerDispatch struct {
	At       int64
	Primary  string
	Dispatch Dispatch
}

// PeerStatusQuery: the primary timed the request out and asks for this RC's
// status block.
type PeerStatusQuery struct {
	At      int64
	Primary string
	Request string
}

// PeerStatusReport: a secondary's status block for a request this RC is
// primary for.
type PeerStatusReport struct {
	At      int64
	RC      string
	Request string
	Block   string
}

func (e DAPRegistered) at() int64     { return e.At }
func (e DAPStatusChanged) at() int64  { return e.At }
func (e DAPVintageChanged) at() int64 { return e.At }
func (e DAPLost) at() int64           { return e.At }
func (e RequestArrived) at() int64    { return e.At }
func (e PortionCompleted) at() int64  { return e.At }
func (e AggDone) at() int64           { return e.At }
func (e RequestCancelled) at() int64  { return e.At }
func (e Tick) at() int64              { return e.At }
func (e PeerDispatch) at() int64      { return e.At }
func (e PeerStatusQuery) at() int64   { return e.At }
func (e PeerStatusReport) at() int64  { return e.At }

// DAPPaused: a downstream rate-limit signal; no portion is dispatched to the
// DAP before Until. NextDeadline includes Until so that dispatch resumes on
// time.
type DAPPaused struct {
	At    int64
	DAP   string
	Until int64
}

func (e DAPPaused) at() int64 { return e.At }

// AggUp: an Agg is alive (its heartbeat), so the core may give it requests.
type AggUp struct {
	At  int64
	Agg string
}

// AggLost: an Agg is gone (heartbeats stopped, it restarted or stopped). The
// requests it was merging are driven again on another Agg, or answered.
type AggLost struct {
	At  int64
	Agg string
}

func (e AggUp) at() int64   { return e.At }
func (e AggLost) at() int64 { return e.At }

// eventTime is ev.at() without the dynamic call: escape analysis cannot see
// through one and would move every event passed to Step to the heap (an
// allocation per completion); a type switch only reads it.
func eventTime(ev Event) int64 {
	switch e := ev.(type) {
	case DAPRegistered:
		return e.At
	case DAPStatusChanged:
		return e.At
	case DAPVintageChanged:
		return e.At
	case DAPLost:
		return e.At
	case RequestArrived:
		return e.At
	case PortionCompleted:
		return e.At
	case AggDone:
		return e.At
	case RequestCancelled:
		return e.At
	case Tick:
		return e.At
	case PeerDispatch:
		return e.At
	case PeerStatusQuery:
		return e.At
	case PeerStatusReport:
		return e.At
	case DAPPaused:
		return e.At
	case AggUp:
		return e.At
	case AggLost:
		return e.At
	case DAPThrottled:
		return e.At
	case AggTimedOut:
		return e.At
	case Refused:
		return e.At
	}
	panic("core: unknown event")
}
