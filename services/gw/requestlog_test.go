package gw_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sg-project/sg/messages"
	"github.com/sg-project/sg/services/gw"
	"github.com/sg-project/sg/subjects"
)

// An answered request's entry expires by a per-message TTL on its
// `answered` record (not a purge, no closing write): the stream is empty
// once the TTL has passed, the sweeps skip answered entries (no poison), and
// a request log stream made without per-message TTLs (by an older sg) is
// updated to take them.
func TestAnsweredEntriesCloseWithATTL(t *testing.T) {
	var js jetstream.JetStream
	e := startGW(t, func(c *gw.Config) {
		c.RequestLog = &gw.Durability{} // every request logged, however fast (the default)
		c.SweepEvery = 100 * time.Millisecond
		var err error
		if js, err = jetstream.New(c.NC); err != nil {
			t.Fatal(err)
		}
		s := c.Subjects
		// The stream as an sg without per-message TTLs made it.
		if _, err := js.CreateStream(ctxT(t), jetstream.StreamConfig{Name: s.RequestLogStream(),
			Subjects: []string{s.RequestLogEntryPattern()}, MaxMsgsPerSubject: 1, Discard: jetstream.DiscardOld,
			MaxAge: time.Hour, AllowDirect: true}); err != nil {
			t.Fatal(err)
		}
	})
	e.fakeRC("rc1", "", e.echo("rc1"))
	const n = 5
	for range n {
		if r := e.raw(subjects.APIPing, nil, []byte(`{"header":{"api":"ping"},"payload":{}}`)); !r.Header.Status.IsOK() {
			t.Fatalf("ping: %v", r.Header.Status)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), gw.AnsweredTTL+2*wait)
	defer cancel()
	st, err := js.Stream(ctx, e.s.RequestLogStream())
	if err != nil {
		t.Fatal(err)
	}
	if !st.CachedInfo().Config.AllowMsgTTL {
		t.Fatal("the request log stream was not updated to take per-message TTLs")
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs > n {
		t.Fatalf("%d records for %d answered requests: each entry is one record", info.State.Msgs, n)
	}
	// The entries' TTL passes: nothing is left, polled with a bound.
	for deadline := time.Now().Add(gw.AnsweredTTL + wait); ; {
		info, err := st.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if info.State.Msgs == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d records left in the request log %s after answering every request", info.State.Msgs, gw.AnsweredTTL+wait)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if p := counterL(t, e, gw.PoisonMetric, "stream", gw.PoisonStreamRequestLog); p != 0 {
		t.Fatalf("closed entries counted as poison: %v", p)
	}
	if f := counterL(t, e, "sg_gw_request_log_errors_total", "op", "purge"); f != 0 {
		t.Fatalf("purge errors: %v", f)
	}
}

// With a request log, the answer goes out only once the `answered` record
// is acknowledged by the stream (README: exactly once). Seen from a
// connection that gets a copy of everything on the log's subjects and on
// inboxes: the acknowledgement of the `answered` record (it comes on the
// record's reply subject) comes before the answer. (The record's own copy
// may come after its acknowledgement: the stream stores on a goroutine of
// its own.)
func TestAnsweredIsAcknowledgedBeforeTheAnswer(t *testing.T) {
	// Every request logged, however fast (the default).
	e := startGW(t, func(c *gw.Config) { c.RequestLog = &gw.Durability{} })
	e.fakeRC("rc1", "", e.echo("rc1"))
	obs, err := nats.Connect(e.nc.ConnectedUrl())
	if err != nil {
		t.Fatal(err)
	}
	defer obs.Close()
	seen := make(chan *nats.Msg, 1024)
	for _, subj := range []string{e.s.RequestLogEntryPattern(), "_INBOX.>"} {
		if _, err := obs.ChanSubscribe(subj, seen); err != nil {
			t.Fatal(err)
		}
	}
	if err := obs.Flush(); err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		reply := obs.NewInbox()
		if err := obs.PublishRequest(e.s.GWAPI(subjects.APIPing), reply, []byte(`{"header":{"api":"ping"},"payload":{}}`)); err != nil {
			t.Fatal(err)
		}
		acked := map[string]bool{} // acknowledgements (by subject) before the answer
		replied := false
		var answeredAck string // where the `answered` record's acknowledgement goes
		for !replied || answeredAck == "" {
			var m *nats.Msg
			select {
			case m = <-seen:
			case <-time.After(wait):
				t.Fatalf("request %d: answered %v, answered record seen %v", i, replied, answeredAck != "")
			}
			switch {
			case m.Subject == reply:
				replied = true
			case strings.HasPrefix(m.Subject, "_INBOX."):
				var a struct {
					Seq uint64 `json:"seq"`
				}
				if json.Unmarshal(m.Data, &a) == nil && a.Seq != 0 && !replied {
					acked[m.Subject] = true
				}
			default: // a record of the log
				if m.Header.Get(messages.HdrLogAnswered) != "" {
					if m.Reply == "" || m.Header.Get(jetstream.ExpectedLastSubjSeqHeader) == "" {
						t.Fatalf("answered record without its condition or reply subject: %v %q", m.Header, m.Reply)
					}
					answeredAck = m.Reply
				}
			}
		}
		if !acked[answeredAck] {
			t.Fatalf("request %d answered before its answered record was acknowledged (acknowledged before: %v)", i, acked)
		}
	}
}

