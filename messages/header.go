package messages

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go"
)

// NATS header names. Routing metadata travels in headers so that a hop (RC,
// Agg, GW) can route, retry or drop a message without decoding its body.
const (
	HdrRequestID       = "Sg-Request-Id"        // request id, assigned by the GW; also the log key
	HdrAPI             = "Sg-Api"               // API name (getData, ping, getMeta, sql)
	HdrAggID           = "Sg-Agg-Id"            // Agg that merges the request's partial results
	HdrRCID            = "Sg-Rc-Id"             // RC that schedules the request: where a refusal of the message goes (subjects.RCRefused)
	HdrPortionID       = "Sg-Portion-Id"        // portion id within the request
	HdrAttempt         = "Sg-Attempt"           // attempt of the portion/label set: 0 first, +1 per retry
	HdrRC              = "Sg-Rc"                // return code (Code)
	HdrAC              = "Sg-Ac"                // application code (Code)
	HdrAI              = "Sg-Ai"                // application information: the error text
	HdrContentType     = "Sg-Content-Type"      // body encoding: "msgpack" or "json"
	HdrLogCorr         = "Sg-Log-Corr"          // client's log correlation id, echoed in every log line
	HdrRetryAfter      = "Sg-Retry-After"       // whole seconds to wait before polling or retrying (as HTTP's Retry-After)
	HdrClientRequestID = "Sg-Client-Request-Id" // the caller's own request id: a label in logs, never a key inside sg
	HdrTraceID         = "Sg-Trace-Id"          // GW -> client: the id sg knows the request by (request_id of every log line about it)
	HdrCaller          = "Sg-Caller"            // GW -> RC: the caller a request is counted against (per-caller limits)
	HdrLimit           = "Sg-Limit"             // on a refusal over a limit: the name of the limit that was hit
	HdrAcceptChunks    = "Sg-Accept-Chunks"     // caller -> GW: "1" if the caller reassembles an answer sent in chunks (see README)
	HdrJobID           = "Sg-Job-Id"            // an async job's id: on its ACCEPTED answers, and in a poll (subjects.GWJob)
	HdrAnswerBucket    = "Sg-Answer-Bucket"     // GW -> caller, on TOO_LARGE: the object store bucket the whole answer was written to
	HdrAnswerKey       = "Sg-Answer-Key"        // GW -> caller, on TOO_LARGE: the answer's object name in that bucket
	HdrAnswerExpires   = "Sg-Answer-Expires"    // GW -> caller, on TOO_LARGE: when the stored answer expires, unix nanoseconds
	HdrChunkIndex      = "Sg-Chunk-Index"       // 0-based index of this chunk
	HdrChunkCount      = "Sg-Chunk-Count"       // number of chunks of the payload
	HdrChunkTotal      = "Sg-Chunk-Total"       // size in bytes of the whole payload
	HdrChunkSum        = "Sg-Chunk-Sum"         // CRC-32C of the whole payload, hex
	HdrChunkStream     = "Sg-Chunk-Stream"      // id of one chunked transfer, so two transfers never mix
	HdrAcceptStream    = "Sg-Accept-Stream"     // caller -> GW: "1" if the caller reads an answer as a stream of frames (see stream.go)
	HdrStreamID        = "Sg-Stream-Id"         // id of one answer stream, so two drives' streams never mix
	HdrStreamSeq       = "Sg-Stream-Seq"        // 0-based index of this frame of an answer stream
	HdrStreamEnd       = "Sg-Stream-End"        // "1" on the last frame of an answer stream
)

// Header errors, wrapped in *HeaderError.
var (
	ErrMissingHeader = errors.New("missing header")
	ErrBadHeader     = errors.New("malformed header")
)

// HeaderError says which header was wrong and why.
type HeaderError struct {
	Key    string
	Value  string
	Err    error  // ErrMissingHeader or ErrBadHeader
	Detail string // e.g. "not an unsigned integer"
}

func (e *HeaderError) Error() string {
	if errors.Is(e.Err, ErrMissingHeader) {
		return fmt.Sprintf("header %s: %v", e.Key, e.Err)
	}
	return fmt.Sprintf("header %s=%q: %v: %s", e.Key, truncate(e.Value, 64), e.Err, e.Detail)
}

func (e *HeaderError) Unwrap() error { return e.Err }

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

// headerValue makes s safe as a header value: CR and LF would end the header
// line and corrupt the message, so they become spaces.
func headerValue(s string) string {
	if !strings.ContainsAny(s, "\r\n") {
		return s
	}
	return strings.Map(func(r rune) rune {
		if r == '\r' || r == '\n' {
			return ' '
		}
		return r
	}, s)
}

// SetString sets key to s (CR/LF replaced), or deletes key when s is "".
func SetString(h nats.Header, key, s string) {
	if s == "" {
		h.Del(key)
		return
	}
	h.Set(key, headerValue(s))
}

