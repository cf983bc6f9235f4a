package gw_test

import (
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/sg-project/sg/messages"
	"github.com/sg-project/sg/services/gw"
	"github.com/sg-project/sg/services/gw/core"
	"github.com/sg-project/sg/subjects"
	"github.com/sg-project/sg/test/natstest"
)

// rcCancels collects the cancels the GW sends to RC rcID.
func (e *env) rcCancels(rcID string) <-chan string {
	e.t.Helper()
	ch := make(chan string, 8)
	sub, err := e.nc.Subscribe(e.s.RCCancel(rcID), func(m *nats.Msg) {
		if len(m.Data) != 0 {
			e.t.Errorf("cancel to the RC with a body of %d bytes", len(m.Data))
		}
		ch <- m.Header.Get(messages.HdrRequestID)
	})
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := e.nc.Flush(); err != nil {
		e.t.Fatal(err)
	}
	return ch
}

func cancelRequest(nc *nats.Conn, s subjects.Subjects, id string, wait time.Duration) (*nats.Msg, error) {
	return nc.RequestMsg(&nats.Msg{Subject: s.GWCancel(), Header: nats.Header{messages.HdrRequestID: {id}}}, wait)
}

// A caller cancels its request: the cancel is answered OK, the request gets
// exactly one answer, CANCELLED, and its RC is told to stop the drive. A
// cancel from another caller, or for an unknown id, changes nothing.
func TestCancel(t *testing.T) {
	e := startGW(t, nil)
	held := make(chan messages.RCSubmission, 1)
	e.fakeRC("rc1", "", func(s messages.RCSubmission) { held <- s })
	cancels := e.rcCancels("rc1")
	inbox := nats.NewInbox()
	answers, err := e.nc.SubscribeSync(inbox + ".*")
	if err != nil {
		t.Fatal(err)
	}
	body := []byte(`{"header":{"api":"getData"},"payload":{"table":"t"}}`)
	if err := e.nc.PublishMsg(&nats.Msg{Subject: e.s.GWAPI(subjects.APIGetData), Reply: inbox + ".1",
		Header: nats.Header{messages.HdrRequestID: {"c1"}}, Data: body}); err != nil {
		t.Fatal(err)
	}
	sub := natstest.Receive(t, held, "submission", wait)

	// Another caller (another connection's inbox) cannot cancel it; nobody
	// answers a cancel for a request no GW holds for that caller.
	if _, err := cancelRequest(startNATSConnTo(t, e), e.s, "c1", 300*time.Millisecond); err == nil {
		t.Fatal("a cancel from another caller was answered")
	}
	if _, err := cancelRequest(e.nc, e.s, "nope", 300*time.Millisecond); err == nil {
		t.Fatal("a cancel for an unknown request was answered")
	}
	// The caller's own cancel, from its inbox prefix; both answers arrive
	// there.
	if err := e.nc.PublishMsg(&nats.Msg{Subject: e.s.GWCancel(), Reply: inbox + ".2",
		Header: nats.Header{messages.HdrRequestID: {"c1"}}}); err != nil {
		t.Fatal(err)
	}
	got := map[string]messages.Status{}
	for range 2 {
		m, err := answers.NextMsg(wait)
		if err != nil {
			t.Fatalf("answers so far %v: %v", got, err)
		}
		st, err := messages.ReadStatus(m.Header)
		if err != nil {
			t.Fatal(err)
		}
		got[m.Subject[strings.LastIndexByte(m.Subject, '.')+1:]] = st
	}
	if st := got["2"]; !st.IsOK() {
		t.Errorf("the cancel was answered %v, want OK", st)
	}
	if st := got["1"]; st.RC != messages.CodeCancelled || st.AI != core.TextCancelled {
		t.Errorf("the request was answered %v, want CANCELLED %q", st, core.TextCancelled)
	}
	select {
	case id := <-cancels:
		if id != sub.RequestID {
			t.Errorf("RC told to cancel %q, want the drive %q", id, sub.RequestID)
		}
	case <-time.After(wait):
		t.Fatal("the RC was not told to cancel")
	}
	// The RC's late answer is not forwarded: exactly one answer.
	e.reply(sub, messages.StatusOK, "late")
	if m, err := answers.NextMsg(200 * time.Millisecond); err == nil {
		t.Fatalf("a second answer: %v", m.Header)
	}
}

// The GW's own timeout (the RC said nothing by deadline + margin) tells the
// RC to stop the drive.
func TestGWTimeoutCancelsTheDrive(t *testing.T) {
	e := startGW(t, func(c *gw.Config) { c.TimeoutMargin = 50 * time.Millisecond })
	submitted := make(chan messages.RCSubmission, 1)
	e.fakeRC("silent", "", func(s messages.RCSubmission) { submitted <- s })
	cancels := e.rcCancels("silent")
	r, err := e.cl.Do(ctxT(t), subjects.APIGetData, messages.GetDataArgs{Table: "t"}, messages.Opts{TimeoutMS: 100})
	if err != nil {
		t.Fatal(err)
	}
	if st := r.Header.Status; st.RC != messages.CodeTimeout || st.AI != gw.TextTimeout {
		t.Fatalf("got %v", st)
	}
	s := natstest.Receive(t, submitted, "submission", wait)
	select {
	case id := <-cancels:
		if id != s.RequestID {
			t.Fatalf("RC told to cancel %q, want %q", id, s.RequestID)
		}
	case <-time.After(wait):
		t.Fatal("the RC was not told to cancel the timed-out drive")
	}
}
