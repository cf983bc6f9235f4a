package agg

import (
	"strings"
	"testing"
	"time"

	"github.com/sg-project/sg/messages"
	"github.com/sg-project/sg/subjects"
)

// TestAggTellsTheRCItTimedOut: when the Agg's own execution of a request
// times out (the expectation comes too late, or the deadline passes while
// partials are missing) it does not answer and tells the RC at once, with
// AggDone.TimedOut, so the RC answers its timeout message.
func TestAggTellsTheRCItTimedOut(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.PartialTTL = 40 * time.Millisecond })
	late := expectation("late", subjects.APIPing, nil, ref("a", 1))
	late.Deadline = time.Now().Add(-time.Millisecond).UnixNano()
	e.expect(late)
	d := e.aggDone()
	if d.RequestID != "late" || !d.TimedOut || d.Status.RC != messages.CodeTimeout || !strings.Contains(d.Status.AI, "expectation received past the deadline") {
		t.Fatalf("AggDone %+v", d)
	}

	x := expectation("slow", subjects.APIPing, nil, ref("a", 1), ref("b", 1))
	x.Deadline = time.Now().Add(50 * time.Millisecond).UnixNano()
	e.expect(x)
	e.partial(okPartial("slow", ref("a", 1), "dap0", []byte{0xc3}))
	d = e.aggDone() // the sweep finds the deadline passed with b missing
	if d.RequestID != "slow" || !d.TimedOut || !strings.Contains(d.Status.AI, "deadline passed before every partial came") {
		t.Fatalf("AggDone %+v", d)
	}
}
