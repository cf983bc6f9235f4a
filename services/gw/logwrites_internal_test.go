package gw

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/sg-project/sg/messages"
	"github.com/sg-project/sg/services/cputime"
	"github.com/sg-project/sg/services/gw/core"
	"github.com/sg-project/sg/subjects"
	"github.com/sg-project/sg/test/natstest"
)

// testWait bounds every wait for an event.
const testWait = 10 * time.Second

func testLogWrites(t *testing.T) (*logWrites, *nats.Conn) {
	t.Helper()
	nc := natstest.Connect(t, natstest.Start(t))
	g, err := New(Config{ID: "gw1", NC: nc, Subjects: subjects.Default(), Log: zerolog.New(zerolog.NewTestWriter(t))})
	if err != nil {
		t.Fatal(err)
	}
	lw := newLogWrites(g.newRequestLog(nil, nil), nc.NewInbox()+".")
	sub, err := nc.ChanSubscribe(lw.prefix+"*", lw.acks)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	return lw, nc
}

// Acknowledgements come from the network: whatever arrives on the ack
// subjects is read within a bound and never taken for a write it is not.
func TestDecodeAckHostile(t *testing.T) {
	lw, _ := testLogWrites(t)
	stream := lw.l.g.s.RequestLogStream()
	for _, c := range []struct {
		name    string
		h       nats.Header
		data    string
		seq     uint64
		errCode jetstream.ErrorCode
	}{
		{name: "ack", data: `{"stream":"` + stream + `","seq":7}`, seq: 7},
		{name: "duplicate", data: `{"stream":"` + stream + `","seq":7,"duplicate":true}`, seq: 7},
		{name: "sequence 0", data: `{"stream":"` + stream + `","seq":0}`},
		{name: "negative", data: `{"stream":"` + stream + `","seq":-7}`},
		{name: "signed", data: `{"stream":"` + stream + `","seq":+7}`},
		{name: "overflow", data: `{"stream":"` + stream + `","seq":99999999999999999999}`},
		{name: "unclosed", data: `{"stream":"` + stream + `","seq":7`},
		{name: "closed twice", data: `{"stream":"` + stream + `","seq":7}}`},
		{name: "stream prefix", data: `{"stream":"` + stream + `X","seq":7}`},
		{name: "other stream", data: `{"stream":"X","seq":7}`},
		{name: "no sequence", data: `{"stream":"` + stream + `"}`},
		{name: "not JSON", data: `{"stream":`},
		{name: "empty", data: ``},
		{name: "huge", data: `{"stream":"` + stream + `","seq":7,"x":"` + strings.Repeat("a", maxAckBytes) + `"}`},
		{name: "conflict", data: `{"error":{"code":400,"err_code":10071,"description":"wrong last sequence: 3"}}`,
			errCode: jetstream.JSErrCodeStreamWrongLastSequence},
		{name: "no responders", h: nats.Header{"Status": []string{"503"}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			seq, err := lw.l.decodeAck(&nats.Msg{Header: c.h, Data: []byte(c.data)})
			if c.seq != 0 {
				if err != nil || seq != c.seq {
					t.Fatalf("got %d, %v; want %d", seq, err, c.seq)
				}
				return
			}
			if err == nil {
				t.Fatalf("accepted as sequence %d", seq)
			}
			var apiErr *jetstream.APIError
			if c.errCode != 0 && (!errors.As(err, &apiErr) || apiErr.ErrorCode != c.errCode) {
				t.Fatalf("error %v, want the server's code %d", err, c.errCode)
			}
		})
	}
}

