package messages

import "github.com/nats-io/nats.go"

// The routing headers of each internal message kind, in one place: the
// sender writes them from here and a receiver's test reads back what the
// sender really writes. Each names the message (request, portion, attempt)
// so that a receiver that cannot decode the body can still refuse it
// (RefusalRoute), and carries the caller's log correlation. The other
// routing headers (api, Agg, content type) are left out: the receivers read
// them from the body, which they decode anyway, and each would cost
// allocations to write and to parse on every message.

// Routing is the header form of the dispatch as the RC sends it: request,
// portion, attempt, the RC to refuse it to (Sg-Rc-Id) and the log
// correlation.
func (m *PortionDispatch) Routing() Routing {
	return Routing{RequestID: m.RequestID, RCID: m.RCID, PortionID: m.PortionID, Attempt: m.Attempt, LogCorr: m.LogCorr}
}

// Header is the headers the RC sends the dispatch with (Routing).
func (m *PortionDispatch) Header() nats.Header {
	h := make(nats.Header, 5)
	m.Routing().Write(h)
	return h
}

// ReplyRouting is the header form of everything a DAP sends about the
// dispatch: request, portion, attempt (written only past the first, it lets
// an Agg that cannot decode a partial tell whether its request counted on
// it: agg/refuse.go) and the log correlation (the RC logs with it). No RC:
// an Agg refuses a partial to the RC its expectation names, never to one a
// partial's headers choose.
func (m *PortionDispatch) ReplyRouting() Routing {
	return Routing{RequestID: m.RequestID, PortionID: m.PortionID, Attempt: m.Attempt, LogCorr: m.LogCorr}
}

// ReplyHeader is the headers a DAP sends its partial results (each chunk
// of one too) and completions about the dispatch with: ReplyRouting and st,
// their values in one allocation.
func (m *PortionDispatch) ReplyHeader(st Status) nats.Header {
	h := make(nats.Header, 7)
	m.ReplyRouting().write(h, &st)
	return h
}

// Routing is the header form of the expectation as the RC sends it: the
// request, the RC to refuse it to (Sg-Rc-Id) and the log correlation.
func (m *AggExpectation) Routing() Routing {
	return Routing{RequestID: m.RequestID, RCID: m.RCID, LogCorr: m.LogCorr}
}

// Header is the headers the RC sends the expectation with (Routing).
func (m *AggExpectation) Header() nats.Header {
	h := make(nats.Header, 3)
	m.Routing().Write(h)
	return h
}
