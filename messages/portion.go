package messages

// Portions: RC -> DAP dispatch, DAP -> RC completion, DAP -> Agg partial
// result, RC -> Agg expectation, and RC <-> RC secondary messages. Seed: "The
// RC breaks up requests into portions based on label sets and/or time".

import (
	"fmt"
	"strconv"

	"github.com/vmihailenco/msgpack/v5"
)

// PortionVersion is the version of every portion message.
const PortionVersion = 1

const (
	maxPortionsPerMsg = 1 << 16
	maxMessageLen     = 64 << 10 // ai and status texts: long timeout messages fit
	maxReplyLen       = 1024
)

// PortionID names a portion within its request: the RC numbers them, 1, 2,
// ... (0 is none). Its one home: the RC core numbers portions with it, and
// every message and header carries it in its wire form, the number in
// decimal (a msgpack string, the Sg-Portion-Id header), as the RC always
// sent it; none is the empty string. Anything else read from the wire (a
// sign, a leading zero, "0", a number past 64 bits, not a number) is refused
// as it is read (ParsePortionID).
type PortionID uint64

// String is the wire form: the decimal number, "" for none.
func (id PortionID) String() string {
	if id == 0 {
		return ""
	}
	return strconv.FormatUint(uint64(id), 10)
}

// appendWire appends the wire form to b.
func (id PortionID) appendWire(b []byte) []byte {
	if id == 0 {
		return b
	}
	return strconv.AppendUint(b, uint64(id), 10)
}

// ParsePortionID reads a portion id's wire form; "" is none (0).
func ParsePortionID(s string) (PortionID, error) { return parsePortionID(s) }

// parsePortionID is ParsePortionID for a string or bytes (a decoder's,
// not copied).
func parsePortionID[S string | []byte](s S) (PortionID, error) {
	if len(s) == 0 {
		return 0, nil
	}
	// At most 20 digits (2^64-1), no leading zero: one id, one spelling.
	if len(s) > 20 || s[0] == '0' {
		return 0, fmt.Errorf("portion id %.24q: want a number 1..2^64-1 in decimal", string(s))
	}
	var n uint64
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, fmt.Errorf("portion id %.24q: want a number 1..2^64-1 in decimal", string(s))
		}
		d := uint64(c - '0')
		if n > (1<<64-1-d)/10 {
			return 0, fmt.Errorf("portion id %.24q: above 2^64-1", string(s))
		}
		n = n*10 + d
	}
	return PortionID(n), nil
}

// EncodeMsgpack implements msgpack.CustomEncoder: the wire form, in the
// messages that the reflection codec writes (PartialCredit, Refusal).
func (id PortionID) EncodeMsgpack(enc *msgpack.Encoder) error {
	var buf [20]byte
	return enc.EncodeString(string(id.appendWire(buf[:0])))
}

// DecodeMsgpack implements msgpack.CustomDecoder.
func (id *PortionID) DecodeMsgpack(dec *msgpack.Decoder) error {
	s, err := dec.DecodeString()
	if err != nil {
		return err
	}
	*id, err = parsePortionID(s)
	return err
}

// MarshalText implements encoding.TextMarshaler: the wire form (JSON, logs).
func (id PortionID) MarshalText() ([]byte, error) { return id.appendWire(nil), nil }

// UnmarshalText implements encoding.TextUnmarshaler.
func (id *PortionID) UnmarshalText(b []byte) (err error) {
	*id, err = parsePortionID(b)
	return err
}

// PortionRef names one attempt of one portion. A retry of a label set gives
// its portions new attempts, so a late partial of attempt n never counts
// for attempt n+1. The RC core makes them as it dispatches: the refs it
// tells the Agg are these.
type PortionRef struct {
	PortionID PortionID `msgpack:"id"`
	Attempt   uint32    `msgpack:"att"`
}

func (p PortionRef) String() string { return fmt.Sprintf("%d#%d", p.PortionID, p.Attempt) }

func validateRefs(typ, what string, refs []PortionRef) error {
	if len(refs) > maxPortionsPerMsg {
		return invalid(typ, "%d %s, max %d", len(refs), what, maxPortionsPerMsg)
	}
	for _, r := range refs {
		if err := validatePortionID(typ, r.PortionID); err != nil {
			return err
		}
	}
	return nil
}

