package rc

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/sg-project/sg/messages"
	"github.com/sg-project/sg/services/agg"
	"github.com/sg-project/sg/services/dap"
)

// slowSource scans batch by batch of rows, looking at its context between batches as
// the engine and the Parquet reader do. The test paces it: each batch is one value on
// batch, and a batch under way does not look at the context (a read in progress does
// not). It reports each start, and each execution's context as it ends. So "the DAP
// stops the portion after the batch under way and runs the next" is shown by events,
// not by a clock: the 50 ms is a 20 ms batch plus the hand-over, and a test
// bounding that in time fails on a loaded machine (the DAP's own did under -race with
// two busy loops).
type slowSource struct {
	started  chan string   // request id of each execution
	stopping chan string   // request id of each execution as its context ends
	batch    chan struct{} // one batch of rows per value
	done     chan struct{} // closed when the test ends: scans under way return
}

func (s *slowSource) Execute(ctx context.Context, _ string, args messages.Args, _ messages.LabelSet, _ messages.TimeRange) ([]byte, error) {
	a, err := args.GetData()
	if err != nil {
		return nil, err
	}
	id := a.Columns[0] // the test names the request in the one column it asks for
	s.started <- id
	defer context.AfterFunc(ctx, func() { s.stopping <- id })()
	for range 1000 {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		select { // one batch of rows
		case <-s.batch:
		case <-s.done:
			return nil, errors.New("test over")
		}
	}
	return nil, ctx.Err()
}

// system is one RC, one DAP of concurrency 1 on a slow source, and one Agg.
type system struct {
	*fixture
	src *slowSource
	dap *dap.DAP
}

func startSystem(t *testing.T) *system {
	t.Helper()
	f := startRC(t)
	src := &slowSource{started: make(chan string, 8), stopping: make(chan string, 16), batch: make(chan struct{}, 1), done: make(chan struct{})}
	d, err := dap.New(dap.Config{ID: "d1", Labels: messages.LabelSet{"region": "eu"}, Tier: messages.TierRDB,
		Tables: []messages.TableInfo{{Name: "trade", Kind: messages.TablePartitioned}}, Concurrency: 1,
		NC: f.nc, Subjects: f.s, Log: zerolog.Nop(), Source: src})
	if err != nil {
		t.Fatal(err)
	}
	a, err := agg.New(agg.Config{ID: "agg-1", NC: f.nc, Subjects: f.s, Log: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for _, run := range []func(context.Context) error{d.Run, a.Run} {
		wg.Go(func() {
			if err := run(ctx); err != nil {
				t.Errorf("run: %v", err)
			}
		})
	}
	t.Cleanup(func() { cancel(); wg.Wait() })
	t.Cleanup(func() { close(src.done) }) // first: the DAP waits for its scans to return
	<-a.Ready()
	f.waitDAPs(1)
	return &system{fixture: f, src: src, dap: d}
}

func (s *system) submitNamed(id string, deadline time.Time) *nats.Subscription {
	s.t.Helper()
	replies, err := s.nc.SubscribeSync("reply." + id)
	if err != nil {
		s.t.Fatal(err)
	}
	args, err := messages.Encode(&messages.GetDataArgs{Table: "trade", Columns: []string{id}})
	if err != nil {
		s.t.Fatal(err)
	}
	s.publish(s.s.RCSubmit("rc-1"), &messages.RCSubmission{
		V: messages.RCVersion, RequestID: id, GWID: "gw-1", Header: messages.RequestHeader{API: "getData"},
		Args: args, ReplyTo: "reply." + id, Content: messages.ContentMsgpack,
		Deadline: deadline.UnixNano(), ReceivedAt: time.Now().UnixNano(),
	})
	return replies
}

func (s *system) startedRun(want string) {
	s.t.Helper()
	select {
	case got := <-s.src.started:
		if got != want {
			s.t.Fatalf("%s started on the DAP, want %s", got, want)
		}
	case <-time.After(5 * time.Second):
		s.t.Fatalf("%s never started on the DAP", want)
	}
}

// stoppedAfterOneBatch: once want's context has ended on the DAP, the batch under
// way ends and the scan returns with no other batch: a portion the DAP did not stop
// would hold the slot for its 1000 batches, which never come.
func (s *system) stoppedAfterOneBatch(want string) {
	s.t.Helper()
	select {
	case got := <-s.src.stopping:
		if got != want {
			s.t.Fatalf("%s's context ended on the DAP, want %s's", got, want)
		}
	case <-time.After(5 * time.Second):
		s.t.Fatalf("the DAP never stopped %s", want)
	}
	select { // the batch under way (or, if want had returned already, the next scan's first)
	case s.src.batch <- struct{}{}:
	case <-time.After(5 * time.Second):
		s.t.Fatal("a batch was let through but no scan took it")
	}
}

func status(t *testing.T, sub *nats.Subscription) messages.Status {
	t.Helper()
	st, err := messages.ReadStatus(next(t, sub).Header)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// A GW's cancel (subjects.RCCancel, empty body, the id in Sg-Request-Id): the RC
// answers it, the DAP stops it after the batch under way, and the portion queued
// behind it at the RC then runs on that DAP.
func TestCancelEndToEnd(t *testing.T) {
	s := startSystem(t)
	r1 := s.submitNamed("q1", time.Now().Add(time.Minute))
	s.startedRun("q1")
	s.submitNamed("q2", time.Now().Add(time.Minute))
	s.waitQueued(1)

	h := nats.Header{}
	messages.SetString(h, messages.HdrRequestID, "q1")
	at := time.Now()
	if err := s.nc.PublishMsg(&nats.Msg{Subject: s.s.RCCancel("rc-1"), Header: h}); err != nil {
		t.Fatal(err)
	}
	if st := status(t, r1); st.RC != messages.CodeErr || st.AI != "Request cancelled: by the caller" {
		t.Fatalf("status %+v", st)
	}
	s.stoppedAfterOneBatch("q1")
	s.startedRun("q2")
	t.Logf("next queued portion running %v after the cancel (no batch time)", time.Since(at))
}

// The RC's own deadline: the seed's timeout message, the DAP stops after the batch
// under way, and the next queued portion runs. The deadline leaves q1 time to start
// on a loaded machine.
func TestDeadlineEndToEnd(t *testing.T) {
	s := startSystem(t)
	deadline := time.Now().Add(time.Second)
	r1 := s.submitNamed("q1", deadline)
	s.startedRun("q1")
	s.submitNamed("q2", time.Now().Add(time.Minute))
	s.waitQueued(1)
	st := status(t, r1)
	if st.RC != messages.CodeTimeout || st.AI != `Request timed out, [rc=rc-1;status="executing";dap=[d1]]` {
		t.Fatalf("status %+v", st)
	}
	s.stoppedAfterOneBatch("q1")
	s.startedRun("q2")
	t.Logf("next queued portion running %v after the deadline (no batch time)", time.Since(deadline))
}

// waitQueued waits until the RC announces n queued portions.
func (f *fixture) waitQueued(n int) {
	f.t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		m, err := f.ann.NextMsg(time.Until(deadline))
		if err != nil {
			break
		}
		a, err := messages.DecodeValid[messages.RCAnnouncement](m.Data)
		if err == nil && a.Queued == n {
			return
		}
	}
	f.t.Fatalf("RC did not announce %d queued portions within 5s", n)
}
