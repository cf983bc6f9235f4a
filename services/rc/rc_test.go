package rc

import (
	"context"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/sg-project/sg/messages"
	"github.com/sg-project/sg/subjects"
	"github.com/sg-project/sg/test/natstest"
)

type fixture struct {
	srv *server.Server
	t   *testing.T
	nc  *nats.Conn
	s   subjects.Subjects
	ann *nats.Subscription
	// first is the RC's first announcement (read by startRC).
	first *nats.Msg
	rc    *RC
}

// startRC runs an RC on an embedded server and waits for its first
// announcement, so that it is subscribed before the test publishes.
func startRC(t *testing.T, opts ...func(*Config)) *fixture {
	t.Helper()
	srv := natstest.Start(t)
	nc := natstest.Connect(t, srv)
	s := subjects.Default()
	ann, err := nc.SubscribeSync(s.RCAnnounce("rc-1"))
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{ID: "rc-1", NC: nc, Subjects: s, Log: zerolog.Nop(), TickEvery: 50 * time.Millisecond, AnnounceEvery: 10 * time.Millisecond,
		WarmUp: -1} // no warm-up: these tests register DAPs themselves (warm_test.go tests it)
	for _, o := range opts {
		o(&cfg)
	}
	r, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("rc run: %v", err)
			}
		case <-time.After(5 * time.Second):
			t.Error("rc did not stop within 5s")
		}
	})
	first, err := ann.NextMsg(5 * time.Second)
	if err != nil {
		t.Fatalf("no RC announcement: %v", err)
	}
	return &fixture{t: t, nc: nc, s: s, ann: ann, first: first, srv: srv, rc: r}
}

// waitDAPs waits until the RC announces that it knows n DAPs: events and
// submissions travel on different subscriptions, so a test that registers
// a DAP waits for it before submitting.
func (f *fixture) waitDAPs(n int) {
	f.t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		m, err := f.ann.NextMsg(time.Until(deadline))
		if err != nil {
			break
		}
		a, err := messages.DecodeValid[messages.RCAnnouncement](m.Data)
		if err == nil && a.DAPs >= n {
			return
		}
	}
	f.t.Fatalf("RC did not announce %d DAPs within 5s", n)
}

func (f *fixture) publish(subject string, v any) {
	f.t.Helper()
	data, err := messages.Encode(v)
	if err != nil {
		f.t.Fatal(err)
	}
	if err := f.nc.Publish(subject, data); err != nil {
		f.t.Fatal(err)
	}
}

func (f *fixture) registerDAP(id string, available bool) {
	f.publish(f.s.DAPRegister(id), &messages.DAPRegistration{
		V: messages.DAPVersion, DAPID: id, Labels: messages.LabelSet{"region": "eu"}, Tier: messages.TierRDB,
		Purview: messages.Unbounded, Tables: []messages.TableInfo{{Name: "trade", Kind: messages.TablePartitioned}},
		Available: available, Concurrency: 1,
	})
	f.waitDAPs(1)
}

func (f *fixture) submit(id string, timeout time.Duration, reply string) {
	args, err := messages.Encode(&messages.GetDataArgs{Table: "trade"})
	if err != nil {
		f.t.Fatal(err)
	}
	f.publish(f.s.RCSubmit("rc-1"), &messages.RCSubmission{
		V: messages.RCVersion, RequestID: id, GWID: "gw-1", Header: messages.RequestHeader{API: "getData"},
		Args: args, ReplyTo: reply, Content: messages.ContentMsgpack,
		Deadline: time.Now().Add(timeout).UnixNano(), ReceivedAt: time.Now().UnixNano(), AnswerID: id + "-caller",
		Stream: true, StreamStart: true,
	})
}

func next(t *testing.T, sub *nats.Subscription) *nats.Msg {
	t.Helper()
	m, err := sub.NextMsg(5 * time.Second)
	if err != nil {
		t.Fatalf("waiting on %s: %v", sub.Subject, err)
	}
	return m
}

