package gw_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sg-project/sg/messages"
	"github.com/sg-project/sg/services/gw"
	"github.com/sg-project/sg/subjects"
	"github.com/sg-project/sg/test/promtest"
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
	if p := promtest.Sum(t, e.reg, gw.PoisonMetric, map[string]string{"stream": gw.PoisonStreamRequestLog}); p != 0 {
		t.Fatalf("closed entries counted as poison: %v", p)
	}
	if f := promtest.Sum(t, e.reg, "sg_gw_request_log_errors_total", map[string]string{"op": "purge"}); f != 0 {
		t.Fatalf("purge errors: %v", f)
	}
}

// With a request log, the answer goes out only once the `answered` record
// is acknowledged by the stream (README: exactly once). The acknowledgement
// of each `answered` write is held here on its way to the GW: while it is
// held, nothing the GW published has answered (checked after a round trip
// of the GW's connection and then of the observer's, so whatever the GW
// sent before is in), and once it is passed on the answer comes.
//
// Watching the acknowledgement and the answer from a third connection gives
// no order between them (the stream and the GW are two publishers), and a
// copy of everything on inboxes also holds the GW's own sweeps reading the
// `answered` record (delivered to an inbox under the record's subject, with
// a $JS.ACK reply): the old form of this test took such a copy for the
// GW's write and failed 5 times in 900 runs beside two CPU burners.
func TestAnsweredIsAcknowledgedBeforeTheAnswer(t *testing.T) {
	const held = "held."
	// Every request logged, however fast (the default).
	e := startGWHooked(t, func(c *gw.Config) { c.RequestLog = &gw.Durability{} },
		func(g *gw.GW) { g.HoldAnsweredAcks(held) })
	e.fakeRC("rc1", "", e.echo("rc1"))
	obs, err := nats.Connect(e.nc.ConnectedUrl())
	if err != nil {
		t.Fatal(err)
	}
	defer obs.Close()
	acks := make(chan *nats.Msg, 64)
	records := make(chan *nats.Msg, 64)
	replies := make(chan *nats.Msg, 64)
	if _, err := obs.ChanSubscribe(held+">", acks); err != nil {
		t.Fatal(err)
	}
	if _, err := obs.ChanSubscribe(e.s.RequestLogEntryPattern(), records); err != nil {
		t.Fatal(err)
	}
	var ack *nats.Msg // held, until passed on
	defer func() {
		// A failed check leaves the GW its acknowledgement, so that it
		// stops in time.
		if ack != nil {
			_ = obs.Publish(strings.TrimPrefix(ack.Subject, held), ack.Data)
			_ = obs.Flush()
		}
	}()
	for i := range 5 {
		reply := obs.NewInbox()
		sub, err := obs.ChanSubscribe(reply, replies)
		if err != nil {
			t.Fatal(err)
		}
		if err := obs.Flush(); err != nil {
			t.Fatal(err)
		}
		if err := obs.PublishRequest(e.s.GWAPI(subjects.APIPing), reply, []byte(`{"header":{"api":"ping"},"payload":{}}`)); err != nil {
			t.Fatal(err)
		}
		select {
		case ack = <-acks:
		case m := <-replies:
			t.Fatalf("request %d answered before its answered record was acknowledged: %q", i, m.Data)
		case <-time.After(wait):
			t.Fatalf("request %d: no acknowledgement of an answered record", i)
		}
		// Whatever the GW published before now, the server has taken in
		// once the GW's connection's round trip returns, and the observer
		// holds once its own returns.
		if err := e.nc.Flush(); err != nil {
			t.Fatal(err)
		}
		if err := obs.Flush(); err != nil {
			t.Fatal(err)
		}
		select {
		case m := <-replies:
			t.Fatalf("request %d answered while its answered record's acknowledgement was held: %q", i, m.Data)
		default:
		}
		// The record held is the GW's `answered` write: conditional, and
		// published by the GW before the acknowledgement came.
		answered := false
		for !answered {
			select {
			case m := <-records:
				if m.Header.Get(messages.HdrLogAnswered) == "" {
					continue // the entry's create
				}
				if m.Reply != ack.Subject || m.Header.Get(jetstream.ExpectedLastSubjSeqHeader) == "" {
					t.Fatalf("request %d: answered record without its condition or with another reply subject: %v %q (acknowledgement on %s)",
						i, m.Header, m.Reply, ack.Subject)
				}
				answered = true
			default:
				t.Fatalf("request %d: an acknowledgement on %s for no answered record the GW published", i, ack.Subject)
			}
		}
		if err := obs.Publish(strings.TrimPrefix(ack.Subject, held), ack.Data); err != nil {
			t.Fatal(err)
		}
		ack = nil
		select {
		case m := <-replies:
			if r, err := messages.DecodeResponse(m.Header, m.Data); err != nil || !r.Header.Status.IsOK() {
				t.Fatalf("request %d: answer %q (%v)", i, m.Data, err)
			}
		case <-time.After(wait):
			t.Fatalf("request %d: no answer once its answered record was acknowledged", i)
		}
		if err := sub.Unsubscribe(); err != nil {
			t.Fatal(err)
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
