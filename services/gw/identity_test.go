package gw_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/sg-project/sg/messages"
	"github.com/sg-project/sg/services/gw"
	"github.com/sg-project/sg/subjects"
	"github.com/sg-project/sg/test/natstest"
	"github.com/sg-project/sg/test/promtest"
)

// getDataWithID sends a getData for table with the client's request id id
// on nc and returns the answer message.
func getDataWithID(t *testing.T, nc *nats.Conn, s subjects.Subjects, id, table string) *nats.Msg {
	t.Helper()
	body := fmt.Sprintf(`{"header":{"api":"getData"},"payload":{"table":%q}}`, table)
	m, err := nc.RequestMsg(&nats.Msg{Subject: s.GWAPI(subjects.APIGetData), Data: []byte(body),
		Header: nats.Header{messages.HdrRequestID: {id}}}, wait)
	if err != nil {
		t.Errorf("request %s for %s: %v", id, table, err)
		return nil
	}
	return m
}

// Two clients using the same request id at the same time each get their own,
// right answer: inside sg the GW's own ids key the requests; the client's id
// is a label, echoed on the answer and sent to the RC in
// Sg-Client-Request-Id. A retry with the same id after an answer is a new
// request with a fresh answer (the GW keeps no answers to dedupe with).
func TestSameClientRequestIDIsOnlyALabel(t *testing.T) {
	e := startGW(t, nil)
	type held struct {
		sub      messages.RCSubmission
		clientID string
		caller   string
	}
	subs := make(chan held, 4)
	sub, err := e.nc.Subscribe(e.s.RCSubmit("rc1"), func(m *nats.Msg) {
		s, err := messages.DecodeValid[messages.RCSubmission](m.Data)
		if err != nil {
			t.Errorf("bad submission: %v", err)
			return
		}
		if m.Header.Get(messages.HdrRequestID) != s.RequestID {
			t.Errorf("submission header id %q, body %q", m.Header.Get(messages.HdrRequestID), s.RequestID)
		}
		subs <- held{s, m.Header.Get(messages.HdrClientRequestID), m.Header.Get(messages.HdrCaller)}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	e.fakeRC("rc1", "", func(messages.RCSubmission) {})

	other := startNATSConnTo(t, e)
	answers := make(chan *nats.Msg, 2)
	var wg sync.WaitGroup
	for i, nc := range []*nats.Conn{e.nc, other} {
		wg.Go(func() { answers <- getDataWithID(t, nc, e.s, "same", fmt.Sprintf("table%d", i)) })
	}
	// Both are at the RC at once, under different ids.
	var got []held
	for range 2 {
		select {
		case h := <-subs:
			got = append(got, h)
		case <-time.After(wait):
			t.Fatal("the RC did not get both submissions")
		}
	}
	if got[0].sub.RequestID == got[1].sub.RequestID || got[0].sub.ReplyTo == got[1].sub.ReplyTo {
		t.Fatalf("two clients' requests share id %q / answer subject %q", got[0].sub.RequestID, got[0].sub.ReplyTo)
	}
	for _, h := range got {
		if h.clientID != "same" || h.caller == "" || !strings.HasPrefix(h.caller, "_INBOX.") {
			t.Errorf("submission %s: client id %q, caller %q", h.sub.RequestID, h.clientID, h.caller)
		}
		a, err := h.sub.Arguments().GetData()
		if err != nil {
			t.Fatal(err)
		}
		e.reply(h.sub, messages.StatusOK, map[string]string{"table": a.Table})
	}
	wg.Wait()
	close(answers)
	seen := map[string]bool{}
	for m := range answers {
		if m == nil {
			t.FailNow()
		}
		r, err := messages.DecodeResponse(m.Header, m.Data)
		if err != nil {
			t.Fatal(err)
		}
		var out map[string]string
		if err := json.Unmarshal(r.Payload, &out); err != nil {
			t.Fatal(err)
		}
		if r.Header.RequestID != "same" || m.Header.Get(messages.HdrRequestID) != "same" {
			t.Errorf("answer names request %q / %q, want the client's id", r.Header.RequestID, m.Header.Get(messages.HdrRequestID))
		}
		seen[out["table"]] = true
	}
	if !seen["table0"] || !seen["table1"] {
		t.Fatalf("answers %v: each client wants its own table", seen)
	}

	// A retry with the same id after the answer: a new request at the RC.
	retried := make(chan *nats.Msg, 1)
	go func() { retried <- getDataWithID(t, e.nc, e.s, "same", "again") }()
	select {
	case h := <-subs:
		if h.sub.RequestID == got[0].sub.RequestID || h.sub.RequestID == got[1].sub.RequestID {
			t.Fatalf("the retry reuses id %q", h.sub.RequestID)
		}
		e.reply(h.sub, messages.StatusOK, map[string]string{"table": "again"})
	case <-time.After(wait):
		t.Fatal("the retry never reached the RC")
	}
	if m := <-retried; m == nil {
		t.FailNow()
	} else if r, err := messages.DecodeResponse(m.Header, m.Data); err != nil || !r.Header.Status.IsOK() || !strings.Contains(string(r.Payload), "again") {
		t.Fatalf("retry answer %v %q (%v)", r.Header.Status, r.Payload, err)
	}
}

// startNATSConnTo opens a second client connection to e's server.
func startNATSConnTo(t *testing.T, e *env) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(e.nc.ConnectedUrl())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// The GW answers only to a client's inbox: a ping whose reply subject is an
// internal one (the RC would take it as a DAP lost) gets nothing published
// there, while a normal request sent after it is answered.
func TestReplyOntoInternalSubjectIsRefused(t *testing.T) {
	e := startGW(t, nil)
	e.fakeRC("rc1", "", e.echo("rc1"))
	lost := e.s.Prefix() + ".evt.dap.d1.lost"
	spy, err := e.nc.SubscribeSync(lost)
	if err != nil {
		t.Fatal(err)
	}
	sys, err := e.nc.SubscribeSync("$SYS.REQ.SERVER.PING")
	if err != nil {
		t.Fatal(err)
	}
	other, err := e.nc.SubscribeSync("elsewhere.x")
	if err != nil {
		t.Fatal(err)
	}
	ping := []byte(`{"header":{"api":"ping"},"payload":{}}`)
	for _, reply := range []string{lost, "$SYS.REQ.SERVER.PING", "elsewhere.x"} {
		if err := e.nc.PublishMsg(&nats.Msg{Subject: e.s.GWAPI(subjects.APIPing), Reply: reply, Data: ping}); err != nil {
			t.Fatal(err)
		}
	}
	// The same endpoint answers a normal ping after the three: they were
	// handled (refused) before it.
	if r := e.raw(subjects.APIPing, nil, ping); !r.Header.Status.IsOK() {
		t.Fatalf("normal ping: %v", r.Header.Status)
	}
	if err := e.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	for _, s := range []*nats.Subscription{spy, sys, other} {
		if m, err := s.NextMsg(50 * time.Millisecond); err == nil {
			t.Errorf("the GW published on %s: %q", m.Subject, m.Data)
		}
	}
	if n := promtest.Sum(t, e.reg, "sg_gw_requests_refused_reply_total", nil); n != 3 {
		t.Fatalf("refused replies counted %v, want 3", n)
	}
}

func TestRequestSizeLimit(t *testing.T) {
	e := startGW(t, nil) // the default limit
	e.fakeRC("rc1", "", e.echo("rc1"))
	body := `{"header":{"api":"getData"},"payload":{"table":"` + strings.Repeat("x", gw.DefaultMaxRequestBytes) + `"}}`
	r := e.raw(subjects.APIGetData, nil, []byte(body))
	want := fmt.Sprintf("Request of %d bytes is above the limit of %d bytes", len(body), gw.DefaultMaxRequestBytes)
	if st := r.Header.Status; st.RC != messages.CodeTooLarge || st.AI != want {
		t.Fatalf("got %v, want TOO_LARGE %q", st, want)
	}
}

// One caller (a connection's inbox) may hold MaxInFlightPerCaller requests;
// the next is refused RATE_LIMITED, naming the limit and when to come back,
// while another caller is still served.
func TestPerCallerLimit(t *testing.T) {
	e := startGW(t, func(c *gw.Config) { c.MaxInFlightPerCaller = 1 })
	held := make(chan messages.RCSubmission, 2)
	e.fakeRC("rc1", "", func(s messages.RCSubmission) {
		a, _ := s.Arguments().GetData()
		if a.Table == "hold" {
			held <- s
			return
		}
		e.echo("rc1")(s)
	})
	first := make(chan *nats.Msg, 1)
	go func() { first <- getDataWithID(t, e.nc, e.s, "a", "hold") }()
	s := natstest.Receive(t, held, "held submission", wait)
	m := getDataWithID(t, e.nc, e.s, "b", "t")
	if m == nil {
		t.FailNow()
	}
	st, err := messages.ReadStatus(m.Header)
	if err != nil || st.RC != messages.CodeRateLimited || !strings.Contains(st.AI, gw.LimitInFlightPerCaller) {
		t.Fatalf("second request of the caller: %v (%v)", st, err)
	}
	if m.Header.Get(messages.HdrLimit) != gw.LimitInFlightPerCaller || m.Header.Get(messages.HdrRetryAfter) != "1" {
		t.Fatalf("limit headers %v", m.Header)
	}
	// Another connection is another caller.
	if m := getDataWithID(t, startNATSConnTo(t, e), e.s, "c", "t"); m == nil {
		t.FailNow()
	} else if st, _ := messages.ReadStatus(m.Header); !st.IsOK() {
		t.Fatalf("another caller: %v", st)
	}
	e.reply(s, messages.StatusOK, "ok")
	if m := <-first; m == nil {
		t.FailNow()
	}
	// The caller's slot is free again.
	if m := getDataWithID(t, e.nc, e.s, "d", "t"); m == nil {
		t.FailNow()
	} else if st, _ := messages.ReadStatus(m.Header); !st.IsOK() {
		t.Fatalf("after the first was answered: %v", st)
	}
}