// validatePortionID: a message that names a portion names one (not 0).
func validatePortionID(typ string, id PortionID) error {
	if id == 0 {
		return invalid(typ, "no portion id")
	}
	return nil
}

// PortionDispatch sends one portion to a DAP. The routing fields are also in
// headers (Routing); the DAP checks PurviewVersion and ReferenceVintage
// against its own and answers RETRY on a mismatch (seed: Retries).
type PortionDispatch struct {
	V                uint8              `msgpack:"v"`
	RequestID        string             `msgpack:"req"`
	PortionID        PortionID          `msgpack:"id"`
	Attempt          uint32             `msgpack:"att"`
	RCID             string             `msgpack:"rc"` // where the completion goes (subjects.RCCompletion)
	API              string             `msgpack:"api"`
	Args             msgpack.RawMessage `msgpack:"args,omitempty"`  // the API's arguments, msgpack
	ArgsJSON         []byte             `msgpack:"argsj,omitempty"` // or in JSON, as the caller sent them (args.go)
	Labels           LabelSet           `msgpack:"labels"`
	Range            TimeRange          `msgpack:"range"` // Unbounded when the request has no time component
	PurviewVersion   uint64             `msgpack:"pv"`
	ReferenceVintage uint64             `msgpack:"rv"`
	AggID            string             `msgpack:"agg"`      // where the partial result goes (subjects.AggPartial)
	Deadline         int64              `msgpack:"deadline"` // unix nanoseconds; the DAP stops work past it
	LogCorr          string             `msgpack:"corr,omitempty"`
}

// Ref returns the portion's reference.
func (m *PortionDispatch) Ref() PortionRef {
	return PortionRef{PortionID: m.PortionID, Attempt: m.Attempt}
}

// Validate checks the dispatch.
func (m *PortionDispatch) Validate() error {
	const typ = "portion dispatch"
	if err := checkArgs(typ, m.V, m.Arguments()); err != nil {
		return err
	}
	for _, id := range []struct{ what, v string }{{"request id", m.RequestID},
		{"RC id", m.RCID}, {"api", m.API}, {"Agg id", m.AggID}} {
		if err := validateID(typ, id.what, id.v); err != nil {
			return err
		}
	}
	if err := validatePortionID(typ, m.PortionID); err != nil {
		return err
	}
	if err := validateLabels(typ, m.Labels); err != nil {
		return err
	}
	if !m.Range.Valid() {
		return invalid(typ, "range %s is empty", m.Range)
	}
	if m.Deadline <= 0 {
		return invalid(typ, "deadline %d: want positive unix nanoseconds", m.Deadline)
	}
	return validateText(typ, "logCorr", m.LogCorr, maxLogCorrLen)
}

// Outcome is how a portion ended on its DAP.
type Outcome uint8

const (
	OutcomeOK    Outcome = 1 // executed; the partial result went to the Agg
	OutcomeError Outcome = 2 // failed; Code and Message say why; the request fails
	OutcomeRetry Outcome = 3 // purview version or reference vintage mismatch: retry the label set

	// The RC's names for two kinds of OutcomeError (Class), never on the
	// wire (Validate refuses them; OnWire gives the wire form):
	OutcomeTimeout Outcome = 4 // the DAP gave up on the deadline (CodeTimeout)
	OutcomeRefused Outcome = 5 // over the DAP's queue limit (CodeRateLimited): come back later
)

func (o Outcome) String() string {
	switch o {
	case OutcomeOK:
		return "ok"
	case OutcomeError:
		return "error"
	case OutcomeRetry:
		return "retry"
	case OutcomeTimeout:
		return "timeout"
	case OutcomeRefused:
		return "refused"
	}
	return fmt.Sprintf("outcome(%d)", uint8(o))
}

