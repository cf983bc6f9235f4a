package gw

import (
	"reflect"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/sg-project/sg/messages"
	"github.com/sg-project/sg/services/gw/core"
	"github.com/sg-project/sg/subjects"
	"github.com/sg-project/sg/test/natstest"
	"github.com/sg-project/sg/test/testlog"
)

// testRequestLog is GW gw1's request log on nc, on a stream as deployed
// (file storage), and its log writes, acknowledged on lw.acks.
func testRequestLog(t testing.TB, nc *nats.Conn) (*GW, *logWrites) {
	t.Helper()
	g, err := New(Config{ID: "gw1", NC: nc, Subjects: subjects.Default(), Log: zerolog.New(zerolog.NewTestWriter(t)),
		RequestLog: &Durability{MaxAge: time.Hour}})
	if err != nil {
		t.Fatal(err)
	}
	if g.rlog, err = g.openRequestLog(t.Context()); err != nil {
		t.Fatal(err)
	}
	lw := newLogWrites(g.rlog, nc.NewInbox()+".")
	sub, err := nc.ChanSubscribe(lw.prefix+"*", lw.acks)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	return g, lw
}

// writeAcked sends w and returns what its acknowledgement settles.
func writeAcked(t *testing.T, lw *logWrites, nc *nats.Conn, w core.WriteLog) (core.Event, *logJob) {
	t.Helper()
	if ev := lw.send(nc, logSend{write: w}, time.Now().UnixNano()); ev != nil {
		t.Fatalf("send %s: %#v", w.Op, ev)
	}
	ev, job, again := lw.acked(nextAck(t, lw))
	if again != nil {
		t.Fatalf("%s sent again: %#v", w.Op, again)
	}
	return ev, job
}

// The `answered` record is the smallest that keeps the log's rules: no
// entry (an empty body, closed to every sweep, this GW's and older ones),
// its writer, incarnation and drive in one header. Its writer, reading it
// back after a lost acknowledgement, knows it for its own; a peer's, or
// another incarnation's, it does not.
func TestAnsweredRecordIsSlim(t *testing.T) {
	nc := natstest.Connect(t, natstest.Start(t))
	g, lw := testRequestLog(t, nc)
	const id = "r1"
	subject := g.s.RequestLogEntry("gw1", id)
	entry := smallGetDataEntry(g, nc.NewInbox(), id, messages.LogOpen)
	ev, _ := writeAcked(t, lw, nc, core.WriteLog{ID: id, Subject: subject, Op: "create", Entry: entry})
	created, ok := ev.(core.LogWritten)
	if !ok {
		t.Fatalf("create: %#v", ev)
	}
	answered := entry
	answered.State, answered.By, answered.Drive = messages.LogAnswered, "gw1", 2
	write := core.WriteLog{ID: id, Subject: subject, Op: "answered", ExpectSeq: created.Seq, Entry: answered}
	if ev, _ := writeAcked(t, lw, nc, write); ev == nil {
		t.Fatal("answered: no event")
	} else if _, ok := ev.(core.LogWritten); !ok {
		t.Fatalf("answered: %#v", ev)
	}

	// What the stream holds: the header alone, with its TTL.
	rec, err := g.rlog.stream.GetLastMsgForSubject(t.Context(), subject)
	if err != nil {
		t.Fatal(err)
	}
	if len(rec.Data) != 0 || rec.Header.Get(messages.HdrLogAnswered) != "gw1 1 2" || rec.Header.Get(jetstream.MsgTTLHeader) != answeredTTL {
		t.Fatalf("answered record: %d bytes of body, %s %q, TTL %q; want none, \"gw1 1 2\", %s", len(rec.Data),
			messages.HdrLogAnswered, rec.Header.Get(messages.HdrLogAnswered), rec.Header.Get(jetstream.MsgTTLHeader), answeredTTL)
	}

	// A sweep leaves it: neither adopted nor poison.
	poison := len(g.rlog.poisoned)
	if err := g.rlog.scan(t.Context(), g.s.RequestLogEntryPattern(), func(ref logRef) {
		t.Errorf("sweep found %s open: %#v", ref.subject, ref.entry)
	}); err != nil {
		t.Fatal(err)
	}
	if len(g.rlog.poisoned) != poison {
		t.Fatal("the answered record counted as poison")
	}

	// Its acknowledgement lost, the write is sent again and conflicts with
	// itself: read back, it is this GW's own.
	ev, job := writeAcked(t, lw, nc, write)
	if ev != nil || job == nil {
		t.Fatalf("written twice: %#v, %#v", ev, job)
	}
	c, ok := g.rlog.readBack(job.readBack).(core.LogConflict)
	if !ok || c.Current == nil {
		t.Fatalf("read back: %#v", c)
	}
	want := messages.LogEntry{V: messages.RecoveryVersion, RequestID: id, State: messages.LogAnswered, GWID: "gw1",
		GWStarted: 1, Drive: 2, By: "gw1"}
	if !reflect.DeepEqual(*c.Current, want) {
		t.Fatalf("read back %#v, want %#v", *c.Current, want)
	}

	// A peer's answer (or another incarnation's) reads as that writer's.
	peer := answered
	peer.GWID, peer.By, peer.GWStarted = "gw2", "gw2", 7
	ev, job = writeAcked(t, lw, nc, core.WriteLog{ID: "r2", Subject: g.s.RequestLogEntry("gw1", "r2"), Op: "answered", Entry: peer})
	if _, ok := ev.(core.LogWritten); !ok {
		t.Fatalf("peer's answered: %#v, %#v", ev, job)
	}
	rb, _ := g.rlog.readBack(core.WriteLog{ID: "r2", Subject: g.s.RequestLogEntry("gw1", "r2")}).(core.LogConflict)
	if rb.Current == nil || rb.Current.GWID != "gw2" || rb.Current.GWStarted != 7 || rb.Current.RequestID != "r2" {
		t.Fatalf("peer's record read back as %#v", rb.Current)
	}
}

