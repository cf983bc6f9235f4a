package gw_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"github.com/sg-project/sg/messages"
	"github.com/sg-project/sg/services/gw"
	"github.com/sg-project/sg/services/poison"
	"github.com/sg-project/sg/subjects"
	"github.com/sg-project/sg/test/natstest"
	"github.com/sg-project/sg/test/promtest"
	"github.com/sg-project/sg/test/testlog"
)

// Request log records that do not decode, or that a GW must not act on (a
// client reply that is an internal subject), are skipped: counted and logged
// once each with their stream sequence, never adopted, never answered; the
// GW sweeps on and serves.
func TestRequestLogPoisonRecords(t *testing.T) {
	e := startGW(t, func(c *gw.Config) {
		c.RequestLog = &gw.Durability{Memory: true}
		c.AnnounceEvery, c.DeadAfter, c.SweepEvery = 50*time.Millisecond, 200*time.Millisecond, 100*time.Millisecond
	})
	lost := e.s.Prefix() + ".evt.dap.d1.lost"
	spy, err := e.nc.SubscribeSync(lost)
	if err != nil {
		t.Fatal(err)
	}
	// Each sweep reads the log through a consumer of its own and deletes it
	// once it has read every record: a copy of that delete is a sweep ended.
	sweeps, err := e.nc.SubscribeSync("$JS.API.CONSUMER.DELETE." + e.s.RequestLogStream() + ".>")
	if err != nil {
		t.Fatal(err)
	}
	sweepEnded := func() {
		t.Helper()
		if _, err := sweeps.NextMsg(wait); err != nil {
			t.Fatalf("no sweep of the request log ended within %s: %v", wait, err)
		}
	}
	js, err := jetstream.New(e.nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	// A map whose field claims an array of 4,294,967,295 entries.
	if _, err := js.Publish(ctx, e.s.RequestLogEntry("gw-dead", "r1"), []byte("\x81\xa3sub\xdd\xff\xff\xff\xff")); err != nil {
		t.Fatal(err)
	}
	planted := messages.LogEntry{V: messages.RecoveryVersion, RequestID: "r2", State: messages.LogOpen, GWID: "gw-dead",
		GWStarted: 1, ClientReply: lost, API: subjects.APIPing, Content: messages.ContentJSON,
		Submission: messages.RCSubmission{V: messages.RCVersion, RequestID: "r2", GWID: "gw-dead",
			Header: messages.RequestHeader{API: subjects.APIPing}, ReplyTo: e.s.GWAnswer("gw-dead", "r2"),
			Content: messages.ContentJSON, Deadline: time.Now().Add(time.Hour).UnixNano(), ReceivedAt: time.Now().UnixNano()}}
	if err := planted.Validate(); err != nil {
		t.Fatalf("the planted entry must pass decoding: %v", err)
	}
	data, err := messages.Encode(&planted)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, e.s.RequestLogEntry("gw-dead", "r2"), data); err != nil {
		t.Fatal(err)
	}
	poison := func() float64 {
		return promtest.Sum(t, e.reg, gw.PoisonMetric, map[string]string{"stream": gw.PoisonStreamRequestLog})
	}
	// A sweep counts what it skips before it ends: read after each end.
	for deadline := time.Now().Add(wait); poison() < 2; {
		if time.Now().After(deadline) {
			t.Fatalf("poison records counted %v, want 2", poison())
		}
		sweepEnded()
	}
	// Several more sweeps pass over them (the first end may be the
	// counting sweep's own): still counted once each.
	for range 6 {
		sweepEnded()
	}
	if n := poison(); n != 2 {
		t.Fatalf("poison records counted %v after more sweeps, want 2", n)
	}
	if n := promtest.Sum(t, e.reg, "sg_gw_requests_adopted_total", nil); n != 0 {
		t.Fatalf("adopted %v", n)
	}
	if m, err := spy.NextMsg(50 * time.Millisecond); err == nil {
		t.Fatalf("the GW answered onto %s: %q", m.Subject, m.Data)
	}
	// Still serving (no RC here: the answer is NO_RESOURCES).
	if r := e.raw(subjects.APIPing, nil, []byte(`{"header":{"api":"ping"},"payload":{}}`)); r.Header.Status.RC != messages.CodeNoResources {
		t.Fatalf("after poison: %v", r.Header.Status)
	}
}