// GetString returns the value of key; ErrMissingHeader if absent or empty.
func GetString(h nats.Header, key string) (string, error) {
	v := h.Get(key)
	if v == "" {
		return "", &HeaderError{Key: key, Err: ErrMissingHeader}
	}
	return v, nil
}

// SetUint sets key to the decimal form of v.
func SetUint(h nats.Header, key string, v uint64) { h.Set(key, strconv.FormatUint(v, 10)) }

// LookupUint parses key as an unsigned decimal; ok is false when absent.
func LookupUint(h nats.Header, key string) (v uint64, ok bool, err error) {
	s := h.Get(key)
	if s == "" {
		return 0, false, nil
	}
	v, err = strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, false, &HeaderError{Key: key, Value: s, Err: ErrBadHeader, Detail: "not an unsigned decimal integer"}
	}
	return v, true, nil
}

// SetInt sets key to the decimal form of v.
func SetInt(h nats.Header, key string, v int64) { h.Set(key, strconv.FormatInt(v, 10)) }

// GetInt parses key as a signed decimal; ErrMissingHeader if absent.
func GetInt(h nats.Header, key string) (int64, error) {
	v, ok, err := LookupInt(h, key)
	if err == nil && !ok {
		err = &HeaderError{Key: key, Err: ErrMissingHeader}
	}
	return v, err
}

// LookupInt is GetInt for an optional header: ok is false when absent.
func LookupInt(h nats.Header, key string) (v int64, ok bool, err error) {
	s := h.Get(key)
	if s == "" {
		return 0, false, nil
	}
	v, err = strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, false, &HeaderError{Key: key, Value: s, Err: ErrBadHeader, Detail: "not a decimal integer"}
	}
	return v, true, nil
}

// GetCode parses key as a code: a number, or a name for hand-written messages.
func GetCode(h nats.Header, key string) (Code, error) {
	s := h.Get(key)
	if s == "" {
		return 0, &HeaderError{Key: key, Err: ErrMissingHeader}
	}
	c, err := ParseCode(s)
	if err != nil {
		return 0, &HeaderError{Key: key, Value: s, Err: ErrBadHeader, Detail: "not a code name or a number in 0..65535"}
	}
	return c, nil
}

// Routing is the routing metadata of a message, as carried in headers. Zero
// fields are not written, and absent headers read as zero.
type Routing struct {
	RequestID string
	API       string
	AggID     string
	RCID      string
	PortionID PortionID
	Attempt   uint32
	LogCorr   string
	Content   Content // "" = not stated (the receiver detects)
}

// Write sets r's routing headers in h: a string field that is empty is
// removed (the portion id's none is empty), a number that is zero is left as
// it is. The values written share two allocations, not one or two per field
// (the RC writes a dispatch's and an expectation's for every request, a DAP
// a partial's and a completion's for every portion): the numbers are
// formatted into one string; a caller that makes h with a constant size hint
// lets a header that does not outlive the publish stay on its stack.
//
// Kept out of line, as it was when it held write's body: inlined, it would
// push a small header builder (AggExpectation.Header) past the inlining
// budget, and that header's map off the RC's stack (TestRoutingHeadersAllocs).
//
//go:noinline
func (r Routing) Write(h nats.Header) { r.write(h, nil) }

// write is Write, and when st is not nil st.Write too, its values in the
// same allocation as r's (a DAP's every partial and completion carry both).
func (r Routing) write(h nats.Header, st *Status) {
	var kv [22]string // key, value pairs: one per field of r and of a Status
	n := 0
	str := func(k, v string) {
		if v == "" {
			h.Del(k)
			return
		}
		kv[n], kv[n+1] = k, headerValue(v)
		n += 2
	}
	str(HdrRequestID, r.RequestID)
	str(HdrAPI, r.API)
	str(HdrAggID, r.AggID)
	str(HdrRCID, r.RCID)
	// The portion id and the attempt, formatted into one string: one
	// allocation for both values.
	var buf [2 * 20]byte
	digits := r.PortionID.appendWire(buf[:0])
	idEnd := len(digits)
	if r.Attempt != 0 {
		digits = strconv.AppendUint(digits, uint64(r.Attempt), 10)
	}
	nums := string(digits)
	if r.PortionID == 0 {
		h.Del(HdrPortionID)
	} else {
		kv[n], kv[n+1] = HdrPortionID, nums[:idEnd]
		n += 2
	}
	if r.Attempt != 0 {
		kv[n], kv[n+1] = HdrAttempt, nums[idEnd:]
		n += 2
	}
	str(HdrLogCorr, r.LogCorr)
	str(HdrContentType, string(r.Content))
	if st != nil { // as Status.Write: rc and ac always, ai when not empty
		kv[n], kv[n+1] = HdrRC, strconv.FormatUint(uint64(st.RC), 10)
		kv[n+2], kv[n+3] = HdrAC, strconv.FormatUint(uint64(st.AC), 10)
		n += 4
		str(HdrAI, st.AI)
	}
	if n == 0 {
		return
	}
	vals := make([]string, n/2)
	for i := 0; i < n; i += 2 {
		j := i / 2
		vals[j] = kv[i+1]
		h[kv[i]] = vals[j : j+1 : j+1]
	}
}

