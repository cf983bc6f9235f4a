package dap

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/sg-project/sg/messages"
	"github.com/sg-project/sg/subjects"
	"github.com/sg-project/sg/test/natstest"
)

type ctxKey struct{}

// A slot's deadline timer is reused from portion to portion: its fire for
// one portion stops that portion and answers it TIMEOUT at once (before the
// Source returned), and a late fire (armed for an earlier portion) leaves
// the next portion alone. The portion's context ends with the portion.
func TestSlotDeadlineIsThePortionsOwn(t *testing.T) {
	nc := startNATS(t, 0)
	completions := subscribe(t, nc, subjects.Default().RCCompletion("rc1"))
	d, err := New(testConfig(nc, EngineSource{}))
	if err != nil {
		t.Fatal(err)
	}
	parent, cancel := context.WithCancel(context.WithValue(context.Background(), ctxKey{}, "v"))
	defer cancel()
	s := d.newSlot(parent)
	defer s.close()

	// The first portion passes its deadline while its Source runs.
	s.p = dispatch(1, nil)
	c := s.begin(time.Now().Add(time.Millisecond), time.Now())
	natstest.Receive(t, c.Done(), "the first portion's deadline", wait)
	if !errors.Is(c.Err(), context.DeadlineExceeded) || c.cancelled() {
		t.Fatalf("first portion's context: %v", c.Err())
	}
	if got := nextAs[messages.PortionCompletion](t, completions); got.Code != messages.CodeTimeout || got.Ref() != s.p.Ref() {
		t.Fatalf("completion %+v, want TIMEOUT for portion 1", got)
	}
	if s.claim() {
		t.Fatal("the Source's return claimed a portion answered already")
	}
	natstest.Receive(t, s.answered, "the early answer to be done", wait)
	s.end()

	// The next portion on the same slot, its deadline ahead: a late fire of
	// the timer does not stop it.
	s.p = dispatch(2, nil)
	c = s.begin(time.Now().Add(time.Hour), time.Now())
	s.expire()
	if err := c.Err(); err != nil {
		t.Fatalf("second portion stopped by a late fire: %v", err)
	}
	if v := c.Value(ctxKey{}); v != "v" {
		t.Fatalf("value %v, want the parent's", v)
	}
	if !s.claim() {
		t.Fatal("the second portion, not stopped, was not the Source's to answer")
	}
	s.end()
	select {
	case <-c.Done():
	default:
		t.Fatal("the second portion's context not done after it ended")
	}
	if !errors.Is(c.Err(), context.Canceled) || context.Cause(c) == nil {
		t.Fatalf("ended portion's context: err %v, cause %v", c.Err(), context.Cause(c))
	}
	select {
	case <-s.answered:
		t.Fatal("an early answer signalled for a portion its Source answered")
	default:
	}
}

// Shutdown stops the running portion and answers nothing (DAPLost tells
// the RC); a portion begun after it is stopped at once.
func TestSlotShutdownAnswersNothing(t *testing.T) {
	nc := startNATS(t, 0)
	d, err := New(testConfig(nc, EngineSource{}))
	if err != nil {
		t.Fatal(err)
	}
	parent, cancel := context.WithCancel(context.Background())
	s := d.newSlot(parent)
	defer s.close()
	s.p = dispatch(1, nil)
	c := s.begin(time.Now().Add(time.Hour), time.Now())
	cancel()
	natstest.Receive(t, c.Done(), "the portion to stop on shutdown", wait)
	if s.claim() {
		t.Fatal("a portion stopped by shutdown was the Source's to answer")
	}
	natstest.Receive(t, s.answered, "the early answer to be done", wait)
	s.end()
	s.p = dispatch(2, nil)
	c = s.begin(time.Now().Add(time.Hour), time.Now())
	if c.Err() == nil || s.claim() {
		t.Fatalf("a portion begun after shutdown runs: %v", c.Err())
	}
	natstest.Receive(t, s.answered, "the early answer to be done", wait)
	s.end()
	// answerEarly counts what it answers before it signals answered.
	if st := d.Stats(); st.Cancelled != 0 || st.TimedOut != 0 {
		t.Fatalf("portions answered on shutdown: %+v", st)
	}
}

// The RC's cancel of a portion whose Source does not stop: the RC and the
// Agg hear at once, no result follows when the Source returns, and the slot
// stays taken until it has returned.
func TestCancelWhileTheSourceWillNotStop(t *testing.T) {
	nc := startNATS(t, 0)
	src := &stubbornSource{started: make(chan string, 10), release: make(chan struct{})}
	cfg := testConfig(nc, src)
	cfg.Concurrency = 1
	d := started(t, cfg)
	// Registered after the DAP's cleanup, so it runs first: a failing test
	// does not hang on the Source the DAP waits for.
	var release sync.Once
	free := func() { release.Do(func() { close(src.release) }) }
	t.Cleanup(free)
	completions := subscribe(t, nc, subjects.Default().RCCompletion("rc1"))
	partials := subscribe(t, nc, subjects.Default().AggPartial("agg1"))

	first := dispatch(1, "1")
	first.RequestID = "req-first"
	send(t, nc, d.ID(), first)
	if id := natstest.Receive(t, src.started, "the first portion to start", wait); id != "1" {
		t.Fatalf("portion %s started", id)
	}
	next := dispatch(2, "2")
	send(t, nc, d.ID(), next)
	waitQueued(t, d, 1)
	sendCancel(t, nc, d.ID(), first.RequestID)
	c := nextAs[messages.PortionCompletion](t, completions) // while the Source still runs
	if c.Outcome != messages.OutcomeError || c.Code != messages.CodeErr || c.Ref() != first.Ref() {
		t.Fatalf("completion %+v, want the first portion cancelled", c)
	}
	if pr := nextAs[messages.PartialResult](t, partials); pr.Status.IsOK() || pr.Ref() != first.Ref() {
		t.Fatalf("partial %+v", pr)
	}
	if st := d.Stats(); st.Cancelled != 1 || st.Queued != 1 || st.Running != 1 {
		t.Fatalf("after the cancel: %+v, want the second queued behind the first's running Source", st)
	}
	free()
	if id := natstest.Receive(t, src.started, "the second portion to start", wait); id != "2" {
		t.Fatalf("portion %s started", id)
	}
	c = nextAs[messages.PortionCompletion](t, completions)
	if c.Outcome != messages.OutcomeOK || c.Ref() != next.Ref() {
		t.Fatalf("completion %+v, want the second portion's, none more for the first", c)
	}
	if pr := nextAs[messages.PartialResult](t, partials); !pr.Status.IsOK() || pr.Ref() != next.Ref() {
		t.Fatalf("partial %+v, want the second portion's", pr)
	}
}