// Another service of the same process may register the poison counter
// first: the GW shares it.
func TestPoisonMetricShared(t *testing.T) {
	reg := prometheus.NewRegistry()
	other, err := poison.NewCounter(reg)
	if err != nil {
		t.Fatal(err)
	}
	other.Skip(zerolog.Nop(), "dap_state", 1, "sg.state.dap.x", errors.New("bad"))
	if _, err := gw.New(gw.Config{ID: "gw1", NC: startNATS(t), Registry: reg}); err != nil {
		t.Fatalf("New with the poison counter registered already: %v", err)
	}
}

// TestUnreadableStreamFrameEndsTheAnswerAtOnce: a frame of an answer stream
// whose stream headers do not read ends the caller's answer with the GW's
// error at once, long before the deadline: after frame 0 with an error
// frame, instead of frame 0 with an error answer. Each is counted
// (sg_gw_malformed_messages_total, kind stream_frame) and logged with the
// request id. Real GW and NATS; the Agg's frames are sent here.
func TestUnreadableStreamFrameEndsTheAnswerAtOnce(t *testing.T) {
	var logs testlog.Buffer
	e := startGW(t, func(c *gw.Config) {
		c.Log = zerolog.New(&logs)
		c.Timeout = time.Minute // far beyond every wait here: an end by the deadline fails
	})
	subs := make(chan messages.RCSubmission, 1)
	e.fakeRC("rc1", "", func(s messages.RCSubmission) { subs <- s })
	bad := func(s messages.RCSubmission) *nats.Msg {
		h := nats.Header{}
		h.Set(messages.HdrRequestID, s.RequestID)
		h.Set(messages.HdrStreamID, "S")
		h.Set(messages.HdrStreamSeq, "one")
		return &nats.Msg{Subject: s.ReplyTo, Header: h, Data: []byte{0xc1}}
	}
	for i, firstBad := range []bool{false, true} {
		caller, err := e.nc.SubscribeSync(e.nc.NewInbox())
		if err != nil {
			t.Fatal(err)
		}
		h := nats.Header{}
		h.Set(messages.HdrAcceptStream, "1")
		req := []byte(`{"header":{"api":"getData"},"payload":{"table":"t"}}`)
		if err := e.nc.PublishMsg(&nats.Msg{Subject: e.s.GWAPI(subjects.APIGetData), Reply: caller.Subject, Header: h, Data: req}); err != nil {
			t.Fatal(err)
		}
		s := natstest.Receive(t, subs, "the submission", wait)
		if !firstBad {
			fh, body := okJSONAnswer(t, s, []byte(`{"columns":[]}`))
			messages.SetStreamFrame(fh, "S", 0, false)
			if err := e.nc.PublishMsg(&nats.Msg{Subject: s.ReplyTo, Header: fh, Data: body}); err != nil {
				t.Fatal(err)
			}
			if m, err := caller.NextMsg(wait); err != nil || m.Header.Get(messages.HdrStreamSeq) != "0" {
				t.Fatalf("frame 0: %v %v", err, m)
			}
		}
		if err := e.nc.PublishMsg(bad(s)); err != nil {
			t.Fatal(err)
		}
		m, err := caller.NextMsg(wait)
		if err != nil {
			t.Fatalf("request %d: no end after the unreadable frame: %v", i, err)
		}
		st, err := messages.ReadStatus(m.Header)
		if err != nil || st.IsOK() || !strings.Contains(st.AI, "does not read") {
			t.Fatalf("request %d: ended with %v %+v, want the GW's error naming the unreadable frame", i, err, st)
		}
		if end := m.Header.Get(messages.HdrStreamEnd) == "1"; end == firstBad {
			t.Fatalf("request %d: stream end %t with its first frame unreadable %t", i, end, firstBad)
		}
		if n := promtest.Sum(t, e.reg, "sg_gw_malformed_messages_total", map[string]string{"kind": "stream_frame"}); n != float64(i+1) {
			t.Fatalf("request %d: unreadable frames counted %v, want %d", i, n, i+1)
		}
		if id := m.Header.Get(messages.HdrTraceID); id == "" || logs.Line(`"request_id":"`+id+`"`, "does not read") == "" {
			t.Fatalf("request %d: no log line about the unreadable frame with request id %q in\n%s", i, id, logs.String())
		}
		_ = caller.Unsubscribe()
	}
}

