package messages

// The client-facing envelopes. A request and a response have one shape in
// both encodings, {"header": {...}, "payload": ...}:
//
//	{"header": {"v":1, "api":"getData",
//	            "opts":  {"timeout":5000, "logCorr":"abc", "async":false},
//	            "scope": {"assembly":"eu", "tier":"hdb"}},
//	 "payload": {"table":"trade", ...}}                      <- the API's arguments, raw
//
//	{"header": {"v":1, "requestId":"...", "api":"getData", "rc":0, "ac":0, "ai":""},
//	 "payload": ...}                                          <- the API's answer, raw
//
// The payload stays raw bytes in the encoding of the envelope (Content): the
// API's own decoder (e.g. DecodeGetDataArgsJSON) reads it, so sg never
// guesses types by converting JSON to msgpack generically.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/nats-io/nats.go"
	"github.com/sg-project/sg/subjects"
)

// Content is the encoding of a body.
type Content string

const (
	ContentMsgpack Content = "msgpack"
	ContentJSON    Content = "json"
)

// ParseContent accepts "msgpack" or "json" (and the MIME forms
// application/msgpack, application/json), case-insensitive.
func ParseContent(s string) (Content, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "msgpack", "application/msgpack", "application/x-msgpack", "application/vnd.msgpack":
		return ContentMsgpack, nil
	case "json", "application/json":
		return ContentJSON, nil
	}
	return "", fmt.Errorf("%w: content type %q: want \"msgpack\" or \"json\"", ErrInvalid, truncate(s, 64))
}

// DetectContent decides the encoding of a body: the HdrContentType header if
// present, else JSON when the first non-space byte is '{' or '[' (neither
// starts a msgpack map or array of a request: 0x7b and 0x5b are positive
// fixints), else msgpack.
func DetectContent(h nats.Header, data []byte) (Content, error) {
	if s := h.Get(HdrContentType); s != "" {
		c, err := ParseContent(s)
		if err != nil {
			return "", &HeaderError{Key: HdrContentType, Value: s, Err: ErrBadHeader, Detail: `want "msgpack" or "json"`}
		}
		return c, nil
	}
	trimmed := bytes.TrimLeft(data, " \t\r\n")
	if len(trimmed) == 0 {
		return "", fmt.Errorf("%w: empty body", ErrMalformed)
	}
	if trimmed[0] == '{' || trimmed[0] == '[' {
		return ContentJSON, nil
	}
	return ContentMsgpack, nil
}

// RequestVersion is the version of the request and response envelopes.
const RequestVersion = 1

// Opts are the per-request options of the seed's opts dictionary.
type Opts struct {
	TimeoutMS int64  `msgpack:"timeout,omitempty" json:"timeout,omitempty"` // 0 = the GW's default (KXI_SG_TIMEOUT)
	LogCorr   string `msgpack:"logCorr,omitempty" json:"logCorr,omitempty"` // echoed in logs and in HdrLogCorr
	Async     bool   `msgpack:"async,omitempty" json:"async,omitempty"`     // answer at once with ACCEPTED and a job id
	// IdempotencyKey: with Async, the same key from the same caller returns
	// the same job (HTTP: the Idempotency-Key header).
	IdempotencyKey string `msgpack:"idempotencyKey,omitempty" json:"idempotencyKey,omitempty"`
}

// Scope is the routing scope: which assembly's RC, which tier.
type Scope struct {
	Assembly string `msgpack:"assembly,omitempty" json:"assembly,omitempty"` // "" = global RCs
	Tier     Tier   `msgpack:"tier,omitempty" json:"tier,omitempty"`         // "" = every tier
}

// RequestHeader is the part of a client request that sg reads itself.
type RequestHeader struct {
	V     uint8  `msgpack:"v,omitempty" json:"v,omitempty"` // 0 is read as RequestVersion: clients may omit it
	API   string `msgpack:"api" json:"api"`
	Opts  Opts   `msgpack:"opts,omitempty" json:"opts,omitzero"`
	Scope Scope  `msgpack:"scope,omitempty" json:"scope,omitzero"`
}

