package messages

import (
	"unicode/utf8"

	"github.com/nats-io/nats.go"

	"github.com/sg-project/sg/subjects"
)

// Refusal: a service (DAP or Agg) could not decode or validate a message that
// belongs to a request, and tells the RC that schedules it (subjects.RCRefused,
// the RC named by the message's Sg-Rc-Id header), so that the request ends
// with a clear error at once instead of waiting for its deadline. It is
// fire-and-forget: nothing answers it, and an RC that does not know the
// subject drops it.
//
// The RC trusts none of it: it acts only if the request is live and the
// refusing service is the one it sent that message to (the request's Agg; the
// DAP it dispatched that portion to, at that attempt).
//
// A DAP refuses a dispatch to the RC that sent it: for a portion a secondary
// RC relays for a primary, the secondary. That one frees the DAP's slot and
// forwards the refusal to the primary's refusal subject, with Via naming
// itself, as it forwards completions; the primary acts on it only if it
// placed that portion through that secondary.
type Refusal struct {
	V         uint8  `msgpack:"v"`
	RequestID string `msgpack:"req"`
	// Service is the refusing service's kind (subjects.ServiceDAP or
	// subjects.ServiceAgg), ServiceID its process id.
	Service   string `msgpack:"svc"`
	ServiceID string `msgpack:"id"`
	// PortionID and Attempt name the refused dispatch (a DAP's refusal).
	PortionID PortionID `msgpack:"portion,omitempty"`
	Attempt   uint32    `msgpack:"attempt,omitempty"`
	// Code is the answer the refusing service asks for: BAD_REQUEST when the
	// request's own content is at fault, INTERNAL when a service sent what
	// sg never sends (see RefusalCodes).
	Code Code `msgpack:"code"`
	// Reason says what was refused and why, at most MaxRefusalReason bytes.
	Reason string `msgpack:"reason"`
	// Via is the secondary RC that forwards its DAP's refusal of a portion
	// it relays; empty when the refusing service sends it itself.
	Via string `msgpack:"via,omitempty"`
}

// RefusalVersion is Refusal's version.
const RefusalVersion = 1

// MaxRefusalReason bounds a refusal's reason, which the RC copies into the
// caller's answer: a decoder's error can quote the bytes it choked on.
const MaxRefusalReason = 512

// RefusalCodes are the codes a refusal may ask for.
var RefusalCodes = []Code{CodeBadRequest, CodeInternal}

// NewRefusal builds a refusal, its reason cut to MaxRefusalReason bytes (on a
// UTF-8 boundary, invalid bytes replaced) so that it validates.
func NewRefusal(requestID, service, serviceID string, code Code, reason string) Refusal {
	return Refusal{V: RefusalVersion, RequestID: requestID, Service: service, ServiceID: serviceID,
		Code: code, Reason: CutText(reason, MaxRefusalReason)}
}

// CutText is s as valid UTF-8 of at most limit bytes ("..." ending a cut one).
func CutText(s string, limit int) string {
	if !utf8.ValidString(s) {
		s = string([]rune(s)) // invalid bytes become U+FFFD
	}
	if len(s) <= limit {
		return s
	}
	const ellipsis = "..."
	n := limit - len(ellipsis)
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:max(n, 0)] + ellipsis
}

// Validate checks the refusal.
func (m *Refusal) Validate() error {
	const typ = "refusal"
	if err := checkVersion(typ, m.V, RefusalVersion); err != nil {
		return err
	}
	if err := validateID(typ, "request id", m.RequestID); err != nil {
		return err
	}
	if m.Service != subjects.ServiceDAP && m.Service != subjects.ServiceAgg {
		return invalid(typ, "service %.16q: want dap or agg", m.Service)
	}
	if err := validateID(typ, "service id", m.ServiceID); err != nil {
		return err
	}
	if m.Service == subjects.ServiceDAP {
		if err := validatePortionID(typ, m.PortionID); err != nil {
			return err
		}
	} else if m.PortionID != 0 || m.Attempt != 0 {
		return invalid(typ, "an Agg's refusal names no portion")
	}
	if m.Via != "" {
		if m.Service != subjects.ServiceDAP {
			return invalid(typ, "an Agg's refusal is not forwarded")
		}
		if err := validateID(typ, "via RC id", m.Via); err != nil {
			return err
		}
	}
	if m.Code != CodeBadRequest && m.Code != CodeInternal {
		return invalid(typ, "code %s: want BAD_REQUEST or INTERNAL", m.Code)
	}
	if m.Reason == "" {
		return invalid(typ, "no reason")
	}
	return validateText(typ, "reason", m.Reason, MaxRefusalReason)
}

// The code a refusal asks for, by what was refused. A dispatch or an
// expectation is the caller's request as sg passes it on: when a DAP or an
// Agg cannot decode or validate one, the request's own content is what it
// could not take (a filter nested deeper than its decoder allows was the real
// case), and the caller is the one who can change it. A partial result or an
// answer frame is a service's own output: garbage there is sg's fault.
const (
	RefusalCodeRequest = CodeBadRequest // a dispatch (RC -> DAP) or an expectation (RC -> Agg)
	RefusalCodeOutput  = CodeInternal   // a partial result (DAP -> Agg) or an answer frame (Agg -> GW)
)

// RefusalRoute reads, from the headers of a message whose body did not
// decode, where to refuse it: its request (Sg-Request-Id) and the RC that
// schedules it (Sg-Rc-Id), each a valid subject token, and the portion and
// attempt it names, if any (Sg-Portion-Id, Sg-Attempt). An error means the
// message cannot be attributed (an older RC names no Sg-Rc-Id; garbage).
func RefusalRoute(h nats.Header) (Routing, error) {
	var r Routing
	var err error
	if r.RequestID, err = GetString(h, HdrRequestID); err != nil {
		return r, err
	}
	if r.RCID, err = GetString(h, HdrRCID); err != nil {
		return r, err
	}
	for _, id := range []struct{ what, v string }{{"request id", r.RequestID}, {"RC id", r.RCID}} {
		if err := subjects.Validate(id.what, id.v); err != nil {
			return r, err
		}
	}
	if r.PortionID, err = ReadPortionID(h); err != nil {
		return r, err
	}
	a, _, err := LookupUint(h, HdrAttempt)
	if err != nil || a > 1<<32-1 {
		return r, &HeaderError{Key: HdrAttempt, Value: h.Get(HdrAttempt), Err: ErrBadHeader, Detail: "not an attempt"}
	}
	r.Attempt = uint32(a)
	return r, nil
}