// PortionCompletion tells the RC that a portion ended. It is what frees the
// DAP's slot, so it is sent for every dispatch, including rejected ones.
type PortionCompletion struct {
	V                uint8     `msgpack:"v"`
	RequestID        string    `msgpack:"req"`
	PortionID        PortionID `msgpack:"id"`
	Attempt          uint32    `msgpack:"att"`
	DAPID            string    `msgpack:"dap"`
	Outcome          Outcome   `msgpack:"out"`
	Code             Code      `msgpack:"code"`              // rc: OK, RETRY, TIMEOUT, ERR, ...
	Message          string    `msgpack:"msg,omitempty"`     // why, for ai and logs
	PartialSent      bool      `msgpack:"sent,omitempty"`    // the partial result reached the Agg (timeout message: agg=)
	PurviewVersion   uint64    `msgpack:"pv"`                // the DAP's current values: on RETRY the RC
	ReferenceVintage uint64    `msgpack:"rv"`                // learns them without waiting for the event
	Rows             int64     `msgpack:"rows,omitempty"`    // rows in the partial result, for metrics
	Bytes            int64     `msgpack:"bytes,omitempty"`   // bytes of the partial result, for metrics
	ElapsedNS        int64     `msgpack:"elapsed,omitempty"` // execution time on the DAP
	// Purview is the DAP's current purview, which goes with PurviewVersion: an RC that
	// learns the version from a RETRY must learn the purview with it, or it would place
	// a range the DAP no longer holds at a version that matches.
	Purview *TimeRange `msgpack:"pw,omitempty"`
}

// Ref returns the portion's reference.
func (m *PortionCompletion) Ref() PortionRef {
	return PortionRef{PortionID: m.PortionID, Attempt: m.Attempt}
}

// Validate checks the completion.
func (m *PortionCompletion) Validate() error {
	const typ = "portion completion"
	if err := checkVersion(typ, m.V, PortionVersion); err != nil {
		return err
	}
	for _, id := range []struct{ what, v string }{{"request id", m.RequestID}, {"DAP id", m.DAPID}} {
		if err := validateID(typ, id.what, id.v); err != nil {
			return err
		}
	}
	if err := validatePortionID(typ, m.PortionID); err != nil {
		return err
	}
	switch m.Outcome {
	case OutcomeOK:
		if m.Code != CodeOK {
			return invalid(typ, "outcome ok with code %s", m.Code)
		}
	case OutcomeRetry:
		if m.Code != CodeRetry {
			return invalid(typ, "outcome retry with code %s, want RETRY", m.Code)
		}
	case OutcomeError:
		if m.Code == CodeOK {
			return invalid(typ, "outcome error with code OK")
		}
	default:
		return invalid(typ, "unknown outcome %d", uint8(m.Outcome))
	}
	return validateText(typ, "message", m.Message, maxMessageLen)
}

// Class is the completion's outcome as the RC acts on it: an error with code
// TIMEOUT is OutcomeTimeout, one with RATE_LIMITED OutcomeRefused.
func (m *PortionCompletion) Class() Outcome {
	if m.Outcome == OutcomeError {
		switch m.Code {
		case CodeTimeout:
			return OutcomeTimeout
		case CodeRateLimited:
			return OutcomeRefused
		}
	}
	return m.Outcome
}

// OnWire is the outcome and code a completion carries for outcome o (Class
// undone); code is the DAP's code, used for errors.
func (o Outcome) OnWire(code Code) (Outcome, Code) {
	switch o {
	case OutcomeOK:
		return OutcomeOK, CodeOK
	case OutcomeRetry:
		return OutcomeRetry, CodeRetry
	case OutcomeTimeout:
		return OutcomeError, CodeTimeout
	case OutcomeRefused:
		return OutcomeError, CodeRateLimited
	}
	return OutcomeError, code
}

// PartialResult carries the result of one portion from the DAP to the Agg.
// Payload is the API's partial answer (for getData an encoded Table); it may
// be larger than NATS's max payload, in which case the encoded PartialResult
// travels in chunks (SendChunked).
type PartialResult struct {
	V         uint8      `msgpack:"v"`
	RequestID string     `msgpack:"req"`
	PortionID PortionID  `msgpack:"id"`
	Attempt   uint32     `msgpack:"att"`
	DAPID     string     `msgpack:"dap"`
	Status    Status     `msgpack:"status"` // not OK: the DAP failed and tells the Agg, which answers the error
	Payload   RawMsgpack `msgpack:"payload,omitempty"`
	// Window and More: a large partial travels as a sequence of windows
	// (Window 0, 1, ...), each a complete partial of its own in the portion's
	// order, sent under the Agg's credit (PartialCredit); More is set on every
	// window but the last. A partial in one piece is window 0 without More,
	// the same bytes as before windows existed. An error (Status not OK) ends
	// the portion whatever its Window.
	Window uint32 `msgpack:"win,omitempty"`
	More   bool   `msgpack:"more,omitempty"`
}