// Request is a client request: the header, and the API's arguments as raw
// bytes in the encoding Content.
type Request struct {
	Header  RequestHeader
	Payload []byte
	Content Content
}

// MaxIdempotencyKeyLen bounds opts.idempotencyKey.
const MaxIdempotencyKeyLen = 256

// Limits on client input, so that a hostile request cannot make a log line
// or a header of unbounded size.
const (
	maxAPILen      = 64
	maxLogCorrLen  = 256
	maxAssemblyLen = subjects.MaxTokenLen
)

// Validate checks the header; an unknown API is reported by the GW, which
// knows its endpoints, with UNKNOWN_API.
func (h *RequestHeader) Validate() error {
	const typ = "request header"
	if h.V == 0 {
		h.V = RequestVersion
	}
	if h.V > RequestVersion {
		return fmt.Errorf("%w: %s v%d, this build knows up to v%d", ErrVersion, typ, h.V, RequestVersion)
	}
	if h.API == "" {
		return invalid(typ, "api is empty")
	}
	if len(h.API) > maxAPILen {
		return invalid(typ, "api is %d bytes, max %d", len(h.API), maxAPILen)
	}
	if err := subjects.Validate("api", h.API); err != nil {
		return fmt.Errorf("%w: %s: %v", ErrInvalid, typ, err)
	}
	if h.Opts.TimeoutMS < 0 {
		return invalid(typ, "opts.timeout %d ms is negative", h.Opts.TimeoutMS)
	}
	if len(h.Opts.LogCorr) > maxLogCorrLen || !utf8.ValidString(h.Opts.LogCorr) {
		return invalid(typ, "opts.logCorr must be valid UTF-8 of at most %d bytes", maxLogCorrLen)
	}
	if len(h.Opts.IdempotencyKey) > MaxIdempotencyKeyLen || !utf8.ValidString(h.Opts.IdempotencyKey) {
		return invalid(typ, "opts.idempotencyKey must be valid UTF-8 of at most %d bytes", MaxIdempotencyKeyLen)
	}
	if h.Scope.Assembly != "" {
		if err := subjects.Validate("scope.assembly", h.Scope.Assembly); err != nil {
			return fmt.Errorf("%w: %s: %v", ErrInvalid, typ, err)
		}
	}
	if h.Scope.Tier != "" && !h.Scope.Tier.Valid() {
		return invalid(typ, "scope.tier %q: want rdb, idb or hdb", truncate(string(h.Scope.Tier), 16))
	}
	return nil
}

// envelope is the wire form shared by both encodings; P is the raw type of
// the payload (msgpack.RawMessage or json.RawMessage).
type envelope[H any, P any] struct {
	Header  H `msgpack:"header" json:"header"`
	Payload P `msgpack:"payload,omitempty" json:"payload,omitempty"`
}

func encodeEnvelope[H envelopeHeader](c Content, h H, payload []byte) ([]byte, error) {
	b, err := encodeEnvelopeBody(c, h, payload, false)
	return b.Join(), err
}

// encodeEnvelopeBody encodes the envelope as the bytes before the payload,
// the payload as it is, and the bytes after it. own: the payload was
// written by sg's own encoders, valid and compact JSON by construction, so it
// is neither validated nor scanned again (that was most of the Agg's work
// wrapping a large JSON answer, issue 10); any other payload is checked.
func encodeEnvelopeBody[H envelopeHeader](c Content, h H, payload []byte, own bool) (Body, error) {
	switch c {
	case ContentMsgpack:
		if len(payload) == 0 {
			return Body{encodeWire(&wireEnvelope[H]{header: h}, 0)}, nil
		}
		return Body{encodeWire(wireEnvelopeHead[H]{header: h}, 0), payload}, nil
	case ContentJSON:
		if len(payload) > 0 && !own && !json.Valid(payload) {
			return nil, fmt.Errorf("%w: JSON envelope payload is not valid JSON", ErrInvalid)
		}
		if len(payload) > 0 && (own || !jsonNeedsCompact(payload)) {
			// What json.Marshal would write, byte for byte, without
			// compacting a payload that has nothing to compact or escape:
			// that pass was most of sending a large JSON answer (issue 10).
			hb, err := json.Marshal(h)
			if err != nil {
				return nil, fmt.Errorf("messages: encode JSON envelope header: %w", err)
			}
			head := make([]byte, 0, len(`{"header":,"payload":`)+len(hb))
			head = append(head, `{"header":`...)
			head = append(head, hb...)
			head = append(head, `,"payload":`...)
			return Body{head, payload, jsonEnvelopeTail}, nil
		}
		b, err := json.Marshal(envelope[H, json.RawMessage]{Header: h, Payload: payload})
		if err != nil {
			return nil, fmt.Errorf("messages: encode JSON envelope: %w", err)
		}
		return Body{b}, nil
	}
	return nil, fmt.Errorf("%w: content type %q", ErrInvalid, c)
}

