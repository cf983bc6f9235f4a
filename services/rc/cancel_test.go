package rc

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/sg-project/sg/messages"
	"github.com/sg-project/sg/services/agg"
	"github.com/sg-project/sg/services/dap"
)

// slotFreeWithin is the bound: a cancelled portion, or one past its deadline,
// gives its DAP slot back within this.
const slotFreeWithin = 50 * time.Millisecond

// slowSource scans in batches of 20 ms, looking at its context between batches as the
// engine and the Parquet reader do. It reports each start and each stop.
type slowSource struct {
	started chan string    // request id of each execution
	stopped chan time.Time // when an execution gave up on its context
}

func (s *slowSource) Execute(ctx context.Context, _ string, args msgpack.RawMessage, _ messages.LabelSet, _ messages.TimeRange) ([]byte, error) {
	a, err := messages.DecodeGetDataArgsMsgpack(args)
	if err != nil {
		return nil, err
	}
	s.started <- a.Columns[0] // the test names the request in the one column it asks for
	for range 1000 {
		if err := ctx.Err(); err != nil {
			s.stopped <- time.Now()
			return nil, err
		}
		time.Sleep(20 * time.Millisecond) // one batch of rows
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
	src := &slowSource{started: make(chan string, 8), stopped: make(chan time.Time, 8)}
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

func (s *system) stoppedWithin(from time.Time) {
	s.t.Helper()
	select {
	case at := <-s.src.stopped:
		if d := at.Sub(from); d > slotFreeWithin {
			s.t.Fatalf("the DAP stopped %v after, want within %v", d, slotFreeWithin)
		} else {
			s.t.Logf("DAP stopped %v after", d)
		}
	case <-time.After(5 * time.Second):
		s.t.Fatal("the DAP never stopped")
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
// answers it, the DAP stops it within 50 ms, and the portion queued behind it at the
// RC then runs on that DAP.
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
	s.stoppedWithin(at)
	s.startedRun("q2")
	t.Logf("next queued portion running %v after the cancel", time.Since(at))
}

// The RC's own deadline: the seed's timeout message, the DAP stops within 50 ms of
// it, and the next queued portion runs.
func TestDeadlineEndToEnd(t *testing.T) {
	s := startSystem(t)
	deadline := time.Now().Add(400 * time.Millisecond)
	r1 := s.submitNamed("q1", deadline)
	s.startedRun("q1")
	s.submitNamed("q2", time.Now().Add(time.Minute))
	s.waitQueued(1)
	st := status(t, r1)
	if st.RC != messages.CodeTimeout || st.AI != `Request timed out, [rc=rc-1;status="executing";dap=[d1]]` {
		t.Fatalf("status %+v", st)
	}
	s.stoppedWithin(deadline)
	s.startedRun("q2")
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