// A write whose acknowledgement does not come fails at its deadline (the
// core writes it again), not before; an acknowledgement that comes after
// that, or for no write under way, settles nothing.
func TestLogWriteWithoutAcknowledgementFails(t *testing.T) {
	lw, nc := testLogWrites(t)
	// A silent "stream": interest on the subject, no acknowledgement.
	silent := natstest.Subscribe(t, nc, "log.silent")
	w := core.WriteLog{ID: "r1", Subject: "log.silent", Op: "answered",
		Entry: messages.LogEntry{V: 1, RequestID: "r1", State: messages.LogAnswered}}
	at := time.Now().UnixNano()
	if ev := lw.send(nc, logSend{write: w}, at); ev != nil {
		t.Fatalf("send: %#v", ev)
	}
	m, err := silent.NextMsg(testWait)
	if err != nil {
		t.Fatal(err)
	}
	if got := m.Header.Get(jetstream.ExpectedLastSubjSeqHeader); got != "0" {
		t.Fatalf("written without its condition: %q", got)
	}
	if lw.busy() != 1 {
		t.Fatalf("%d writes under way, want 1", lw.busy())
	}
	var evs []core.Event
	collect := func(ev core.Event) { evs = append(evs, ev) }
	lw.expire(at+int64(lw.timeout)-1, collect)
	if len(evs) != 0 || lw.busy() != 1 {
		t.Fatalf("failed before its deadline: %#v", evs)
	}
	lw.expire(at+int64(lw.timeout), collect)
	if len(evs) != 1 || lw.busy() != 0 {
		t.Fatalf("events %#v, %d under way; want one failure", evs, lw.busy())
	}
	if f, ok := evs[0].(core.LogFailed); !ok || f.ID != "r1" {
		t.Fatalf("event %#v, want LogFailed for r1", evs[0])
	}
	// The acknowledgement arrives late, and one for a token never used.
	ack := []byte(`{"stream":"` + lw.l.g.s.RequestLogStream() + `","seq":3}`)
	for _, subj := range []string{m.Reply, lw.prefix + "forged"} {
		if err := nc.Publish(subj, ack); err != nil {
			t.Fatal(err)
		}
		select {
		case a := <-lw.acks:
			if ev, job, again := lw.acked(a); ev != nil || job != nil || again != nil {
				t.Fatalf("acknowledgement on %s settled %#v, %#v, %#v", subj, ev, job, again)
			}
		case <-time.After(testWait):
			t.Fatal("acknowledgement not delivered")
		}
	}
}

// An acknowledgement settles its own write: written with the sequence,
// or read back after a conflict.
func TestLogWriteAcknowledged(t *testing.T) {
	lw, nc := testLogWrites(t)
	silent := natstest.Subscribe(t, nc, "log.*")
	at := time.Now().UnixNano()
	for _, id := range []string{"a", "b"} {
		w := core.WriteLog{ID: id, Subject: "log." + id, Op: "create", ExpectSeq: 0,
			Entry: messages.LogEntry{V: 1, RequestID: id, State: messages.LogOpen}}
		if ev := lw.send(nc, logSend{write: w}, at); ev != nil {
			t.Fatalf("send: %#v", ev)
		}
	}
	replies := map[string]string{}
	for range 2 {
		m, err := silent.NextMsg(testWait)
		if err != nil {
			t.Fatal(err)
		}
		replies[m.Subject] = m.Reply
	}
	// b conflicts, a lands: answered out of order.
	for _, r := range []struct{ to, data string }{
		{replies["log.b"], `{"error":{"code":400,"err_code":10071,"description":"wrong last sequence"}}`},
		{replies["log.a"], `{"stream":"` + lw.l.g.s.RequestLogStream() + `","seq":9}`},
	} {
		if err := nc.Publish(r.to, []byte(r.data)); err != nil {
			t.Fatal(err)
		}
	}
	for _, want := range []string{"b", "a"} {
		ev, job, again := lw.acked(nextAck(t, lw))
		if again != nil {
			t.Fatalf("ack of %s: sent again %#v", want, again)
		}
		switch want {
		case "b":
			if ev != nil || job == nil || job.readBack.ID != "b" {
				t.Fatalf("conflict of b: %#v, %#v; want a read back", ev, job)
			}
		case "a":
			if w, ok := ev.(core.LogWritten); !ok || w.ID != "a" || w.Seq != 9 || job != nil {
				t.Fatalf("ack of a: %#v, %#v", ev, job)
			}
		}
	}
	if lw.busy() != 0 || len(lw.order) != 0 {
		t.Fatalf("%d writes under way, %d tokens kept after all were settled", lw.busy(), len(lw.order))
	}
}

