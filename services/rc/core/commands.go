package core

// Command is an output of the core, for the caller to carry out.
//
// The commands of every decision, *Dispatch and *AggTrack, are pointers into
// storage the core reuses: like the slice Step returns, they and the slices
// in them (and AggExpect's Portions) are valid until the next Step (copy what
// you keep). A decision then allocates nothing to say what it decided.
type Command interface {
	isCommand()
}

// arena hands out values of T that live until reset: one chunk reused from
// step to step, and a fresh one when a step needs more (pointers already
// given out stay valid until the next reset).
type arena[T any] struct {
	chunk []T
}

func (a *arena[T]) new() *T {
	if len(a.chunk) == cap(a.chunk) {
		a.chunk = make([]T, 0, max(16, 2*cap(a.chunk)))
	}
	a.chunk = a.chunk[:len(a.chunk)+1]
	return &a.chunk[len(a.chunk)-1]
}

// slab hands out values of T that live as long as anything points to them,
// allocated a chunk at a time.
type slab[T any] struct {
	chunk []T
}

func (s *slab[T]) new() *T {
	if len(s.chunk) == cap(s.chunk) {
		s.chunk = make([]T, 0, 256)
	}
	s.chunk = s.chunk[:len(s.chunk)+1]
	return &s.chunk[len(s.chunk)-1]
}

// reset makes the storage reusable; what it held is cleared so that it does
// not keep ended requests alive.
func (a *arena[T]) reset() {
	clear(a.chunk)
	a.chunk = a.chunk[:0]
}

// Portion is one label set and, for time-partitioned tables, one time range
// of a request, as dispatched to one DAP.
type Portion struct {
	ID      PortionID
	Request string
	Labels  Labels
	// Range is the portion's time range (unbounded for tables that are not
	// time-partitioned).
	Range TimeRange
	// Attempt counts the label set's retries: 0 first, then 1, 2, ...
	Attempt uint32
	// PurviewVersion and Vintage are the DAP's, as the RC knew them at
	// dispatch; the DAP answers RETRY if its own differ.
	PurviewVersion uint64
	Vintage        uint64
}

// Dispatch: send the portion to the DAP. If ViaRC is set the DAP belongs to
// that peer RC, which relays it (the peer becomes a secondary RC).
type Dispatch struct {
	Portion  Portion
	DAP      string
	ViaRC    string
	API      string
	Table    string
	Agg      string
	Deadline int64
	// Retries is the request's retry count so far (echoed in headers).
	Retries int
	// QueuedAt is the age of the queue item the portion came from (the
	// request's arrival for a first placement); it orders the queue.
	QueuedAt int64
}

// AggExpect: every label set of the request has completed; the Agg merges
// exactly these portions (anything else it holds for the request is from a
// superseded attempt or a lost DAP, and is discarded) and answers.
type AggExpect struct {
	Request  string
	Agg      string
	Portions []PortionRef
}

// AggFail: a DAP failed its portion; the Agg answers the caller with the
// DAP's code and message (the request is then "inactive" until AggDone).
type AggFail struct {
	Request string
	Agg     string
	// Portion is the failed portion: the Agg holds its error partial; DAP
	// is the DAP that failed it.
	Portion PortionRef
	DAP     string
	Code    int
	Message string
}

// ReplyKind classifies the answers the RC gives itself.
type ReplyKind int

const (
	// ReplyTimeout: rc TIMEOUT (45), ac ERR (10), the seed's status message.
	ReplyTimeout ReplyKind = iota
	// ReplyNoResources: no DAP has a selected label set, or none serves the table.
	ReplyNoResources
	// ReplyMaxRetries: more retries than Config.MaxRetry.
	ReplyMaxRetries
	// ReplyBadRequest: the request itself is invalid.
	ReplyBadRequest
	// ReplyCancelled: the caller cancelled.
	ReplyCancelled
	// ReplyRateLimited: over a limit (Reply.Limit); come back after
	// Reply.RetryAfter seconds.
	ReplyRateLimited
	// ReplyInternal: a service refused a message of the request that sg
	// should never have sent it (Refused.Internal): rc INTERNAL.
	ReplyInternal
)

func (k ReplyKind) String() string {
	switch k {
	case ReplyTimeout:
		return "timeout"
	case ReplyNoResources:
		return "no-resources"
	case ReplyMaxRetries:
		return "max-retries"
	case ReplyBadRequest:
		return "bad-request"
	case ReplyCancelled:
		return "cancelled"
	case ReplyRateLimited:
		return "rate-limited"
	case ReplyInternal:
		return "internal"
	}
	return "unknown"
}

// Reply: answer the caller directly with an error or a timeout. Text is the
// ai field of the response header.
type Reply struct {
	Request string
	Kind    ReplyKind
	Text    string
	Retries int
	// Limit names the limit a ReplyRateLimited is over (limits.RCQueued, ...);
	// RetryAfter is when to come back, in whole seconds.
	Limit      string
	RetryAfter int
}

// RetryNoted: a label set (or, for SQL, the whole request) is being retried.
type RetryNoted struct {
	Request string
	Labels  Labels
	// Whole is true when the whole request restarts (SQL rules).
	Whole   bool
	Attempt uint32
	Reason  string
}

// PeerStatusQuery: ask a secondary RC for its status block (timeout).
type QueryPeerStatus struct {
	RC      string
	Request string
}

// ReportPeerStatus: as a secondary, send the status block to the primary.
type ReportPeerStatus struct {
	RC      string
	Request string
	Block   string
}

// ForwardCompletion: as a secondary, pass a DAP's completion to the primary.
type ForwardCompletion struct {
	RC         string
	Completion PortionCompleted
}

// CancelDAP: the request has ended at this RC (answered, timed out,
// cancelled); tell the DAP to stop its portions of it, running or waiting
// (subjects.DAPCancel). The DAP answers each one it stops; its slot is freed
// here when that answer comes, as for any completion. With Portion set only
// that portion is stopped (a superseded one whose Agg was lost): the request
// goes on.
type CancelDAP struct {
	Request string
	DAP     string
	Portion PortionID
}

// CancelPeer: tell a secondary RC to stop the request's portions on its DAPs
// (subjects.RCCancel of the peer); it turns that into CancelDAP.
type CancelPeer struct {
	Request string
	RC      string
}

// CancelAgg: tell the Agg to drop the request's partials and state
// (subjects.AggCancel): the RC answered, so the Agg must not.
type CancelAgg struct {
	Request string
	Agg     string
}

// AggChanged: the request's Agg was lost and another merges it now; every
// label set was restarted (the new portions name To). Carry on with To:
// its expectation sequence starts again.
type AggChanged struct {
	Request  string
	From, To string
}

func (*Dispatch) isCommand()         {}
func (AggExpect) isCommand()         {}
func (AggFail) isCommand()           {}
func (Reply) isCommand()             {}
func (RetryNoted) isCommand()        {}
func (QueryPeerStatus) isCommand()   {}
func (ReportPeerStatus) isCommand()  {}
func (ForwardCompletion) isCommand() {}
func (CancelDAP) isCommand()         {}
func (CancelPeer) isCommand()        {}
func (CancelAgg) isCommand()         {}
func (AggChanged) isCommand()        {}
