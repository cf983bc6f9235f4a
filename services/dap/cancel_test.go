package dap

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/sg-project/sg/messages"
	"github.com/sg-project/sg/services/agg/merge"
	"github.com/sg-project/sg/subjects"
	"github.com/sg-project/sg/test/natstest"
	"github.com/vmihailenco/msgpack/v5"
)

// slowScan is a getData source whose scan goes batch by batch of rows, looking at its
// context between batches as the engine and the Parquet reader do; it runs through
// RunGetData, the path every getData source takes. The test paces it: each batch is
// one value on batch, and a batch under way does not look at the context (a read in
// progress does not). So "the slot is free after the batch under way, without
// another" is shown by events, not by a clock: the issue's 50 ms is a 20 ms batch
// plus the hand-over, and a test bounding that in time fails on a loaded machine
// (it did under -race with two busy loops, 3 runs in 90).
type slowScan struct {
	batches  int
	started  chan string   // request id of each execution, in start order
	stopping chan string   // request id of each execution as its context ends
	batch    chan struct{} // one batch of rows per value
	done     chan struct{} // closed when the test ends: scans under way return
}

func newSlowScan() *slowScan {
	return &slowScan{batches: 500, started: make(chan string, 4), stopping: make(chan string, 16),
		batch: make(chan struct{}, 1), done: make(chan struct{})}
}

// stopOnCleanup ends the scans under way when the test ends; called after the DAP
// started, so that it runs before the DAP's own cleanup waits for them.
func (s *slowScan) stopOnCleanup(t *testing.T) { t.Cleanup(func() { close(s.done) }) }

func (s *slowScan) Execute(ctx context.Context, api string, args messages.Args, l messages.LabelSet, rng messages.TimeRange) ([]byte, error) {
	a, err := args.GetData()
	if err != nil {
		return nil, err
	}
	b, _, err := RunGetData(ctx, func(ctx context.Context, a messages.GetDataArgs, _, _ time.Time) (merge.Partial, error) {
		s.started <- a.Table
		defer context.AfterFunc(ctx, func() { s.stopping <- a.Table })()
		for range s.batches {
			if err := ctx.Err(); err != nil {
				return merge.Partial{}, err
			}
			select { // one batch of rows
			case <-s.batch:
			case <-s.done:
				return merge.Partial{}, errors.New("test over")
			}
		}
		return merge.Partial{}, ctx.Err()
	}, a, rng)
	return b, err
}

// freedAfterOneBatch: once want's context has ended, the batch under way ends, and
// next starts at once, with no other batch. The bounds are the package's wait: a
// portion the DAP did not stop would hold the slot for its 500 batches, which never
// come.
func (s *slowScan) freedAfterOneBatch(t *testing.T, want, next string) {
	t.Helper()
	if got := natstest.Receive(t, s.stopping, want+"'s context to end", wait); got != want {
		t.Fatalf("%s's context ended, want %s's", got, want)
	}
	s.oneBatch(t) // the batch under way (or, if want had returned already, next's first)
	startedWithin(t, s.started, next, wait)
}

// oneBatch lets one batch of rows through: a scan takes it now or at its
// next batch (batch holds one); it fails only when the one let through
// before was never taken.
func (s *slowScan) oneBatch(t *testing.T) {
	t.Helper()
	select {
	case s.batch <- struct{}{}:
	case <-time.After(wait):
		t.Fatal("a batch was let through but no scan took the one before it")
	}
}

// slowDispatch is a getData dispatch of request id; the table names the request so the
// source can say which one it runs.
func slowDispatch(t *testing.T, id string, deadline time.Time) messages.PortionDispatch {
	t.Helper()
	args, err := msgpack.Marshal(messages.GetDataArgs{Table: id})
	if err != nil {
		t.Fatal(err)
	}
	p := dispatch(1, nil) // portion ids are per request
	p.RequestID, p.Args, p.Deadline = id, args, deadline.UnixNano()
	return p
}

func sendCancel(t *testing.T, nc *nats.Conn, dapID, requestID string) {
	t.Helper()
	h := nats.Header{}
	messages.SetString(h, messages.HdrRequestID, requestID)
	if err := nc.PublishMsg(&nats.Msg{Subject: subjects.Default().DAPCancel(dapID), Header: h}); err != nil {
		t.Fatal(err)
	}
}

func startedWithin(t *testing.T, ch chan string, want string, d time.Duration) {
	t.Helper()
	select {
	case got := <-ch:
		if got != want {
			t.Fatalf("%s started, want %s", got, want)
		}
	case <-time.After(d):
		t.Fatalf("%s did not start within %v", want, d)
	}
}