// An entry read back after a conflict that is not filed under its subject
// (its submission names another GW) is poison there as in a sweep: counted
// and logged with the request, and read as no entry, although it names this
// GW, its incarnation and the write's state and drive (a forged copy of the
// GW's own write must not count as written). One filed right reads back.
func TestMisfiledEntryReadBackIsPoison(t *testing.T) {
	nc := natstest.Connect(t, natstest.Start(t))
	g, lw := testRequestLog(t, nc)
	var logs testlog.Buffer
	g.log = zerolog.New(&logs)

	filed := pingEntry(g, nc.NewInbox(), "r4")
	w := core.WriteLog{ID: "r4", Subject: g.s.RequestLogEntry("gw1", "r4"), Op: "create", Entry: filed}
	if ev, _ := writeAcked(t, lw, nc, w); ev == nil {
		t.Fatal("create r4: no event")
	}
	if c, _ := g.rlog.readBack(w).(core.LogConflict); c.Current == nil || c.Current.RequestID != "r4" || c.Current.Submission.GWID != "gw1" ||
		c.Current.ClientReply != filed.ClientReply {
		t.Fatalf("an entry filed under its subject read back as %#v", c.Current)
	}

	misfiled := pingEntry(g, nc.NewInbox(), "r3")
	misfiled.Submission.GWID = "gw2" // filed under gw1's subject
	w = core.WriteLog{ID: "r3", Subject: g.s.RequestLogEntry("gw1", "r3"), Op: "create", Entry: misfiled}
	ev, _ := writeAcked(t, lw, nc, w)
	written, ok := ev.(core.LogWritten)
	if !ok {
		t.Fatalf("create r3: %#v", ev)
	}
	c, ok := g.rlog.readBack(w).(core.LogConflict)
	if !ok || c.Current != nil || c.Seq != written.Seq {
		t.Fatalf("a misfiled entry read back as %#v, want no entry at sequence %d", c, written.Seq)
	}
	if l := logs.Line("poison record skipped", `"request_id":"r3"`, `"stream":"request_log"`); l == "" {
		t.Fatalf("the misfiled entry was not logged as poison with its request:\n%s", logs.String())
	}
}

// pingEntry is GW gw1's (incarnation 1) open entry for ping request id.
func pingEntry(g *GW, inbox, id string) messages.LogEntry {
	return messages.LogEntry{V: messages.RecoveryVersion, RequestID: id, State: messages.LogOpen, GWID: "gw1", GWStarted: 1,
		ClientReply: inbox + "." + id, Caller: inbox, API: subjects.APIPing, Content: messages.ContentJSON,
		Submission: messages.RCSubmission{V: messages.RCVersion, RequestID: id, GWID: "gw1",
			Header: messages.RequestHeader{API: subjects.APIPing}, ReplyTo: g.s.GWAnswer("gw1", id),
			Content: messages.ContentJSON, Deadline: 1, ReceivedAt: 1}}
}
