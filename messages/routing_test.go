package messages

import (
	"reflect"
	"testing"

	"github.com/nats-io/nats.go"
)

// routingDispatch is a dispatch with every routing field set, the fields the
// headers leave out too.
func routingDispatch() PortionDispatch {
	return PortionDispatch{V: PortionVersion, RequestID: "req-1", PortionID: 1732460000000000001, Attempt: 2, RCID: "rc-1",
		API: "getData", AggID: "agg-1", Range: Unbounded, LogCorr: "corr-1"}
}

// The headers each message kind travels with, on the wire: these names and
// values and no others (the RC's dispatchHeader and expectHeader and the
// DAP's routingHeaders wrote exactly these before they moved here).
func TestRoutingHeadersOnTheWire(t *testing.T) {
	d := routingDispatch()
	e := AggExpectation{V: PortionVersion, RequestID: "req-1", Seq: 1, API: "getData", RCID: "rc-1", ReplyTo: "r",
		Content: ContentMsgpack, LogCorr: "corr-1"}
	st := Status{RC: CodeTimeout, AC: CodeErr, AI: "late"}
	for _, c := range []struct {
		what string
		got  nats.Header
		want nats.Header
	}{
		{"dispatch", d.Header(), nats.Header{HdrRequestID: {"req-1"}, HdrRCID: {"rc-1"}, HdrPortionID: {"1732460000000000001"},
			HdrAttempt: {"2"}, HdrLogCorr: {"corr-1"}}},
		{"expectation", e.Header(), nats.Header{HdrRequestID: {"req-1"}, HdrRCID: {"rc-1"}, HdrLogCorr: {"corr-1"}}},
		{"DAP's reply", d.ReplyHeader(st), nats.Header{HdrRequestID: {"req-1"}, HdrPortionID: {"1732460000000000001"},
			HdrAttempt: {"2"}, HdrLogCorr: {"corr-1"}, HdrRC: {"45"}, HdrAC: {"10"}, HdrAI: {"late"}}},
		{"first attempt, no correlation", (&PortionDispatch{RequestID: "q", PortionID: 1, RCID: "rc"}).Header(),
			nats.Header{HdrRequestID: {"q"}, HdrRCID: {"rc"}, HdrPortionID: {"1"}}},
		{"DAP's OK reply", (&PortionDispatch{RequestID: "q", PortionID: 1, RCID: "rc"}).ReplyHeader(StatusOK),
			nats.Header{HdrRequestID: {"q"}, HdrPortionID: {"1"}, HdrRC: {"0"}, HdrAC: {"0"}}},
	} {
		if !reflect.DeepEqual(c.got, c.want) {
			t.Errorf("%s: headers\n got %v\nwant %v", c.what, c.got, c.want)
		}
	}
	// A DAP's reply writes its status as Status.Write does, into the same
	// values as its routing: the same headers as the two written in turn.
	for _, st := range []Status{StatusOK, {RC: CodeTimeout, AC: CodeErr, AI: "a\r\nb"}, {RC: 65535, AC: 100, AI: "x"}, {}} {
		want := nats.Header{}
		d.ReplyRouting().Write(want)
		st.Write(want)
		if got := d.ReplyHeader(st); !reflect.DeepEqual(got, want) {
			t.Errorf("reply with status %+v:\n got %v\nwant %v", st, got, want)
		}
	}
}

// What the RC writes on a dispatch, a DAP reads back: the routing, and the
// refusal route it uses when the body does not decode (the RC to refuse it
// to, the portion and its attempt). The same for an expectation, which an
// Agg refuses to the RC it names, and for what a DAP sends about a dispatch,
// which names no RC: an Agg refuses a partial to the RC of its expectation.
func TestRoutingHeadersRoundTrip(t *testing.T) {
	d := routingDispatch()
	h := d.Header()
	if r, err := ReadRouting(h); err != nil || r != d.Routing() {
		t.Fatalf("dispatch: read %+v %v, wrote %+v", r, err, d.Routing())
	}
	want := Routing{RequestID: d.RequestID, RCID: d.RCID, PortionID: d.PortionID, Attempt: d.Attempt}
	if r, err := RefusalRoute(h); err != nil || r != want {
		t.Fatalf("dispatch's refusal route %+v %v, want %+v", r, err, want)
	}

	e := AggExpectation{RequestID: "req-1", RCID: "rc-1", LogCorr: "corr-1"}
	if r, err := ReadRouting(e.Header()); err != nil || r != e.Routing() {
		t.Fatalf("expectation: read %+v %v, wrote %+v", r, err, e.Routing())
	}
	if r, err := RefusalRoute(e.Header()); err != nil || r != (Routing{RequestID: "req-1", RCID: "rc-1"}) {
		t.Fatalf("expectation's refusal route %+v %v", r, err)
	}

	st := Status{RC: CodeBadRequest, AC: CodeErr, AI: "no"}
	rh := d.ReplyHeader(st)
	if r, err := ReadRouting(rh); err != nil || r != d.ReplyRouting() || r.RCID != "" {
		t.Fatalf("DAP's reply: read %+v %v, wrote %+v", r, err, d.ReplyRouting())
	}
	if got, err := ReadStatus(rh); err != nil || got != st {
		t.Fatalf("DAP's reply status %+v %v", got, err)
	}
	if _, err := RefusalRoute(rh); err == nil {
		t.Fatal("a DAP's reply chose an RC to refuse it to")
	}
}

// The headers cost the map (two allocations) and their values in two
// (Routing.Write), a DAP's reply its status too (one per status header
// before it shared the routing's); an expectation's, no numbers, one.
func TestRoutingHeadersAllocs(t *testing.T) {
	d := routingDispatch()
	st := Status{RC: CodeOK, AC: CodeOK}
	e := AggExpectation{RequestID: "req-1", RCID: "rc-1", LogCorr: "corr-1"}
	var sink nats.Header
	var n int
	for _, c := range []struct {
		what string
		max  float64
		f    func()
	}{
		{"dispatch", 4, func() { sink = d.Header() }},
		{"DAP's reply", 4, func() { sink = d.ReplyHeader(st) }},
		// Inlined, its map stays on the caller's stack when the header does
		// not outlive the publish (the RC's): only its values allocate.
		{"expectation", 1, func() { n = len(e.Header()) }},
	} {
		if n := testing.AllocsPerRun(100, c.f); n > c.max {
			t.Errorf("%s header: %.0f allocations, want at most %.0f", c.what, n, c.max)
		}
	}
	_, _ = sink, n
}