// A cancel stops a running portion between two batches: its slot is free after the
// batch under way, the next queued portion runs at once, and the RC hears that the
// portion was stopped.
func TestCancelFreesTheSlotAfterTheBatchUnderWay(t *testing.T) {
	nc := startNATS(t, 0)
	src := newSlowScan()
	cfg := testConfig(nc, src)
	cfg.Concurrency = 1
	d := started(t, cfg)
	src.stopOnCleanup(t)
	completions := subscribe(t, nc, subjects.Default().RCCompletion("rc1"))

	send(t, nc, d.ID(), slowDispatch(t, "q1", time.Now().Add(time.Minute)))
	startedWithin(t, src.started, "q1", wait)
	send(t, nc, d.ID(), slowDispatch(t, "q2", time.Now().Add(time.Minute)))
	send(t, nc, d.ID(), slowDispatch(t, "q3", time.Now().Add(time.Minute)))
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	waitQueued(t, d, 2)

	// q3 is cancelled while queued: answered at once, never run.
	sendCancel(t, nc, d.ID(), "q3")
	if c := nextAs[messages.PortionCompletion](t, completions); c.RequestID != "q3" || c.Outcome != messages.OutcomeError {
		t.Fatalf("completion %+v", c)
	}
	at := time.Now()
	sendCancel(t, nc, d.ID(), "q1")
	src.freedAfterOneBatch(t, "q1", "q2")
	t.Logf("slot free and the next portion running %v after the cancel (no batch time)", time.Since(at))
	c := nextAs[messages.PortionCompletion](t, completions)
	if c.RequestID != "q1" || c.Outcome != messages.OutcomeError || c.Code == messages.CodeTimeout {
		t.Fatalf("completion %+v", c)
	}
	// A dispatch that comes after its request's cancel is answered without running.
	send(t, nc, d.ID(), slowDispatch(t, "q1", time.Now().Add(time.Minute)))
	if c := nextAs[messages.PortionCompletion](t, completions); c.RequestID != "q1" || c.Outcome != messages.OutcomeError {
		t.Fatalf("completion %+v", c)
	}
	if s := d.Stats(); s.Cancelled != 3 || s.Running != 1 || s.Queued != 0 {
		t.Fatalf("stats %+v", s)
	}
}

// The deadline stops a running portion the same way. It leaves q1 time to start on a
// loaded machine (one already past is answered without running); q2 waits behind q1
// whether it comes before the deadline or after.
func TestDeadlineFreesTheSlotAfterTheBatchUnderWay(t *testing.T) {
	nc := startNATS(t, 0)
	src := newSlowScan()
	cfg := testConfig(nc, src)
	cfg.Concurrency = 1
	d := started(t, cfg)
	src.stopOnCleanup(t)
	completions := subscribe(t, nc, subjects.Default().RCCompletion("rc1"))

	deadline := time.Now().Add(time.Second)
	send(t, nc, d.ID(), slowDispatch(t, "q1", deadline))
	startedWithin(t, src.started, "q1", wait)
	send(t, nc, d.ID(), slowDispatch(t, "q2", time.Now().Add(time.Minute)))
	waitQueued(t, d, 1)
	src.freedAfterOneBatch(t, "q1", "q2")
	if time.Now().UnixNano() < deadline.UnixNano() { // the wall clock, as the DAP reads the deadline
		t.Fatal("q1 stopped before its deadline")
	}
	t.Logf("next portion running %v after the deadline (no batch time)", time.Since(deadline))
	if c := nextAs[messages.PortionCompletion](t, completions); c.RequestID != "q1" || c.Code != messages.CodeTimeout {
		t.Fatalf("completion %+v", c)
	}
}