// ReadPortionID reads the Sg-Portion-Id header: 0 when absent, an error
// naming it when it is not a portion id's wire form.
func ReadPortionID(h nats.Header) (PortionID, error) {
	s := h.Get(HdrPortionID)
	id, err := ParsePortionID(s)
	if err != nil {
		return 0, &HeaderError{Key: HdrPortionID, Value: CutText(s, 32), Err: ErrBadHeader, Detail: err.Error()}
	}
	return id, nil
}

// ReadRouting parses the routing headers of h. Absent headers give zero
// fields; a present but malformed one is an error naming it.
func ReadRouting(h nats.Header) (Routing, error) {
	r := Routing{
		RequestID: h.Get(HdrRequestID),
		API:       h.Get(HdrAPI),
		AggID:     h.Get(HdrAggID),
		RCID:      h.Get(HdrRCID),
		LogCorr:   h.Get(HdrLogCorr),
	}
	var errs []error
	// A text value with CR or LF is not one a header carries (Write would
	// change it): refused, not passed on.
	for _, k := range [...]string{HdrRequestID, HdrAPI, HdrAggID, HdrRCID, HdrLogCorr} {
		if v := h.Get(k); strings.ContainsAny(v, "\r\n") {
			errs = append(errs, &HeaderError{Key: k, Value: v, Err: ErrBadHeader, Detail: "CR or LF in a header value"})
		}
	}
	var err error
	if r.PortionID, err = ReadPortionID(h); err != nil {
		errs = append(errs, err)
	}
	if a, _, err := LookupUint(h, HdrAttempt); err != nil {
		errs = append(errs, err)
	} else if a > 1<<32-1 {
		errs = append(errs, &HeaderError{Key: HdrAttempt, Value: h.Get(HdrAttempt), Err: ErrBadHeader, Detail: "attempt above 2^32-1"})
	} else {
		r.Attempt = uint32(a)
	}
	if s := h.Get(HdrContentType); s != "" {
		c, err := ParseContent(s)
		if err != nil {
			errs = append(errs, &HeaderError{Key: HdrContentType, Value: s, Err: ErrBadHeader, Detail: `want "msgpack" or "json"`})
		}
		r.Content = c
	}
	if len(errs) > 0 {
		return r, errors.Join(errs...)
	}
	return r, nil
}

// Status is the outcome carried by every response: return code, application
// code and application information.
type Status struct {
	RC Code   `msgpack:"rc" json:"rc"`
	AC Code   `msgpack:"ac" json:"ac"`
	AI string `msgpack:"ai,omitempty" json:"ai,omitempty"`
}

// StatusOK is the status of a successful response.
var StatusOK = Status{RC: CodeOK, AC: CodeOK}

// Errorf builds an error status: rc and ac as given, ai formatted.
func Errorf(rc, ac Code, format string, args ...any) Status {
	return Status{RC: rc, AC: ac, AI: fmt.Sprintf(format, args...)}
}

// IsOK reports whether both codes are OK.
func (s Status) IsOK() bool { return s.RC == CodeOK && s.AC == CodeOK }

func (s Status) String() string {
	if s.AI == "" {
		return fmt.Sprintf("rc=%s ac=%s", s.RC, s.AC)
	}
	return fmt.Sprintf("rc=%s ac=%s ai=%q", s.RC, s.AC, s.AI)
}

// Write sets rc, ac and ai in h (ai deleted when empty).
func (s Status) Write(h nats.Header) {
	// rc, ac (and ai) in one backing array, as Routing.Write does: a
	// header value each was an allocation each on every answer and partial.
	n := 2
	if s.AI != "" {
		n = 3
	}
	vals := make([]string, n)
	vals[0], vals[1] = strconv.FormatUint(uint64(s.RC), 10), strconv.FormatUint(uint64(s.AC), 10)
	h[HdrRC], h[HdrAC] = vals[0:1:1], vals[1:2:2]
	if s.AI == "" {
		h.Del(HdrAI)
		return
	}
	vals[2] = headerValue(s.AI)
	h[HdrAI] = vals[2:3:3]
}

// ReadStatus parses rc, ac and ai. A response without rc is an error: a
// responder that forgot it must not pass as a success. A missing ac reads as
// OK when rc is OK and as ERR otherwise.
func ReadStatus(h nats.Header) (Status, error) {
	rc, err := GetCode(h, HdrRC)
	if err != nil {
		return Status{}, err
	}
	st := Status{RC: rc, AI: h.Get(HdrAI)}
	if h.Get(HdrAC) == "" {
		if rc != CodeOK {
			st.AC = CodeErr
		}
		return st, nil
	}
	if st.AC, err = GetCode(h, HdrAC); err != nil {
		return Status{}, err
	}
	return st, nil
}
