package agg

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sg-project/sg/messages"
	"github.com/sg-project/sg/subjects"
)

// TestAggTellsTheRCItTimedOut: when the Agg's own execution of a request
// times out (the expectation comes too late, or the deadline passes while
// partials are missing) it does not answer and tells the RC at once, with
// AggDone.TimedOut, so the RC answers its timeout message. Such a notice
// does not wait for others (Config.DoneDelay, a minute here).
func TestAggTellsTheRCItTimedOut(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.PartialTTL = 40 * time.Millisecond; c.DoneDelay = time.Minute })
	late := expectation("late", subjects.APIPing, nil, ref(1, 1))
	late.Deadline = time.Now().Add(-time.Millisecond).UnixNano()
	e.expect(late)
	d := e.aggDone()
	if d.RequestID != "late" || !d.TimedOut || d.Status.RC != messages.CodeTimeout || !strings.Contains(d.Status.AI, "expectation received past the deadline") {
		t.Fatalf("AggDone %+v", d)
	}

	x := expectation("slow", subjects.APIPing, nil, ref(1, 1), ref(2, 1))
	x.Deadline = time.Now().Add(50 * time.Millisecond).UnixNano()
	e.expect(x)
	e.partial(okPartial("slow", ref(1, 1), "dap0", []byte{0xc3}))
	d = e.aggDone() // the sweep finds the deadline passed with b missing
	if d.RequestID != "slow" || !d.TimedOut || !strings.Contains(d.Status.AI, "deadline passed before every partial came") {
		t.Fatalf("AggDone %+v", d)
	}
}

// The done notices of requests answered within Config.DoneDelay of each
// other go to their RC in one AggDone, each saying how long it was held;
// those still held when the Agg stops go before it stops.
func TestAggDoneNoticesGoTogether(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.DoneDelay = time.Minute })
	ids := []string{"q1", "q2", "q3"}
	for _, id := range ids {
		x := expectation(id, subjects.APIPing, nil, ref(1, 1))
		x.Deadline = time.Now().Add(10 * time.Minute).UnixNano() // far: a notice near its deadline goes at once
		e.expect(x)
		e.partial(okPartial(id, ref(1, 1), "dap0", []byte{0xc3}))
		if resp, _ := e.answer(); resp.Header.RequestID != id || !resp.Header.Status.IsOK() {
			t.Fatalf("answer %+v, want %s answered", resp.Header, id)
		}
	}
	// The notice is held just after the answer went out: the stop's flush
	// takes the notices held by then (a later one goes after the stop).
	waitHeldNotices(t, e.agg, "rc1", len(ids))
	e.stop()
	m, err := e.done.NextMsg(wait)
	if err != nil {
		t.Fatal(err)
	}
	d, err := messages.DecodeValid[messages.AggDone](m.Data)
	if err != nil {
		t.Fatal(err)
	}
	if d.AggID != "agg1" || len(d.Done) != len(ids) {
		t.Fatalf("AggDone %+v, want one notice for %v", d, ids)
	}
	for i, x := range d.Done {
		if x.RequestID != ids[i] || !x.Status.IsOK() || x.TimedOut || x.Held <= 0 {
			t.Fatalf("entry %d: %+v, want %s answered and held a while", i, x, ids[i])
		}
	}
}

// A notice whose request's deadline is nearer than twice the delay goes at
// once (the RC answers TIMEOUT at the deadline unless it has come), and an
// answered request's notice carries its return code, not the ai (a DAP's may
// be 64 KiB: a batch of them would pass the max payload).
func TestAggDoneNearTheDeadlineGoesAtOnce(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.DoneDelay = time.Minute })
	x := expectation("near", subjects.APIPing, nil, ref(1, 1)) // deadline in a minute: within 2 x DoneDelay
	e.expect(x)
	failed := okPartial("near", ref(1, 1), "dap0", nil)
	failed.Status = messages.Errorf(messages.CodeApp, messages.CodeErr, "%s", strings.Repeat("x", 60<<10))
	e.partial(failed)
	if resp, _ := e.answer(); resp.Header.Status.RC != messages.CodeApp {
		t.Fatalf("answer %+v, want the DAP's APP", resp.Header)
	}
	d := e.aggDone() // within wait, not the minute's delay
	if d.RequestID != "near" || d.TimedOut || d.Status.RC != messages.CodeApp || d.Status.AI != "" {
		t.Fatalf("AggDone %+v, want near answered APP without its ai", d)
	}
}