// Windowed reports whether m is one window of a partial sent in several.
func (m *PartialResult) Windowed() bool { return m.More || m.Window > 0 }

// InitialPartialCredit is how many windows of a portion a DAP may send before
// the Agg grants more (PartialCredit): a protocol constant, so that both sides
// agree without a message. A partial in one window never waits.
const InitialPartialCredit = 2

// MaxPartialWindows bounds the windows of one portion (and a credit's count).
const MaxPartialWindows = 1 << 24

// PartialCredit is the Agg's flow control of a portion's windows
// (subjects.DAPCredit(DAPID)): the DAP may send the windows below Windows
// (it starts with InitialPartialCredit). Stop: the Agg needs no more windows
// of the portion (a limit reached, the answer ended or failed): the DAP stops
// sending and completes the portion.
type PartialCredit struct {
	V         uint8     `msgpack:"v"`
	RequestID string    `msgpack:"req"`
	PortionID PortionID `msgpack:"id"`
	Attempt   uint32    `msgpack:"att"`
	AggID     string    `msgpack:"agg"`
	Windows   uint32    `msgpack:"win"`
	Stop      bool      `msgpack:"stop,omitempty"`
}

// Ref returns the portion's reference.
func (m *PartialCredit) Ref() PortionRef {
	return PortionRef{PortionID: m.PortionID, Attempt: m.Attempt}
}

// Validate checks the credit.
func (m *PartialCredit) Validate() error {
	const typ = "partial credit"
	if err := checkVersion(typ, m.V, PortionVersion); err != nil {
		return err
	}
	for _, id := range []struct{ what, v string }{{"request id", m.RequestID}, {"Agg id", m.AggID}} {
		if err := validateID(typ, id.what, id.v); err != nil {
			return err
		}
	}
	if err := validatePortionID(typ, m.PortionID); err != nil {
		return err
	}
	if m.Windows > MaxPartialWindows {
		return invalid(typ, "%d windows, above %d", m.Windows, MaxPartialWindows)
	}
	return nil
}

// Ref returns the portion's reference.
func (m *PartialResult) Ref() PortionRef {
	return PortionRef{PortionID: m.PortionID, Attempt: m.Attempt}
}

// Validate checks the partial result.
func (m *PartialResult) Validate() error {
	const typ = "partial result"
	if err := checkVersion(typ, m.V, PortionVersion); err != nil {
		return err
	}
	for _, id := range []struct{ what, v string }{{"request id", m.RequestID}, {"DAP id", m.DAPID}} {
		if err := validateID(typ, id.what, id.v); err != nil {
			return err
		}
	}
	if err := validatePortionID(typ, m.PortionID); err != nil {
		return err
	}
	if m.Window >= MaxPartialWindows {
		return invalid(typ, "window %d, above %d", m.Window, MaxPartialWindows)
	}
	if m.More && !m.Status.IsOK() {
		return invalid(typ, "an error (%s) with more windows to come", m.Status.RC)
	}
	return validateText(typ, "ai", m.Status.AI, maxMessageLen)
}

