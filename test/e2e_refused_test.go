package test

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nuid"

	"github.com/sg-project/sg/messages"
	"github.com/sg-project/sg/services/dap"
	"github.com/sg-project/sg/subjects"
	"github.com/sg-project/sg/test/natstest"
	"github.com/sg-project/sg/test/promtest"
)

// refusedTimeout is the caller's timeout in the refusal tests: the refusal
// must end the request long before it.
const refusedTimeout = 60 * time.Second

// refusedWithin bounds how long a refused request may take to be answered.
const refusedWithin = 10 * time.Second

// refusedSystem is a system with one DAP (d1) that holds every portion until
// the test opens its gate, and a watch on the messages the RC sends the Agg
// and the DAP, whose headers a test copies onto a body that does not decode.
func refusedSystem(t *testing.T) (*system, *dap.DAP, *gatedSource, chan *nats.Msg, chan *nats.Msg) {
	t.Helper()
	sys := startSystem(t, systemOptions{})
	src, _ := engineSource(t, sys)
	gated := newGatedSource(src)
	t.Cleanup(gated.open)
	d := sys.startDAP(oneDAP(gated, 1))
	sys.waitDAPs(1)
	expects, dispatches := make(chan *nats.Msg, 64), make(chan *nats.Msg, 64)
	for subj, ch := range map[string]chan *nats.Msg{sys.s.AggExpect("agg-1"): expects, sys.s.DAPPortion("d1"): dispatches} {
		sub, err := sys.nc.ChanSubscribe(subj, ch)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = sub.Unsubscribe() })
	}
	if err := sys.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return sys, d, gated, expects, dispatches
}

var refusedArgs = messages.GetDataArgs{Table: "trade", GroupBy: []string{"sym"}, Agg: []messages.AggSpec{{Name: "n", Func: messages.AggCount}}}

// garble publishes a body that does not decode with the headers of m, as if
// m had been corrupted on its way.
func garble(t *testing.T, nc *nats.Conn, m *nats.Msg) {
	t.Helper()
	if err := nc.PublishMsg(&nats.Msg{Subject: m.Subject, Header: m.Header, Data: []byte{0xc1, 0x00}}); err != nil {
		t.Fatal(err)
	}
}

// refusedAnswer waits for the request's answer, which must be an error
// within refusedWithin, and returns its status.
func refusedAnswer(t *testing.T, ch <-chan answer, start time.Time) messages.Status {
	t.Helper()
	a := receiveAnswer(t, ch, refusedWithin)
	if a.err != nil {
		t.Fatalf("answer: %v", a.err)
	}
	if took := time.Since(start); took > refusedWithin {
		t.Fatalf("answered after %s", took)
	}
	return a.resp.Header.Status
}

func receiveAnswer(t *testing.T, ch <-chan answer, within time.Duration) answer {
	t.Helper()
	select {
	case a := <-ch:
		return a
	case <-time.After(within):
		t.Fatalf("no answer within %s (the caller's timeout is %s)", within, refusedTimeout)
		return answer{}
	}
}

func receiveMsg(t *testing.T, ch <-chan *nats.Msg, what string) *nats.Msg {
	t.Helper()
	select {
	case m := <-ch:
		return m
	case <-time.After(refusedWithin):
		t.Fatalf("no %s within %s", what, refusedWithin)
		return nil
	}
}

// An expectation the Agg cannot decode, for a live request: the Agg refuses
// it to the RC its headers name, and the caller gets BAD_REQUEST naming the
// Agg at once, not TIMEOUT a minute later.
func TestMalformedExpectationEndsTheRequest(t *testing.T) {
	sys, _, gated, expects, _ := refusedSystem(t)
	start := time.Now()
	ch := sys.getDataAsync(refusedArgs, messages.Opts{TimeoutMS: refusedTimeout.Milliseconds()})
	natstest.Receive(t, gated.started, "the portion to start", refusedWithin)
	garble(t, sys.nc, receiveMsg(t, expects, "expectation"))
	st := refusedAnswer(t, ch, start)
	if st.RC != messages.CodeBadRequest || !strings.Contains(st.AI, "refused by Agg agg-1") || !strings.Contains(st.AI, "expectation") {
		t.Fatalf("status %+v, want BAD_REQUEST naming Agg agg-1 and the expectation", st)
	}
	if n := promtest.Sum(t, sys.reg, "sg_rc_refusals_received_total", map[string]string{"outcome": "accepted"}); n != 1 {
		t.Fatalf("RC counted %v refusals accepted, want 1", n)
	}
}

