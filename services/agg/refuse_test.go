package agg

import (
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/sg-project/sg/messages"
	"github.com/sg-project/sg/subjects"
)

// An expectation whose body does not decode, whose headers name the request
// and its RC: refused to that RC, BAD_REQUEST. A partial that does not decode,
// of a portion and attempt its request's expectation counts on: refused to
// the RC the expectation named, INTERNAL (a DAP's output is garbage). Headers
// that name no valid RC, a partial nobody counts on (even one whose headers
// name an RC): nothing is sent.
func TestMalformedMessagesRefusedToTheRC(t *testing.T) {
	e := newEnv(t, nil)
	refusals := subscribe(t, e.nc, subj.RCRefused("rc1"))
	anyRC := subscribe(t, e.nc, "sg.rc.*.refused")
	send := func(subject string, r messages.Routing) {
		h := nats.Header{}
		r.Write(h)
		if err := e.nc.PublishMsg(&nats.Msg{Subject: subject, Header: h, Data: []byte{0xc1}}); err != nil {
			t.Fatal(err)
		}
	}
	send(subj.AggExpect("agg1"), messages.Routing{RequestID: "req1", RCID: "rc.>"})
	send(subj.AggExpect("agg1"), messages.Routing{RequestID: "req1"}) // an older RC's
	send(subj.AggExpect("agg1"), messages.Routing{RequestID: "req1", RCID: "rc1"})
	f := nextRefusal(t, refusals)
	if f.RequestID != "req1" || f.Service != subjects.ServiceAgg || f.ServiceID != "agg1" || f.Code != messages.CodeBadRequest ||
		!strings.Contains(f.Reason, "expectation") {
		t.Fatalf("refusal %+v", f)
	}
	if m, err := anyRC.NextMsg(wait); err != nil || m.Subject != subj.RCRefused("rc1") {
		t.Fatalf("first refusal on %v (%v): the bad RC ids were published on", m, err)
	}

	// req2's expectation names rc1: a garbage partial of it is refused there.
	e.expect(expectation("req2", subjects.APIPing, nil, ref(1, 1)))
	waitChanged(t, e.agg, func() bool { return e.agg.Stats().Expectations == 1 }, func() string { return "req2's expectation not taken" })
	send(subj.AggPartial("agg1"), messages.Routing{RequestID: "req3", PortionID: 1, Attempt: 1}) // unknown: not attributed
	// Nobody counts on it, whatever RC its own headers name: the Agg does
	// not vouch for it (review4).
	send(subj.AggPartial("agg1"), messages.Routing{RequestID: "req3", RCID: "rc1", PortionID: 1, Attempt: 1})
	send(subj.AggPartial("agg1"), messages.Routing{RequestID: "req2", PortionID: 26, Attempt: 1}) // not counted on: no loss
	send(subj.AggPartial("agg1"), messages.Routing{RequestID: "req2", PortionID: 1})              // attempt 0: superseded, say
	send(subj.AggPartial("agg1"), messages.Routing{RequestID: "req2", PortionID: 1, Attempt: 1})
	f = nextRefusal(t, refusals)
	if f.RequestID != "req2" || f.Code != messages.CodeInternal || !strings.Contains(f.Reason, "partial result of portion 1:") {
		t.Fatalf("refusal %+v", f)
	}

	// req4 counts on portion 2: its chunked partial breaks (the chunks add
	// up to more than announced), refused INTERNAL.
	e.expect(expectation("req4", subjects.APIPing, nil, ref(2, 0)))
	waitChanged(t, e.agg, func() bool { return e.agg.Stats().Expectations == 2 }, func() string { return "req4's expectation not taken" })
	for i, data := range []string{"ab", "abc"} {
		h := nats.Header{}
		messages.Routing{RequestID: "req4", PortionID: 2}.Write(h)
		h.Set(messages.HdrChunkStream, "t1")
		h.Set(messages.HdrChunkIndex, strconv.Itoa(i))
		h.Set(messages.HdrChunkCount, "2")
		h.Set(messages.HdrChunkTotal, "4")
		if err := e.nc.PublishMsg(&nats.Msg{Subject: subj.AggPartial("agg1"), Header: h, Data: []byte(data)}); err != nil {
			t.Fatal(err)
		}
	}
	f = nextRefusal(t, refusals)
	if f.RequestID != "req4" || f.Code != messages.CodeInternal || !strings.Contains(f.Reason, "chunked partial result of portion 2") {
		t.Fatalf("refusal %+v", f)
	}
	// The refusal is published before it is counted: wait for the
	// partial's callback to return (Agg.changed) rather than read at once.
	waitChanged(t, e.agg, func() bool { s := e.agg.Stats(); return s.Malformed == 9 && s.RefusalsSent == 3 },
		func() string { return fmt.Sprintf("stats %+v, want 9 malformed and 3 refusals sent", e.agg.Stats()) })
}

func nextRefusal(t *testing.T, sub *nats.Subscription) messages.Refusal {
	t.Helper()
	m, err := sub.NextMsg(wait)
	if err != nil {
		t.Fatalf("no refusal within %s: %v", wait, err)
	}
	f, err := messages.DecodeValid[messages.Refusal](m.Data)
	if err != nil {
		t.Fatal(err)
	}
	return f
}