// waitQueued waits (bounded) until n portions wait in the DAP's queue.
func waitQueued(t *testing.T, d *DAP, n int) {
	t.Helper()
	for end := time.Now().Add(wait); time.Now().Before(end); {
		if d.Stats().Queued == n {
			return
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatalf("queue never reached %d: %+v", n, d.Stats())
}

// Over Config.MaxQueue a dispatch is refused RATE_LIMITED, named, not dropped: the RC
// and the Agg both hear of it.
func TestQueueLimitRefusesRateLimited(t *testing.T) {
	nc := startNATS(t, 0)
	src := newSlowScan()
	cfg := testConfig(nc, src)
	cfg.Concurrency, cfg.MaxQueue = 1, 1
	d := started(t, cfg)
	src.stopOnCleanup(t)
	completions := subscribe(t, nc, subjects.Default().RCCompletion("rc1"))
	partials := subscribe(t, nc, subjects.Default().AggPartial("agg1"))
	send(t, nc, d.ID(), slowDispatch(t, "q1", time.Now().Add(time.Minute)))
	startedWithin(t, src.started, "q1", wait)
	send(t, nc, d.ID(), slowDispatch(t, "q2", time.Now().Add(time.Minute))) // waits
	send(t, nc, d.ID(), slowDispatch(t, "q3", time.Now().Add(time.Minute))) // one too many
	c := nextAs[messages.PortionCompletion](t, completions)
	want := "DAP dap-eu-hdb-0 has 1 portions waiting, its limit dap_queue=1 (SG_DAP_MAX_QUEUE)"
	if c.RequestID != "q3" || c.Outcome != messages.OutcomeError || c.Code != messages.CodeRateLimited || c.Message != want {
		t.Fatalf("completion %+v", c)
	}
	if pr := nextAs[messages.PartialResult](t, partials); pr.RequestID != "q3" || pr.Status.RC != messages.CodeRateLimited {
		t.Fatalf("partial %+v", pr)
	}
	if s := d.Stats(); s.Refused != 1 || s.Queued != 1 {
		t.Fatalf("stats %+v", s)
	}
	sendCancel(t, nc, d.ID(), "q1")
	sendCancel(t, nc, d.ID(), "q2")
}

func TestMaxQueueFromEnv(t *testing.T) {
	look := func(v string) func(string) (string, bool) {
		return func(k string) (string, bool) { return v, k == EnvMaxQueue && v != "" }
	}
	if n, err := MaxQueueFromEnv(look("")); n != 0 || err != nil {
		t.Fatalf("%d %v", n, err)
	}
	if n, err := MaxQueueFromEnv(look("64")); n != 64 || err != nil {
		t.Fatalf("%d %v", n, err)
	}
	if _, err := MaxQueueFromEnv(look("0")); err == nil {
		t.Fatal("0 accepted")
	}
}

// A cancel naming one portion (Sg-Portion-Id) stops that portion only: the request's
// other portions, queued or sent later, run.
func TestCancelOnePortion(t *testing.T) {
	nc := startNATS(t, 0)
	src := newSlowScan()
	cfg := testConfig(nc, src)
	cfg.Concurrency = 1
	d := started(t, cfg)
	src.stopOnCleanup(t)
	completions := subscribe(t, nc, subjects.Default().RCCompletion("rc1"))
	portion := func(id messages.PortionID, table string) messages.PortionDispatch {
		p := slowDispatch(t, table, time.Now().Add(time.Minute))
		p.RequestID, p.PortionID = "q1", id
		return p
	}
	send(t, nc, d.ID(), portion(1, "A"))
	startedWithin(t, src.started, "A", wait)
	send(t, nc, d.ID(), portion(2, "B"))
	waitQueued(t, d, 1)
	h := nats.Header{}
	messages.SetString(h, messages.HdrRequestID, "q1")
	messages.SetString(h, messages.HdrPortionID, "1")
	at := time.Now()
	if err := nc.PublishMsg(&nats.Msg{Subject: subjects.Default().DAPCancel(d.ID()), Header: h}); err != nil {
		t.Fatal(err)
	}
	src.freedAfterOneBatch(t, "A", "B")
	t.Logf("next portion running %v after the cancel (no batch time)", time.Since(at))
	if c := nextAs[messages.PortionCompletion](t, completions); c.PortionID != 1 || c.Outcome != messages.OutcomeError {
		t.Fatalf("completion %+v", c)
	}
	send(t, nc, d.ID(), portion(3, "C"))
	sendCancel(t, nc, d.ID(), "q1") // now the whole request: B stops, C never runs
	if got := natstest.Receive(t, src.stopping, "B's context to end", wait); got != "B" {
		t.Fatalf("%s's context ended, want B's", got)
	}
	src.oneBatch(t) // the batch under way
	for range 2 {
		if c := nextAs[messages.PortionCompletion](t, completions); c.Outcome != messages.OutcomeError {
			t.Fatalf("completion %+v", c)
		}
	}
	for end := time.Now().Add(wait); d.Stats().Running != 0 && time.Now().Before(end); {
		time.Sleep(time.Millisecond) // the completion goes out before the slot is handed back
	}
	if s := d.Stats(); s.Cancelled != 3 || s.Running != 0 {
		t.Fatalf("stats %+v", s)
	}
}