var jsonEnvelopeTail = []byte("}")

// jsonNeedsCompact reports whether json.Marshal would change valid JSON b when
// it embeds it (json.RawMessage): whitespace to drop, or <, >, & and U+2028,
// U+2029 (whose UTF-8 starts with 0xE2) to escape. Conservative: a byte that
// might need it says yes.
func jsonNeedsCompact(b []byte) bool {
	return bytes.IndexAny(b, " \t\n\r<>&") >= 0 || bytes.IndexByte(b, 0xe2) >= 0
}

// decodeEnvelope decodes an envelope within lim: MessageLimits for requests,
// PayloadLimits for responses, whose payload may be a whole answer.
func decodeEnvelope[H envelopeHeader](c Content, data []byte, lim Limits) (h H, payload []byte, err error) {
	return decodeEnvelopeMode[H](c, data, lim, sliceReader{})
}

// decodeEnvelopeMode is decodeEnvelope; with mode.alias a msgpack payload
// shares data instead of copying it.
func decodeEnvelopeMode[H envelopeHeader](c Content, data []byte, lim Limits, mode sliceReader) (h H, payload []byte, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%w: envelope: decoder panic: %v", ErrMalformed, r)
		}
	}()
	switch c {
	case ContentMsgpack:
		var e wireEnvelope[H]
		if err := decodeLimited(data, &e, lim, mode); err != nil {
			return h, nil, err
		}
		return e.header, e.payload, nil
	case ContentJSON:
		return decodeJSONEnvelope[H](data, lim)
	}
	return h, nil, fmt.Errorf("%w: content type %q", ErrInvalid, c)
}

// decodeJSONEnvelope is decodeEnvelope's JSON case, for any header type H
// (JSONStreamWriter's keeps the header's bytes). The payload stays raw and
// is decoded later (by the API's decoder, or generically by the GW): checked
// here once for the whole body.
func decodeJSONEnvelope[H any](data []byte, lim Limits) (h H, payload []byte, err error) {
	if err := CheckJSON(data, lim); err != nil {
		return h, nil, fmt.Errorf("%w: JSON envelope: %w", ErrMalformed, err)
	}
	if h, payload, ok := decodeJSONEnvelopeFast[H](data); ok {
		return h, payload, nil
	}
	var e envelope[H, json.RawMessage]
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&e); err != nil {
		return h, nil, fmt.Errorf("%w: JSON envelope: %v", ErrMalformed, err)
	}
	if dec.More() {
		return h, nil, fmt.Errorf("%w: JSON envelope: data after the closing brace", ErrMalformed)
	}
	if bytes.Equal(bytes.TrimSpace(e.Payload), []byte("null")) {
		e.Payload = nil
	}
	return e.Header, e.Payload, nil
}

// Encode encodes the request in r.Content (msgpack when empty).
func (r Request) Encode() ([]byte, error) {
	c := r.Content
	if c == "" {
		c = ContentMsgpack
	}
	return encodeEnvelope(c, r.Header, r.Payload)
}

// DecodeRequest decodes and validates a client request. The encoding comes
// from h or is detected (DetectContent). It never panics.
func DecodeRequest(h nats.Header, data []byte) (Request, error) {
	c, err := DetectContent(h, data)
	if err != nil {
		return Request{}, err
	}
	hdr, payload, err := decodeEnvelope[RequestHeader](c, data, MessageLimits)
	if err != nil {
		return Request{}, err
	}
	if err := hdr.Validate(); err != nil {
		return Request{}, err
	}
	return Request{Header: hdr, Payload: payload, Content: c}, nil
}