// AggExpectation tells an Agg which partial results make up a request's
// answer. An RC sends several per request, in Seq order: it dispatches
// portions over time (queueing), so the set grows, and it tells each portion
// as it dispatches it (before the DAP can answer), so the Agg answers on the
// last partial rather than after the RC has seen every completion. Sealed is
// the set's state as of this Seq: true when nothing is left to allocate, after
// which the Agg answers once every expected partial has arrived; a later Seq
// (a retry, a requeue) may unseal it.
//
// Retry of a label set: the RC sends Supersede with the earlier attempt's
// portions of that label set and Expect with the new attempt's. The Agg drops
// what it holds for superseded refs and ignores them if they arrive later.
type AggExpectation struct {
	V         uint8              `msgpack:"v"`
	RequestID string             `msgpack:"req"`
	Seq       uint32             `msgpack:"seq"` // 1, 2, ...: the Agg applies them in order, ignores duplicates
	API       string             `msgpack:"api"`
	Args      msgpack.RawMessage `msgpack:"args,omitempty"`  // the API's arguments (aggregation spec); in Seq 1
	ArgsJSON  []byte             `msgpack:"argsj,omitempty"` // or in JSON, as the caller sent them (args.go)
	Expect    []PortionRef       `msgpack:"expect,omitempty"`
	Supersede []PortionRef       `msgpack:"supersede,omitempty"`
	Sealed    bool               `msgpack:"sealed,omitempty"` // the set is whole: answer once every expected partial is here (a later Seq may unseal it)
	Cancel    bool               `msgpack:"cancel,omitempty"` // the RC answers (error, timeout): drop everything, answer nothing
	ReplyTo   string             `msgpack:"reply"`            // where the answer goes (subjects.GWAnswer or an inbox)
	RCID      string             `msgpack:"rc,omitempty"`     // where the Agg reports AggDone (subjects.RCAggDone)
	Content   Content            `msgpack:"content,omitempty"`
	Deadline  int64              `msgpack:"deadline"` // unix nanoseconds
	LogCorr   string             `msgpack:"corr,omitempty"`
	// Stream: the caller reads the answer as a stream of frames (Sg-Accept-Stream):
	// the Agg sends it window by window as it merges (stream.go), not whole.
	Stream bool `msgpack:"stream,omitempty"`
	// AnswerID is the request id the answer's envelope names: the caller's
	// own (the GW's client id), so that the GW passes a chunked answer on
	// chunk by chunk as it comes, with nothing in it to rewrite. Empty:
	// RequestID.
	AnswerID string `msgpack:"aid,omitempty"`
	// StreamStart: the GW paces the answer's stream (stream.go,
	// StreamStartFrames): the Agg sends its first StreamStartFrames frames,
	// then waits for the GW's start signal (subjects.AggStart). The GW sets
	// it on its submission and the RC passes it on; from an older GW or RC
	// it is absent, and the Agg sends every frame without waiting, as before.
	StreamStart bool `msgpack:"sstart,omitempty"`
}

// Validate checks the expectation.
func (m *AggExpectation) Validate() error {
	const typ = "Agg expectation"
	if err := checkArgs(typ, m.V, m.Arguments()); err != nil {
		return err
	}
	if err := validateID(typ, "request id", m.RequestID); err != nil {
		return err
	}
	if m.Seq == 0 {
		return invalid(typ, "seq is 0, want 1, 2, ...")
	}
	if err := validateID(typ, "api", m.API); err != nil {
		return err
	}
	if err := validateRefs(typ, "expected portions", m.Expect); err != nil {
		return err
	}
	if err := validateRefs(typ, "superseded portions", m.Supersede); err != nil {
		return err
	}
	if m.ReplyTo == "" || len(m.ReplyTo) > maxReplyLen {
		return invalid(typ, "reply subject must be 1..%d bytes", maxReplyLen)
	}
	if m.Content != "" && m.Content != ContentMsgpack && m.Content != ContentJSON {
		return invalid(typ, "content %q", truncate(string(m.Content), 16))
	}
	if m.Deadline <= 0 {
		return invalid(typ, "deadline %d: want positive unix nanoseconds", m.Deadline)
	}
	if err := validateOptionalID(typ, "answer id", m.AnswerID); err != nil {
		return err
	}
	return validateText(typ, "logCorr", m.LogCorr, maxLogCorrLen)
}

// AggDone tells an RC that the Agg has answered callers (with the merged
// result or a DAP's error), so those requests are over at the RC. One notice
// carries every request of that RC the Agg answered within
// defaults.AggDoneDelay of the first (at most MaxAggDoneBatch): under load one
// message says it for many, and none is on a request's critical path (the
// answer went out before it).
type AggDone struct {
	V     uint8          `msgpack:"v"`
	AggID string         `msgpack:"agg"`
	Done  []AggDoneEntry `msgpack:"done"`
}

