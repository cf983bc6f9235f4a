package agg

import (
	"fmt"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/sg-project/sg/messages"
	"github.com/sg-project/sg/subjects"
)

func (e *env) cancel(id string) {
	e.t.Helper()
	h := nats.Header{}
	messages.SetString(h, messages.HdrRequestID, id)
	if err := e.nc.PublishMsg(&nats.Msg{Subject: subj.AggCancel("agg1"), Header: h}); err != nil {
		e.t.Fatal(err)
	}
}

// The RC's cancel (subjects.AggCancel, empty body): the request's partials and state
// are dropped, and nothing that comes later for it is kept or answered.
func TestCancelSubjectDropsTheRequest(t *testing.T) {
	e := newEnv(t, nil)
	markers := uint64(0)
	marker := func(id string) {
		t.Helper()
		markers++
		e.expect(expectation(id, subjects.APIPing, nil, ref(13, 1)))
		e.partial(okPartial(id, ref(13, 1), "dap0", []byte{0xc3}))
		if resp, _ := e.answer(); resp.Header.RequestID != id {
			t.Fatalf("answer for %s, want the marker %s", resp.Header.RequestID, id)
		}
	}
	e.expect(expectation("req1", subjects.APIPing, nil, ref(1, 1), ref(2, 1)))
	e.partial(okPartial("req1", ref(1, 1), "dap0", []byte{0xc3}))
	// Partials without an expectation yet are dropped too.
	e.partial(okPartial("req2", ref(1, 1), "dap0", []byte{0xc3}))
	marker("m1")
	if s := e.agg.Stats(); s.Pending != 2 {
		t.Fatalf("stats %+v", s)
	}
	// Cancels have their own subscription, handled beside the others: a
	// marker's answer does not say they were. Markers go round until the
	// stats show all three (a bounded number of round trips, no sleep).
	e.cancel("bad.id") // not a token: counted, ignored
	e.cancel("req1")
	e.cancel("req2")
	for i := 0; ; i++ {
		marker(fmt.Sprintf("m2-%d", i))
		s := e.agg.Stats()
		if s.Pending == 0 && s.Cancelled == 2 && s.Malformed == 1 {
			break
		}
		if i == 100 {
			t.Fatalf("the cancels not handled after %d round trips: stats %+v", i+1, s)
		}
	}
	// Late partials and expectations of the cancelled requests are discarded.
	e.partial(okPartial("req1", ref(2, 1), "dap1", []byte{0xc3}))
	e.expect(expectation("req2", subjects.APIPing, nil, ref(1, 1)))
	marker("m3")
	if s := e.agg.Stats(); s.Pending != 0 || s.Answered != markers {
		t.Fatalf("stats %+v", s)
	}
}