// With the Agg running, the notices held go when DoneDelay has passed since
// the first, together, without a stop or an urgent one to push them.
func TestAggDoneNoticesGoAfterTheDelay(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.DoneDelay = 2 * time.Second })
	ids := []string{"d1", "d2"}
	start := time.Now()
	for _, id := range ids {
		x := expectation(id, subjects.APIPing, nil, ref(1, 1))
		x.Deadline = time.Now().Add(10 * time.Minute).UnixNano() // far: not urgent
		e.expect(x)
		e.partial(okPartial(id, ref(1, 1), "dap0", []byte{0xc3}))
		if resp, _ := e.answer(); resp.Header.RequestID != id {
			t.Fatalf("answer %+v, want %s", resp.Header, id)
		}
	}
	m, err := e.done.NextMsg(wait)
	if err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took < 2*time.Second {
		t.Fatalf("AggDone after %v, before the delay of 2s", took)
	}
	d, err := messages.DecodeValid[messages.AggDone](m.Data)
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Done) != len(ids) || d.Done[0].RequestID != "d1" || d.Done[1].RequestID != "d2" || d.Done[0].Held < d.Done[1].Held {
		t.Fatalf("AggDone %+v, want d1 and d2 together, d1 held longer", d)
	}
}

// A full batch (messages.MaxAggDoneBatch notices for one RC) goes at once,
// without waiting for DoneDelay, and fits the max payload; the next notice
// starts a new batch that waits.
func TestAggDoneFullBatchGoesAtOnce(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.DoneDelay = time.Minute })
	far := time.Now().Add(10 * time.Minute).UnixNano()
	for i := range messages.MaxAggDoneBatch + 1 {
		x := expectation(fmt.Sprintf("b%03d", i), subjects.APIPing, nil, ref(1, 1))
		x.Deadline = far // not urgent
		e.agg.tellDone(&x, messages.Status{RC: messages.CodeOK, AI: strings.Repeat("x", 1<<10)})
	}
	m, err := e.done.NextMsg(wait) // within wait, not the minute's delay
	if err != nil {
		t.Fatalf("no AggDone for a full batch: %v", err)
	}
	if len(m.Data) > int(e.nc.MaxPayload()) {
		t.Fatalf("a full batch is %d bytes, over the max payload %d", len(m.Data), e.nc.MaxPayload())
	}
	d, err := messages.DecodeValid[messages.AggDone](m.Data)
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Done) != messages.MaxAggDoneBatch || d.Done[0].RequestID != "b000" || d.Done[len(d.Done)-1].RequestID != fmt.Sprintf("b%03d", messages.MaxAggDoneBatch-1) {
		t.Fatalf("AggDone of %d entries (%s..), want the first %d", len(d.Done), d.Done[0].RequestID, messages.MaxAggDoneBatch)
	}
	if m, err := e.done.NextMsg(50 * time.Millisecond); err == nil {
		t.Fatalf("the notice after a full batch went at once (%d bytes); want it held", len(m.Data))
	}
	e.stop() // the held one goes before the Agg stops
	m, err = e.done.NextMsg(wait)
	if err != nil {
		t.Fatal(err)
	}
	if d, err = messages.DecodeValid[messages.AggDone](m.Data); err != nil || len(d.Done) != 1 || d.Done[0].RequestID != fmt.Sprintf("b%03d", messages.MaxAggDoneBatch) {
		t.Fatalf("AggDone at the stop %+v (%v), want the last notice alone", d, err)
	}
}

// waitHeldNotices waits (bounded) until the Agg holds n done notices for rc:
// each is added just after its answer was published, so a caller that has
// read the answer may be ahead of it.
func waitHeldNotices(t *testing.T, a *Agg, rc string, n int) {
	t.Helper()
	held := 0
	waitChanged(t, a, func() bool {
		a.dones.mu.Lock()
		defer a.dones.mu.Unlock()
		held = len(a.dones.byRC[rc])
		return held >= n
	}, func() string {
		return fmt.Sprintf("the Agg holds %d done notices for %s after %v, want %d", held, rc, wait, n)
	})
}