// A dispatch whose body does not decode but whose headers are intact: the
// DAP refuses it to the RC, and the caller gets BAD_REQUEST naming the DAP
// at once.
func TestMalformedDispatchEndsTheRequest(t *testing.T) {
	sys, d, gated, _, dispatches := refusedSystem(t)
	start := time.Now()
	ch := sys.getDataAsync(refusedArgs, messages.Opts{TimeoutMS: refusedTimeout.Milliseconds()})
	natstest.Receive(t, gated.started, "the portion to start", refusedWithin)
	garble(t, sys.nc, receiveMsg(t, dispatches, "dispatch"))
	st := refusedAnswer(t, ch, start)
	if st.RC != messages.CodeBadRequest || !strings.Contains(st.AI, "refused by DAP d1") || !strings.Contains(st.AI, "portion dispatch") {
		t.Fatalf("status %+v, want BAD_REQUEST naming DAP d1 and the dispatch", st)
	}
	if n := d.Stats().RefusalsSent; n != 1 {
		t.Fatalf("DAP counted %v refusals sent, want 1", n)
	}
}

// Refusals that name what the RC did not send (another Agg, another DAP, an
// attempt never dispatched, an unknown request) change nothing but a
// counter: the request goes on and is answered OK.
func TestForgedRefusalsAreDropped(t *testing.T) {
	sys, _, gated, _, dispatches := refusedSystem(t)
	ch := sys.getDataAsync(refusedArgs, messages.Opts{TimeoutMS: refusedTimeout.Milliseconds()})
	natstest.Receive(t, gated.started, "the portion to start", refusedWithin)
	m := receiveMsg(t, dispatches, "dispatch")
	req := m.Header.Get(messages.HdrRequestID)
	portion, err := messages.ReadPortionID(m.Header)
	if err != nil {
		t.Fatal(err)
	}
	attempt, _ := strconv.Atoi(m.Header.Get(messages.HdrAttempt))
	refusal := func(by, id string, portion messages.PortionID, attempt int) messages.Refusal {
		f := messages.NewRefusal(req, by, id, messages.CodeBadRequest, "forged")
		f.PortionID, f.Attempt = portion, uint32(attempt)
		return f
	}
	unknown := refusal("agg", "agg-1", 0, 0)
	unknown.RequestID = "no-such-request"
	forged := []messages.Refusal{
		refusal("agg", "agg-2", 0, 0),             // not the request's Agg
		refusal("dap", "d2", portion, attempt),    // not the DAP it was sent to
		refusal("dap", "d1", portion, attempt+1),  // an attempt never dispatched
		refusal("dap", "d1", portion*10, attempt), // a portion never dispatched
		unknown, // no such request
	}
	for _, f := range forged {
		b, err := messages.Encode(&f)
		if err != nil {
			t.Fatal(err)
		}
		if err := sys.nc.Publish(sys.s.RCRefused("rc-1"), b); err != nil {
			t.Fatal(err)
		}
	}
	// The caller's answer is no sign that the RC has judged them: it comes
	// from the Agg, which the RC's verdicts do not hold up.
	rcHandledEarlier(t, sys.nc, sys.s, "rc-1")
	if n := promtest.Sum(t, sys.reg, "sg_rc_refusals_received_total", map[string]string{"outcome": "dropped"}); n != float64(len(forged)) {
		t.Fatalf("RC counted %v refusals dropped, want %d", n, len(forged))
	}
	gated.open()
	a := receiveAnswer(t, ch, refusedWithin)
	if a.err != nil || !a.resp.Header.Status.IsOK() {
		t.Fatalf("answer %v %+v, want OK", a.err, a.resp.Header.Status)
	}
	if n := promtest.Sum(t, sys.reg, "sg_rc_refusals_received_total", map[string]string{"outcome": "accepted"}); n != 0 {
		t.Fatalf("RC accepted %v forged refusals", n)
	}
}

// rcHandledEarlier returns once RC rcID's loop has handled every message nc
// published to it before: a secondary status query for no request, sent
// now, comes to the RC's one inbox subscription after them, and the RC
// answers it from its loop (an "unknown" block, to the primary the query
// names: a probe here).
func rcHandledEarlier(t *testing.T, nc *nats.Conn, s subjects.Subjects, rcID string) {
	t.Helper()
	probe := "probe-" + nuid.Next()
	sub, err := nc.SubscribeSync(s.RCSecondaryStatus(probe))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	b, err := messages.Encode(&messages.SecondaryQuery{V: messages.PortionVersion, RequestID: "probe", PrimaryRCID: probe})
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Publish(s.RCSecondaryQuery(rcID), b); err != nil {
		t.Fatal(err)
	}
	if _, err := sub.NextMsg(refusedWithin); err != nil {
		t.Fatalf("%s's answer to a status query, sent after the messages it must have handled: %v", rcID, err)
	}
}