func TestRCDispatchesAndTellsTheAgg(t *testing.T) {
	f := startRC(t)
	portions, _ := f.nc.SubscribeSync(f.s.DAPPortion("d1"))
	expects, _ := f.nc.SubscribeSync(f.s.AggExpect("agg-1"))
	f.registerDAP("d1", true)
	// Garbage first: the RC logs it and carries on.
	if err := f.nc.Publish(f.s.RCSubmit("rc-1"), []byte{0xc1, 0x00, 0xff}); err != nil {
		t.Fatal(err)
	}
	f.submit("q1", 5*time.Second, "reply.q1")

	dm := next(t, portions)
	pd, err := messages.DecodeValid[messages.PortionDispatch](dm.Data)
	if err != nil {
		t.Fatal(err)
	}
	if pd.RequestID != "q1" || pd.RCID != "rc-1" || pd.AggID != "agg-1" || pd.Labels["region"] != "eu" {
		t.Fatalf("dispatch %+v", pd)
	}
	// Its headers are messages' for a dispatch (what the DAP's tests send),
	// and name where a DAP that cannot decode the body refuses it.
	if !reflect.DeepEqual(dm.Header, pd.Header()) {
		t.Fatalf("dispatch headers %v, want %v", dm.Header, pd.Header())
	}
	if r, err := messages.RefusalRoute(dm.Header); err != nil || r.RequestID != "q1" || r.RCID != "rc-1" || r.PortionID != pd.PortionID || r.Attempt != pd.Attempt {
		t.Fatalf("dispatch's refusal route %+v %v", r, err)
	}
	f.publish(f.s.RCCompletion("rc-1"), &messages.PortionCompletion{
		V: messages.PortionVersion, RequestID: "q1", PortionID: pd.PortionID, Attempt: pd.Attempt,
		DAPID: "d1", Outcome: messages.OutcomeOK, Code: messages.CodeOK, PartialSent: true,
	})
	em := next(t, expects)
	ex, err := messages.DecodeValid[messages.AggExpectation](em.Data)
	if err != nil {
		t.Fatal(err)
	}
	if !ex.Sealed || len(ex.Expect) != 1 || ex.Expect[0].PortionID != pd.PortionID || ex.ReplyTo != "reply.q1" || ex.RCID != "rc-1" ||
		ex.AnswerID != "q1-caller" || !ex.Stream || !ex.StreamStart {
		t.Fatalf("expectation %+v", ex)
	}
	if !reflect.DeepEqual(em.Header, ex.Header()) {
		t.Fatalf("expectation headers %v, want %v", em.Header, ex.Header())
	}
	if r, err := messages.RefusalRoute(em.Header); err != nil || r.RequestID != "q1" || r.RCID != "rc-1" {
		t.Fatalf("expectation's refusal route %+v %v", r, err)
	}
}

func TestRCTimeoutAnswersWithTheSeedMessage(t *testing.T) {
	f := startRC(t)
	replies, _ := f.nc.SubscribeSync("reply.q2")
	f.registerDAP("d1", false)
	f.submit("q2", 300*time.Millisecond, "reply.q2")
	m := next(t, replies)
	st, err := messages.ReadStatus(m.Header)
	if err != nil {
		t.Fatal(err)
	}
	if st.RC != messages.CodeTimeout || st.AC != messages.CodeErr {
		t.Fatalf("status %+v", st)
	}
	want := `Request timed out, [rc=rc-1;status="allocating";queue="[labels={region:eu};startTS=-inf;endTS=+inf;reason=\"Unavailable for unspecified reasons\";dap=[d1]]"]`
	if st.AI != want {
		t.Fatalf("ai\n got: %s\nwant: %s", st.AI, want)
	}
	resp, err := messages.DecodeResponse(m.Header, m.Data)
	if err != nil || resp.Header.RequestID != "q2" || !strings.HasPrefix(resp.Header.AI, "Request timed out") {
		t.Fatalf("response %+v %v", resp, err)
	}
}

func TestRCUnknownLabelSetFailsAtOnce(t *testing.T) {
	f := startRC(t)
	replies, _ := f.nc.SubscribeSync("reply.q3")
	f.registerDAP("d1", true)
	args, _ := messages.Encode(&messages.GetDataArgs{Table: "trade", Labels: messages.LabelSelector{"region": {"mars"}}})
	f.publish(f.s.RCSubmit("rc-1"), &messages.RCSubmission{
		V: messages.RCVersion, RequestID: "q3", GWID: "gw-1", Header: messages.RequestHeader{API: "getData"},
		Args: args, ReplyTo: "reply.q3", Content: messages.ContentMsgpack, Deadline: time.Now().Add(time.Minute).UnixNano(),
	})
	st, err := messages.ReadStatus(next(t, replies).Header)
	if err != nil || st.RC != messages.CodeNoResources || st.AI != `No DAP has label set {region:mars} for table "trade"` {
		t.Fatalf("status %+v %v", st, err)
	}
}