// ResponseHeader is the header of a response envelope: the status and the
// echoed request fields (the same facts as the NATS response headers, for
// transports without headers, such as HTTP bodies and stored results).
type ResponseHeader struct {
	V            uint8  `msgpack:"v" json:"v"`
	RequestID    string `msgpack:"requestId,omitempty" json:"requestId,omitempty"`
	API          string `msgpack:"api,omitempty" json:"api,omitempty"`
	LogCorr      string `msgpack:"logCorr,omitempty" json:"logCorr,omitempty"`
	RetryAfterMS int64  `msgpack:"retryAfter,omitempty" json:"retryAfter,omitempty"` // with ACCEPTED or RATE_LIMITED
	Status       `msgpack:",inline"`
}

// Response is an answer: header, and the API's answer as raw bytes in the
// encoding Content (for an error, usually no payload).
type Response struct {
	Header  ResponseHeader
	Payload []byte
	Content Content
	// TraceID is the id sg knew the request by (the Sg-Trace-Id header, not
	// part of the envelope): the request_id of its log lines inside sg.
	TraceID string
}

// Validate checks the response header.
func (h *ResponseHeader) Validate() error {
	return checkVersion("response header", h.V, RequestVersion)
}

// Encode encodes the response in r.Content (msgpack when empty).
func (r Response) Encode() ([]byte, error) {
	c := r.Content
	if c == "" {
		c = ContentMsgpack
	}
	if r.Header.V == 0 {
		r.Header.V = RequestVersion
	}
	return encodeEnvelope(c, r.Header, r.Payload)
}

// EncodeOwn is Encode for a payload sg's own encoders wrote (EncodeTableJSON,
// Table.MarshalJSON, EncodeSized, json.Marshal): it is not validated again
// (valid and compact by construction) and not copied: the body is the
// envelope's bytes before the payload, the payload itself, and those after
// it, for SendChunkedBody or one Join. The bytes are Encode's. A payload
// from anywhere else (a DAP, a caller) goes through Encode.
func (r Response) EncodeOwn() (Body, error) {
	c := r.Content
	if c == "" {
		c = ContentMsgpack
	}
	if r.Header.V == 0 {
		r.Header.V = RequestVersion
	}
	return encodeEnvelopeBody(c, r.Header, r.Payload, true)
}

// DecodeResponse decodes and validates a response envelope (clients, tests).
func DecodeResponse(h nats.Header, data []byte) (Response, error) {
	return decodeResponse(h, data, sliceReader{})
}

// DecodeResponseAliasing is DecodeResponse for a receiver that owns data and
// never changes it (a reassembled answer): the payload shares data instead of
// copying it, a copy of a large answer less.
func DecodeResponseAliasing(h nats.Header, data []byte) (Response, error) {
	return decodeResponse(h, data, sliceReader{alias: true})
}

func decodeResponse(h nats.Header, data []byte, mode sliceReader) (Response, error) {
	c, err := DetectContent(h, data)
	if err != nil {
		return Response{}, err
	}
	hdr, payload, err := decodeEnvelopeMode[ResponseHeader](c, data, PayloadLimits, mode)
	if err != nil {
		return Response{}, err
	}
	if err := hdr.Validate(); err != nil {
		return Response{}, err
	}
	return Response{Header: hdr, Payload: payload, Content: c, TraceID: h.Get(HdrTraceID)}, nil
}

// RelabelResponse returns the response envelope data (in encoding c) with
// its header's request id set to id. The envelope sg services write is
// rewritten in its header only, the payload's bytes carried over as they are
// (ResponseWithRequestID); any other shape is decoded and encoded whole.
func RelabelResponse(c Content, data []byte, id string) ([]byte, error) {
	if out, ok := ResponseWithRequestID(c, data, id); ok {
		return out, nil
	}
	resp, err := DecodeResponse(nats.Header{HdrContentType: {string(c)}}, data)
	if err != nil {
		return nil, err
	}
	resp.Header.RequestID = id
	return resp.Encode()
}
