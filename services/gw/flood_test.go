package gw_test

import (
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"
	"github.com/sg-project/sg/messages"
	"github.com/sg-project/sg/services/defaults"
	"github.com/sg-project/sg/services/gw"
	"github.com/sg-project/sg/subjects"
	"github.com/sg-project/sg/test/natstest"
	"github.com/sg-project/sg/test/promtest"
	"github.com/sg-project/sg/test/testlog"
)

// floodN is how many hostile messages a flood test publishes.
const floodN = 5000

// TestUnreadableFrameFloodLogsWithinTheLimit: a publisher floods the GW's
// answer subjects with frames whose stream headers do not read, for no
// request held here. Every one is counted (sg_gw_malformed_messages_total,
// kind stream_frame), the lines about them stay within loglimit's bound
// (one line each made a flood of 100k a second 100k lines a second), and
// the GW still answers a good request. Real GW and NATS.
func TestUnreadableFrameFloodLogsWithinTheLimit(t *testing.T) {
	var logs testlog.Buffer
	e := startGW(t, func(c *gw.Config) {
		c.Log = zerolog.New(&logs)
		c.Timeout = time.Minute
	})
	subs := make(chan messages.RCSubmission, 1)
	e.fakeRC("rc1", "", func(s messages.RCSubmission) { subs <- s })
	caller, err := e.nc.SubscribeSync(e.nc.NewInbox())
	if err != nil {
		t.Fatal(err)
	}
	ask := func(stream bool) messages.RCSubmission {
		t.Helper()
		h := nats.Header{}
		if stream {
			h.Set(messages.HdrAcceptStream, "1")
		}
		req := []byte(`{"header":{"api":"getData"},"payload":{"table":"t"}}`)
		if err := e.nc.PublishMsg(&nats.Msg{Subject: e.s.GWAPI(subjects.APIGetData), Reply: caller.Subject, Header: h, Data: req}); err != nil {
			t.Fatal(err)
		}
		return natstest.Receive(t, subs, "the submission", wait)
	}
	frame := func(subject string) *nats.Msg {
		h := nats.Header{}
		h.Set(messages.HdrStreamID, "S")
		h.Set(messages.HdrStreamSeq, "one")
		return &nats.Msg{Subject: subject, Header: h, Data: []byte{0xc1}}
	}
	s := ask(true)
	// The flood: on this GW's answer subjects, for a request it does not
	// hold (the subject's last token names it).
	forged := s.ReplyTo[:strings.LastIndexByte(s.ReplyTo, '.')+1] + "forged"
	for range floodN {
		if err := e.nc.PublishMsg(frame(forged)); err != nil {
			t.Fatal(err)
		}
	}
	// Then one for the request held: it ends its answer with an error. The
	// GW reads its answer subjects in order, so when the caller has that
	// end, every frame of the flood was read.
	if err := e.nc.PublishMsg(frame(s.ReplyTo)); err != nil {
		t.Fatal(err)
	}
	if m, err := caller.NextMsg(wait); err != nil {
		t.Fatalf("no end after the unreadable frame: %v", err)
	} else if st, err := messages.ReadStatus(m.Header); err != nil || !strings.Contains(st.AI, "does not read") {
		t.Fatalf("ended with %v %+v, want the GW's error naming the unreadable frame", err, st)
	}
	// (a) Every message counted.
	if n := promtest.Sum(t, e.reg, "sg_gw_malformed_messages_total", map[string]string{"kind": "stream_frame"}); n != floodN+1 {
		t.Fatalf("unreadable frames counted %v, want %d", n, floodN+1)
	}
	// (b) The lines bounded: a burst per period, two periods at most in
	// the test's time. The one that ended a held answer is always written.
	skipped := strings.Count(logs.String(), "does not read: skipped")
	if skipped > 2*defaults.LogBurst {
		t.Fatalf("%d lines about %d unreadable frames, want at most %d", skipped, floodN, 2*defaults.LogBurst)
	}
	if logs.Line("does not read: the answer ends with an error") == "" {
		t.Fatalf("no line about the frame that ended a held answer in\n%s", logs.String())
	}
	// (c) The GW still answers.
	s = ask(false)
	h, body := okJSONAnswer(t, s, []byte(`{"columns":[]}`))
	if err := e.nc.PublishMsg(&nats.Msg{Subject: s.ReplyTo, Header: h, Data: body}); err != nil {
		t.Fatal(err)
	}
	m, err := caller.NextMsg(wait)
	if err != nil {
		t.Fatalf("no answer to a good request after the flood: %v", err)
	}
	if st, err := messages.ReadStatus(m.Header); err != nil || !st.IsOK() {
		t.Fatalf("good request after the flood answered %v %+v, want OK", err, st)
	}
}
