package core

import (
	"strconv"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/sg-project/sg/messages"
	"github.com/sg-project/sg/subjects"
)

// allocBudgetGWCore is the most a small request may allocate in the GW core,
// from arrival to its answer, with the request log on: arrive (the create and
// the first drive), the create acknowledged, the answer (the `answered`
// write), its acknowledgement (the answer goes out). Measured 18 (ninth session);
// the budget leaves room for a field or two, not for a new per-request
// structure.
const allocBudgetGWCore = 22

// smallRequestGW runs one small request through c at now and reports whether
// it was answered.
func smallRequestGW(c *Core, now int64, n int, reply string, answer AnswerChunk) bool {
	id := "q-" + strconv.Itoa(n)
	sub := messages.RCSubmission{V: messages.RCVersion, GWID: "gw-1", Header: messages.RequestHeader{API: subjects.APIGetData},
		ReplyTo: reply, Content: messages.ContentMsgpack, Deadline: now + 5000*ms, ReceivedAt: now}
	c.Step(Arrived{At: now, Req: Request{ID: id, ClientID: "k", Caller: "_INBOX.a", Reply: "_INBOX.a.1", API: subjects.APIGetData,
		Content: messages.ContentMsgpack, Sub: sub, Received: now, Deadline: now + 5000*ms}})
	c.Step(LogWritten{At: now, ID: id, Seq: uint64(2*n - 1)})
	answer.At, answer.ID = now, id
	answer.Header.Set(messages.HdrRequestID, id)
	c.Step(answer)
	answered := false
	for _, cmd := range c.Step(LogWritten{At: now, ID: id, Seq: uint64(2 * n)}) {
		if _, ok := cmd.(Answer); ok {
			answered = true
		}
	}
	return answered
}

func newBenchCore() *Core {
	s := subjects.Default()
	c := New(Config{Self: "gw-1", Incarnation: 1, Start: t0, TimeoutMargin: margin, AnnounceEvery: announce,
		DeadAfter: deadAfter, Logged: true, LogRetry: logRetry, LogSubject: s.RequestLogEntry, AnswerSubject: s.GWAnswer})
	c.Step(RCAnnounced{At: t0, RC: RCInfo{ID: "rc-1", StartedAt: 1, Period: announce}})
	return c
}

// A small request's allocations in the GW core do not grow past the budget.
func TestAllocBudgetSmallRequestGWCore(t *testing.T) {
	c := newBenchCore()
	now, n := t0, 0
	answer := AnswerChunk{Header: nats.Header{}, Data: []byte("answer")}
	reply := subjects.Default().GWAnswer("gw-1", "q")
	answered := 0
	allocs := testing.AllocsPerRun(200, func() {
		n++
		now += ms
		if smallRequestGW(c, now, n, reply, answer) {
			answered++
		}
	})
	t.Logf("allocations per small request in the GW core: %.0f (budget %d)", allocs, allocBudgetGWCore)
	if answered != n || !c.Idle() {
		t.Fatalf("%d of %d requests answered, core idle %v", answered, n, c.Idle())
	}
	if allocs > allocBudgetGWCore {
		t.Fatalf("a small request allocates %.0f times in the GW core, budget %d", allocs, allocBudgetGWCore)
	}
}

// BenchmarkSmallRequestGWCore is the GW core's share of a small request with
// the request log on (go test ./services/gw/core -run '^$' -bench SmallRequestGWCore).
func BenchmarkSmallRequestGWCore(b *testing.B) {
	c := newBenchCore()
	now, n := t0, 0
	answer := AnswerChunk{Header: nats.Header{}, Data: []byte("answer")}
	reply := subjects.Default().GWAnswer("gw-1", "q")
	b.ReportAllocs()
	for b.Loop() {
		n++
		now += ms
		if !smallRequestGW(c, now, n, reply, answer) {
			b.Fatal("not answered")
		}
	}
}