// An `answered` write carries the entry's TTL, so that nothing closes it
// after the answer; a stream that refuses TTLs gets it again without one,
// and from then on entries are closed after the answer (core.Purge).
func TestAnsweredWriteExpires(t *testing.T) {
	lw, nc := testLogWrites(t)
	silent := natstest.Subscribe(t, nc, "log.*")
	at := time.Now().UnixNano()
	answered := func(id string) core.WriteLog {
		return core.WriteLog{ID: id, Subject: "log." + id, Op: "answered", ExpectSeq: 4,
			Entry: messages.LogEntry{V: 1, RequestID: id, State: messages.LogAnswered}}
	}
	next := func() *nats.Msg {
		t.Helper()
		m, err := silent.NextMsg(testWait)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	// Two answered writes go out with the TTL before the first refusal comes.
	var sent []*nats.Msg
	for _, id := range []string{"a", "b"} {
		if ev := lw.send(nc, logSend{write: answered(id)}, at); ev != nil {
			t.Fatalf("send: %#v", ev)
		}
		m := next()
		if ttl := m.Header.Get(jetstream.MsgTTLHeader); ttl != AnsweredTTL.String() {
			t.Fatalf("answered write's TTL %q, want %s", ttl, AnsweredTTL)
		}
		sent = append(sent, m)
	}
	if !lw.expires() {
		t.Fatal("an answered entry with a TTL is closed again")
	}
	// The stream takes no TTLs: nothing was written, each write goes again
	// at once (the second's refusal is no failure to retry a LogRetry later).
	for i, id := range []string{"a", "b"} {
		if err := nc.Publish(sent[i].Reply, []byte(`{"error":{"code":400,"err_code":10166,"description":"per-message TTL is disabled"}}`)); err != nil {
			t.Fatal(err)
		}
		ev, job, again := lw.acked(nextAck(t, lw))
		if ev != nil || job != nil || again == nil || again.write.ID != id {
			t.Fatalf("TTL refused for %s: %#v, %#v, %#v; want the write again", id, ev, job, again)
		}
		if lw.expires() {
			t.Fatal("after a refused TTL, answered entries are not closed")
		}
		if ev := lw.send(nc, *again, at); ev != nil {
			t.Fatalf("send again: %#v", ev)
		}
		if m := next(); m.Header.Get(jetstream.MsgTTLHeader) != "" || m.Header.Get(jetstream.ExpectedLastSubjSeqHeader) != "4" {
			t.Fatalf("write again: headers %v, want the condition and no TTL", m.Header)
		}
	}
}

// nextAck is the next acknowledgement the loop would read, waited for with a
// bound.
func nextAck(t testing.TB, lw *logWrites) *nats.Msg {
	t.Helper()
	select {
	case a := <-lw.acks:
		return a
	case <-time.After(testWait):
		t.Fatal("acknowledgement not delivered")
		return nil
	}
}

// sendCreate sends a create for id and returns it as the stream's subject
// (silent) got it.
func sendCreate(t *testing.T, lw *logWrites, nc *nats.Conn, silent *nats.Subscription, id string, at int64) *nats.Msg {
	t.Helper()
	w := core.WriteLog{ID: id, Subject: "log." + id, Op: "create",
		Entry: messages.LogEntry{V: 1, RequestID: id, State: messages.LogOpen}}
	if ev := lw.send(nc, logSend{write: w}, at); ev != nil {
		t.Fatalf("send %s: %#v", id, ev)
	}
	m, err := silent.NextMsg(testWait)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// A reply subject names one write, ever: not one whose write was
// acknowledged, nor one whose write timed out, is used again, so an
// acknowledgement that comes twice or late settles nothing.
func TestLogWriteReplySubjects(t *testing.T) {
	lw, nc := testLogWrites(t)
	silent := natstest.Subscribe(t, nc, "log.*")
	ack := func(seq int) []byte {
		return fmt.Appendf(nil, `{"stream":%q,"seq":%d}`, lw.l.g.s.RequestLogStream(), seq)
	}
	at := time.Now().UnixNano()
	send := func(id string) *nats.Msg { return sendCreate(t, lw, nc, silent, id, at) }
	a := send("a")
	if err := nc.Publish(a.Reply, ack(1)); err != nil {
		t.Fatal(err)
	}
	if ev, _, _ := lw.acked(nextAck(t, lw)); ev == nil {
		t.Fatal("a not settled by its acknowledgement")
	}
	b, c := send("b"), send("c")
	var failed []string
	lw.expire(at+int64(lw.timeout), func(ev core.Event) {
		if f, ok := ev.(core.LogFailed); ok {
			failed = append(failed, f.ID)
		}
	})
	if len(failed) != 2 || lw.busy() != 0 || len(lw.order) != 0 {
		t.Fatalf("failed %v, %d under way, %d in order; want b and c failed, nothing kept", failed, lw.busy(), len(lw.order))
	}
	d := send("d")
	seen := map[string]string{}
	for _, m := range []*nats.Msg{a, b, c, d} {
		if prev, dup := seen[m.Reply]; dup {
			t.Fatalf("reply subject %s used by two writes (%s and %s)", m.Reply, prev, m.Subject)
		}
		seen[m.Reply] = m.Subject
	}
	// a's second acknowledgement and b's and c's late ones settle nothing;
	// d's own settles d.
	for _, r := range []struct {
		to   string
		want string
	}{{a.Reply, ""}, {b.Reply, ""}, {c.Reply, ""}, {d.Reply, "d"}} {
		if err := nc.Publish(r.to, ack(2)); err != nil {
			t.Fatal(err)
		}
		ev, job, again := lw.acked(nextAck(t, lw))
		w, ok := ev.(core.LogWritten)
		switch {
		case r.want == "" && (ev != nil || job != nil || again != nil):
			t.Fatalf("late acknowledgement on %s settled %#v, %#v, %#v", r.to, ev, job, again)
		case r.want != "" && (!ok || w.ID != r.want):
			t.Fatalf("acknowledgement on %s: %#v, want %s written", r.to, ev, r.want)
		}
	}
}

// smallGetDataArgs: a small getData's arguments, as many bytes (made once:
// BenchmarkLogWrites measures the writes, not its own allocations).
var smallGetDataArgs = make([]byte, 120)

// smallGetDataEntry is request id's entry in state st, of a small getData's
// size (~560 bytes encoded), as GW gw1 (incarnation 1) writes it.
func smallGetDataEntry(g *GW, inbox, id string, st messages.LogState) messages.LogEntry {
	e := messages.LogEntry{V: messages.RecoveryVersion, RequestID: id, State: st, GWID: "gw1", GWStarted: 1,
		ClientReply: inbox + "." + id, Caller: inbox, API: subjects.APIGetData, Content: messages.ContentMsgpack,
		Submission: messages.RCSubmission{V: messages.RCVersion, RequestID: id, GWID: "gw1", Args: smallGetDataArgs,
			ReplyTo: g.s.GWAnswer("gw1", id), Content: messages.ContentMsgpack, Deadline: 1, ReceivedAt: 1},
		RCID: "rc1", RCStarted: 1}
	if st != messages.LogOpen {
		e.By = "gw1"
	}
	return e
}

// BenchmarkLogWrites: a request's two log writes (the entry, then `answered`
// on its sequence), 50 requests under way as with sg bench's 50 clients, on
// the stream as deployed (file storage) over an in-process connection: the
// request log's own cost, apart from the rest of the path. cpu-µs/req is the
// whole process (GW side and NATS server), which a loaded machine blurs less
// than the time.
func BenchmarkLogWrites(b *testing.B) {
	nc, err := nats.Connect("", nats.InProcessServer(natstest.Start(b)))
	if err != nil {
		b.Fatal(err)
	}
	defer nc.Close()
	g, lw := testRequestLog(b, nc)
	inbox := nc.NewInbox()
	write := func(id, op string, st messages.LogState, seq uint64) {
		e := smallGetDataEntry(g, inbox, id, st)
		w := core.WriteLog{ID: id, Subject: g.s.RequestLogEntry("gw1", id), Op: op, ExpectSeq: seq, Entry: e}
		if ev := lw.send(nc, logSend{write: w}, time.Now().UnixNano()); ev != nil {
			b.Fatalf("send: %#v", ev)
		}
	}
	const window = 50
	answered := map[string]bool{} // writes under way: true once `answered` is
	started, done := 0, 0
	start := func() {
		id := fmt.Sprintf("r%09d", started)
		started++
		answered[id] = false
		write(id, "create", messages.LogOpen, 0)
	}
	b.ReportAllocs()
	b.ResetTimer()
	cpu0, _ := cputime.Process()
	out0 := nc.Stats().OutBytes
	for range min(window, b.N) {
		start()
	}
	for done < b.N {
		ev, _, _ := lw.acked(nextAck(b, lw))
		w, ok := ev.(core.LogWritten)
		if !ok {
			b.Fatalf("acknowledgement: %#v", ev)
		}
		if !answered[w.ID] {
			answered[w.ID] = true
			write(w.ID, "answered", messages.LogAnswered, w.Seq)
			continue
		}
		delete(answered, w.ID)
		if done++; started < b.N {
			start()
		}
	}
	b.StopTimer()
	cpu1, _ := cputime.Process()
	b.ReportMetric(float64(cpu1-cpu0)/float64(time.Microsecond)/float64(b.N), "cpu-µs/req")
	// What the GW publishes per request: both writes, headers and all.
	b.ReportMetric(float64(nc.Stats().OutBytes-out0)/float64(b.N), "out-B/req")
}