// AggDoneEntry is one request of an AggDone.
type AggDoneEntry struct {
	RequestID string `msgpack:"req"`
	Status    Status `msgpack:"status"` // the answer's rc/ac/ai, for logs and metrics
	// TimedOut: the Agg did NOT answer, its own execution of the request
	// timed out (seed: the Agg notifies the RC of the timeout at once, and
	// such a notice goes without waiting); the RC answers the caller with its
	// timeout message.
	TimedOut bool `msgpack:"timedOut,omitempty"`
	// Held is how long the notice waited at the Agg for others (nanoseconds,
	// the Agg's clock): the RC takes it off the request's latency.
	Held int64 `msgpack:"held,omitempty"`
}

// MaxAggDoneBatch bounds the entries of one AggDone.
const MaxAggDoneBatch = 256

// AggDoneVersion is AggDone's version: 2 carries a list of requests (Done);
// v1, an older Agg's, named one request and is refused by name, as an older
// RC refuses v2 (ErrVersion): an RC and its Aggs are upgraded together.
const AggDoneVersion = 2

// Validate checks the notice.
func (m *AggDone) Validate() error {
	const typ = "Agg done"
	if err := checkVersion(typ, m.V, AggDoneVersion); err != nil {
		return err
	}
	if m.V < AggDoneVersion {
		return fmt.Errorf("%w: %s v%d (an older Agg's, one request a notice): this build reads v%d", ErrVersion, typ, m.V, AggDoneVersion)
	}
	if err := validateID(typ, "Agg id", m.AggID); err != nil {
		return err
	}
	if len(m.Done) == 0 || len(m.Done) > MaxAggDoneBatch {
		return invalid(typ, "%d requests, want 1..%d", len(m.Done), MaxAggDoneBatch)
	}
	for i := range m.Done {
		if err := validateID(typ, "request id", m.Done[i].RequestID); err != nil {
			return err
		}
		if m.Done[i].Held < 0 {
			return invalid(typ, "held %d: want 0 or more nanoseconds", m.Done[i].Held)
		}
	}
	return nil
}

// SecondaryQuery asks a secondary RC to report its status of a request: the
// primary sends it when it detects the timeout, then waits at most
// KXI_SG_MULTI_RC_TO_MAX_WAIT timer iterations for the PeerStatusBlock.
type SecondaryQuery struct {
	V           uint8  `msgpack:"v"`
	RequestID   string `msgpack:"req"`
	PrimaryRCID string `msgpack:"primary"`
}

// Validate checks the query.
func (m *SecondaryQuery) Validate() error {
	const typ = "secondary query"
	if err := checkVersion(typ, m.V, PortionVersion); err != nil {
		return err
	}
	if err := validateID(typ, "request id", m.RequestID); err != nil {
		return err
	}
	return validateID(typ, "primary RC id", m.PrimaryRCID)
}

// RequestStatus is an RC's status of a request, in the seed's words; it
// opens each [rc=...;status="..."] block of the timeout message.
type RequestStatus string

const (
	StatusAllocating         RequestStatus = "allocating"
	StatusExecuting          RequestStatus = "executing"
	StatusCompleted          RequestStatus = "completed" // secondary only
	StatusAggregating        RequestStatus = "aggregating"
	StatusPendingAggregation RequestStatus = "pending aggregation" // the seed's example prints "pending aggregating"; its heading says "pending aggregation"
	StatusInactive           RequestStatus = "inactive"
	StatusReceivedTooLate    RequestStatus = "received too late" // secondary only
	StatusUnknown            RequestStatus = "unknown"
	// StatusTimingOut is the primary RC's own, never in a block: the deadline
	// passed and it waits for its secondaries' blocks.
	StatusTimingOut RequestStatus = "timing out"
)

func (s RequestStatus) String() string { return string(s) }

// A partial result carries a payload that may be as large as an answer.
func (*PartialResult) decodeLimits() Limits { return PayloadLimits }

// encodedSizeHint: the payload and room for the other fields.
func (m *PartialResult) encodedSizeHint() int { return len(m.Payload) + envelopeSlack }