// A request answered within CreateAfter costs the log nothing: no record is
// ever written for it (README, durability: the create waits CreateAfter).
// Seen from a connection that gets a copy of everything on the log's
// subjects, and from the stream itself.
func TestFastAnswerWritesNoLogRecord(t *testing.T) {
	var js jetstream.JetStream
	e := startGW(t, func(c *gw.Config) {
		c.RequestLog = &gw.Durability{CreateAfter: time.Minute}
		var err error
		if js, err = jetstream.New(c.NC); err != nil {
			t.Fatal(err)
		}
	})
	e.fakeRC("rc1", "", e.echo("rc1"))
	obs, err := nats.Connect(e.nc.ConnectedUrl())
	if err != nil {
		t.Fatal(err)
	}
	defer obs.Close()
	records, err := obs.SubscribeSync(e.s.RequestLogEntryPattern())
	if err != nil {
		t.Fatal(err)
	}
	if err := obs.Flush(); err != nil {
		t.Fatal(err)
	}
	const n = 5
	for range n {
		if r := e.raw(subjects.APIPing, nil, []byte(`{"header":{"api":"ping"},"payload":{}}`)); !r.Header.Status.IsOK() {
			t.Fatalf("ping: %v", r.Header.Status)
		}
	}
	// Whatever the GW published before its answers, the observer has by
	// the time a round trip of its own returns (one server, in order).
	if err := e.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := obs.Flush(); err != nil {
		t.Fatal(err)
	}
	if m, err := records.NextMsg(0); err == nil {
		t.Fatalf("a log record for a request answered within CreateAfter: %s", m.Subject)
	}
	st, err := js.Stream(ctxT(t), e.s.RequestLogStream())
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 0 || info.State.LastSeq != 0 {
		t.Fatalf("request log holds %d records (last sequence %d), want none", info.State.Msgs, info.State.LastSeq)
	}
}

// A negative CreateAfter is refused by name: 0 is the default (with the
// first drive), and a deferral must say how long.
func TestNegativeCreateAfterIsRefused(t *testing.T) {
	_, err := gw.New(gw.Config{ID: "gw1", NC: startNATS(t), RequestLog: &gw.Durability{CreateAfter: -time.Millisecond}})
	if err == nil || !strings.Contains(err.Error(), "CreateAfter -1ms") {
		t.Fatalf("gw.New with CreateAfter -1ms: %v, want an error naming it", err)
	}
}