// TestRequestLogMisfiledEntriesArePoison: an entry whose subject
// (log.req.<gw>.<request>) does not name the ids inside it, the request's
// or its submission's GW, is never adopted under that subject: skipped as
// poison (counted), its caller never answered, the sweep going on. The
// same entry on its own subject is adopted (this GW's adopt write lands on
// it).
func TestRequestLogMisfiledEntriesArePoison(t *testing.T) {
	e := startGW(t, func(c *gw.Config) {
		c.RequestLog = &gw.Durability{Memory: true}
		c.AnnounceEvery, c.DeadAfter, c.SweepEvery = 50*time.Millisecond, 200*time.Millisecond, 100*time.Millisecond
	})
	js, err := jetstream.New(e.nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t)
	writes, err := e.nc.SubscribeSync(e.s.RequestLogEntryPattern())
	if err != nil {
		t.Fatal(err)
	}
	plant := func(subject, id string) *nats.Subscription {
		t.Helper()
		caller, err := e.nc.SubscribeSync(e.nc.NewInbox())
		if err != nil {
			t.Fatal(err)
		}
		en := messages.LogEntry{V: messages.RecoveryVersion, RequestID: id, State: messages.LogOpen, GWID: "gw-dead",
			GWStarted: 1, ClientReply: caller.Subject, API: subjects.APIPing, Content: messages.ContentJSON,
			Submission: messages.RCSubmission{V: messages.RCVersion, RequestID: id, GWID: "gw-dead",
				Header: messages.RequestHeader{API: subjects.APIPing}, ReplyTo: e.s.GWAnswer("gw-dead", id),
				Content: messages.ContentJSON, Deadline: time.Now().Add(time.Hour).UnixNano(), ReceivedAt: time.Now().UnixNano()}}
		data, err := messages.Encode(&en)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := js.Publish(ctx, subject, data); err != nil {
			t.Fatal(err)
		}
		return caller
	}
	misfiled := []*nats.Subscription{
		plant(e.s.RequestLogEntry("gw-dead", "r1"), "r2"),  // another request's subject
		plant(e.s.RequestLogEntry("gw-other", "r3"), "r3"), // another GW's
	}
	own := e.s.RequestLogEntry("gw-dead", "r4")
	plant(own, "r4")
	// The sweep that adopts the entry on its own subject read the others
	// first; the GW writes under no other subject.
	for adopted := false; !adopted; {
		m, err := writes.NextMsg(wait)
		if err != nil {
			t.Fatalf("the entry on its own subject was not adopted: %v", err)
		}
		if en, err := messages.DecodeValid[messages.LogEntry](m.Data); err == nil && en.GWID == "gw1" {
			if m.Subject != own {
				t.Fatalf("the GW wrote %s on %s: a misfiled entry adopted", en.State, m.Subject)
			}
			adopted = true
		}
	}
	if n := promtest.Sum(t, e.reg, gw.PoisonMetric, map[string]string{"stream": gw.PoisonStreamRequestLog}); n != 2 {
		t.Fatalf("poison records counted %v, want the 2 misfiled entries", n)
	}
	for i, caller := range misfiled {
		if m, err := caller.NextMsg(50 * time.Millisecond); err == nil {
			t.Fatalf("misfiled entry %d: its caller was answered %v", i, m.Header)
		}
	}
}
