package dap

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/sg-project/sg/messages"
	"github.com/sg-project/sg/services/agg/merge"
	"github.com/sg-project/sg/services/dap/demo"
	"github.com/sg-project/sg/services/dap/engine"
	"github.com/sg-project/sg/subjects"
	"github.com/sg-project/sg/test/natstest"
	"github.com/vmihailenco/msgpack/v5"
)

var t0 = time.Date(2024, 1, 2, 9, 0, 0, 0, time.UTC)

func demoStore(t *testing.T) *engine.Store {
	t.Helper()
	s := engine.NewStore()
	if err := (demo.Config{Seed: 7}).Load(s, "eu", t0, t0.Add(2*time.Hour), true); err != nil {
		t.Fatal(err)
	}
	return s
}

type endpoints struct{ partial, completion, partialSub, completionSub string }

func TestGoodDispatchSendsPartialAndCompletion(t *testing.T) {
	nc := startNATS(t, 0)
	store := demoStore(t)
	started(t, testConfig(nc, EngineSource{Store: store}))
	partials := subscribe(t, nc, subjects.Default().AggPartial("agg1"))
	completions := subscribe(t, nc, subjects.Default().RCCompletion("rc1"))

	args := messages.GetDataArgs{Table: "trade", GroupBy: []string{"sym"},
		Agg: []messages.AggSpec{{Name: "n", Func: messages.AggCount}, {Name: "px", Func: messages.AggAvg, Column: "price"}}}
	p := dispatch(1, args)
	p.Range = messages.TimeRange{Start: t0.Add(30 * time.Minute).UnixNano(), End: t0.Add(90 * time.Minute).UnixNano()}
	p.LogCorr = "corr-1"
	send(t, nc, "dap-eu-hdb-0", p)

	m := next(t, partials)
	pr, err := messages.DecodeValid[messages.PartialResult](m.Data)
	if err != nil {
		t.Fatal(err)
	}
	want, err := store.Execute(args, t0.Add(30*time.Minute), t0.Add(90*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	wantBytes, _ := merge.EncodePartial(want)
	if !pr.Status.IsOK() || pr.Ref() != p.Ref() || pr.RequestID != "req1" || pr.DAPID != "dap-eu-hdb-0" || !bytes.Equal(pr.Payload, wantBytes) {
		t.Fatalf("partial %+v (payload %d bytes, want %d)", pr.Status, len(pr.Payload), len(wantBytes))
	}
	if r, err := messages.ReadRouting(m.Header); err != nil || r.RequestID != "req1" || r.PortionID != 1 || r.LogCorr != "corr-1" {
		t.Fatalf("routing headers %+v %v", r, err)
	}
	c := nextAs[messages.PortionCompletion](t, completions)
	if c.Outcome != messages.OutcomeOK || !c.PartialSent || c.Bytes != int64(len(wantBytes)) || c.Rows != int64(want.Groups) ||
		c.ElapsedNS <= 0 || c.PurviewVersion != 1 || c.ReferenceVintage != 1 || c.Ref() != p.Ref() {
		t.Fatalf("completion %+v", c)
	}
}

// Seed (Retries): a mismatch of purview version or reference vintage is answered RETRY,
// with the DAP's own values, and the portion does not run.
func TestMismatchAnswersRetryWithoutExecuting(t *testing.T) {
	nc := startNATS(t, 0)
	var calls atomic.Int32
	src := funcSource(func(ctx context.Context, api string, args messages.Args) ([]byte, error) {
		calls.Add(1)
		return pingPayload, nil
	})
	d := started(t, testConfig(nc, src))
	completions := subscribe(t, nc, subjects.Default().RCCompletion("rc1"))
	partials := subscribe(t, nc, subjects.Default().AggPartial("agg1"))

	stalePV := dispatch(1, true)
	stalePV.PurviewVersion = 0
	staleRV := dispatch(2, true)
	staleRV.ReferenceVintage = 2
	for _, p := range []messages.PortionDispatch{stalePV, staleRV} {
		send(t, nc, d.ID(), p)
		c := nextAs[messages.PortionCompletion](t, completions)
		if c.Outcome != messages.OutcomeRetry || c.Code != messages.CodeRetry || c.PurviewVersion != 1 || c.ReferenceVintage != 1 || c.Ref() != p.Ref() {
			t.Fatalf("completion %+v", c)
		}
	}
	// After a vintage update the same dispatch is current and runs; the RETRYs never did.
	d.SetVintage(2)
	send(t, nc, d.ID(), staleRV)
	if c := nextAs[messages.PortionCompletion](t, completions); c.Outcome != messages.OutcomeOK || c.ReferenceVintage != 2 {
		t.Fatalf("completion %+v", c)
	}
	if pr := nextAs[messages.PartialResult](t, partials); pr.PortionID != 2 {
		t.Fatalf("partial of %s, want only p2's", pr.PortionID)
	}
	if n := calls.Load(); n != 1 {
		t.Fatalf("%d executions, want 1", n)
	}
	// An unavailable DAP sends its portions back for placement elsewhere.
	d.SetAvailable(false, "replaying log")
	send(t, nc, d.ID(), dispatch(3, true))
	if c := nextAs[messages.PortionCompletion](t, completions); c.Outcome != messages.OutcomeRetry {
		t.Fatalf("completion %+v", c)
	}
	if s := d.Stats(); s.Retried != 3 || s.Executed != 1 || s.Received != 4 {
		t.Fatalf("stats %+v", s)
	}
}

// blockingSource blocks every call until released, and records how many run at once.
type blockingSource struct {
	started chan string // portion index of each call, in start order
	release chan struct{}
	running atomic.Int32
	mu      sync.Mutex
	max     int32
}

func (s *blockingSource) Execute(ctx context.Context, _ string, args messages.Args, _ messages.LabelSet, _ messages.TimeRange) ([]byte, error) {
	n := s.running.Add(1)
	defer s.running.Add(-1)
	s.mu.Lock()
	s.max = max(s.max, n)
	s.mu.Unlock()
	var id string
	_ = msgpack.Unmarshal(args.Msgpack, &id)
	s.started <- id
	select {
	case <-s.release:
		return pingPayload, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func TestConcurrencyLimitAndOrder(t *testing.T) {
	nc := startNATS(t, 0)
	src := &blockingSource{started: make(chan string, 10), release: make(chan struct{})}
	cfg := testConfig(nc, src)
	cfg.Concurrency = 2
	d := started(t, cfg)
	completions := subscribe(t, nc, subjects.Default().RCCompletion("rc1"))
	const n = 6
	for i := range n {
		send(t, nc, d.ID(), dispatch(messages.PortionID(i+1), fmt.Sprint(i)))
	}
	recv := func() string { return natstest.Receive(t, src.started, "an execution to start", wait) }
	first := map[string]bool{recv(): true, recv(): true}
	if !first["0"] || !first["1"] {
		t.Fatalf("first two executions %v, want 0 and 1", first)
	}
	// One release frees one slot, which goes to the oldest waiting portion.
	for i := 2; i < n; i++ {
		src.release <- struct{}{}
		if got := recv(); got != fmt.Sprint(i) {
			t.Fatalf("execution %s started, want %d", got, i)
		}
	}
	if s := d.Stats(); s.Queued != 0 || s.Running != 2 {
		t.Fatalf("stats %+v", s)
	}
	src.release <- struct{}{}
	src.release <- struct{}{}
	for range n {
		if c := nextAs[messages.PortionCompletion](t, completions); c.Outcome != messages.OutcomeOK {
			t.Fatalf("completion %+v", c)
		}
	}
	src.mu.Lock()
	defer src.mu.Unlock()
	if src.max != 2 {
		t.Fatalf("%d executions at once, limit 2", src.max)
	}
}

func TestDeadline(t *testing.T) {
	nc := startNATS(t, 0)
	src := &blockingSource{started: make(chan string, 10), release: make(chan struct{})}
	d := started(t, testConfig(nc, src))
	completions := subscribe(t, nc, subjects.Default().RCCompletion("rc1"))
	partials := subscribe(t, nc, subjects.Default().AggPartial("agg1"))

	// Already past: answered TIMEOUT without running.
	late := dispatch(1, "1")
	late.Deadline = time.Now().Add(-time.Second).UnixNano()
	send(t, nc, d.ID(), late)
	c := nextAs[messages.PortionCompletion](t, completions)
	if c.Outcome != messages.OutcomeError || c.Code != messages.CodeTimeout || c.Ref() != late.Ref() {
		t.Fatalf("completion %+v", c)
	}
	if pr := nextAs[messages.PartialResult](t, partials); pr.Status.RC != messages.CodeTimeout || pr.Status.AC != messages.CodeErr {
		t.Fatalf("partial status %+v", pr.Status)
	}
	// Passes while running: the Source is stopped by its context.
	slow := dispatch(2, "2")
	slow.Deadline = time.Now().Add(200 * time.Millisecond).UnixNano()
	send(t, nc, d.ID(), slow)
	c = nextAs[messages.PortionCompletion](t, completions)
	if c.Outcome != messages.OutcomeError || c.Code != messages.CodeTimeout || c.Ref() != slow.Ref() {
		t.Fatalf("completion %+v", c)
	}
	if time.Now().UnixNano() < slow.Deadline {
		t.Fatal("timed out before the deadline")
	}
	if s := d.Stats(); s.TimedOut != 2 {
		t.Fatalf("stats %+v", s)
	}
	select {
	case id := <-src.started:
		if id != "2" {
			t.Fatalf("portion %s ran", id)
		}
	default:
		t.Fatal("the second portion never ran")
	}
}

func TestErrorsMapToCodes(t *testing.T) {
	nc := startNATS(t, 0)
	d := started(t, testConfig(nc, EngineSource{Store: demoStore(t)}))
	completions := subscribe(t, nc, subjects.Default().RCCompletion("rc1"))
	partials := subscribe(t, nc, subjects.Default().AggPartial("agg1"))
	unknownAPI := dispatch(3, true)
	unknownAPI.API = "sql"
	for _, tc := range []struct {
		p    messages.PortionDispatch
		code messages.Code
	}{
		{dispatch(1, messages.GetDataArgs{Table: "nope"}), messages.CodeBadRequest},
		{dispatch(2, messages.GetDataArgs{Table: "trade", Columns: []string{"nope"}}), messages.CodeBadRequest},
		{dispatch(4, messages.GetDataArgs{Table: "trade", Filter: []messages.Filter{{Op: "=", Column: "size", Value: "x"}}}), messages.CodeBadRequest},
		{dispatch(5, messages.GetDataArgs{Table: "trade", GroupBy: []string{"sym"}, Agg: []messages.AggSpec{{Name: "s", Func: "sum", Column: "sym"}}}), messages.CodeBadRequest},
		{unknownAPI, messages.CodeNotSupported},
	} {
		send(t, nc, d.ID(), tc.p)
		c := nextAs[messages.PortionCompletion](t, completions)
		pr := nextAs[messages.PartialResult](t, partials)
		if c.Outcome != messages.OutcomeError || c.Code != tc.code || c.Message == "" || !c.PartialSent ||
			pr.Status.RC != tc.code || pr.Status.AC != messages.CodeErr || pr.Status.AI != c.Message {
			t.Errorf("%s: completion %+v, partial status %+v", tc.p.PortionID, c, pr.Status)
		}
	}
	ping := dispatch(6, true)
	ping.API = subjects.APIPing
	send(t, nc, d.ID(), ping)
	if pr := nextAs[messages.PartialResult](t, partials); !pr.Status.IsOK() || !bytes.Equal(pr.Payload, []byte{0xc3}) {
		t.Fatalf("ping partial %+v %x", pr.Status, pr.Payload)
	}
}

func TestMalformedDispatches(t *testing.T) {
	nc := startNATS(t, 0)
	d := started(t, testConfig(nc, EngineSource{Store: demoStore(t)}))
	completions := subscribe(t, nc, subjects.Default().RCCompletion("rc1"))
	partials := subscribe(t, nc, subjects.Default().AggPartial("agg1"))
	subject := subjects.Default().DAPPortion(d.ID())
	for _, junk := range [][]byte{nil, {0xc1}, {0x92, 0x01}, bytes.Repeat([]byte{0xdd, 0xff, 0xff, 0xff, 0xff}, 8)} {
		if err := nc.Publish(subject, junk); err != nil {
			t.Fatal(err)
		}
	}
	// Decodes, but fails validation (no API), from a current RC (its headers
	// name it): refused to that RC.
	refusals := subscribe(t, nc, subjects.Default().RCRefused("rc1"))
	bad := dispatch(1, true)
	bad.API = ""
	send(t, nc, d.ID(), bad)
	if f := nextAs[messages.Refusal](t, refusals); f.RequestID != bad.RequestID || f.PortionID != bad.PortionID || f.Attempt != bad.Attempt ||
		f.Code != messages.CodeBadRequest {
		t.Fatalf("refusal %+v", f)
	}
	// From an older RC (no Sg-Rc-Id): answered BAD_REQUEST where the body says.
	data, err := messages.Encode(&bad)
	if err != nil {
		t.Fatal(err)
	}
	h := bad.Header()
	h.Del(messages.HdrRCID)
	if err := nc.PublishMsg(&nats.Msg{Subject: subject, Header: h, Data: data}); err != nil {
		t.Fatal(err)
	}
	c := nextAs[messages.PortionCompletion](t, completions)
	if c.Outcome != messages.OutcomeError || c.Code != messages.CodeBadRequest || c.Ref() != bad.Ref() {
		t.Fatalf("completion %+v", c)
	}
	if pr := nextAs[messages.PartialResult](t, partials); pr.Status.RC != messages.CodeBadRequest {
		t.Fatalf("partial %+v", pr.Status)
	}
	// And the DAP still works.
	good := dispatch(2, messages.GetDataArgs{Table: "trade", Limit: 3})
	send(t, nc, d.ID(), good)
	if c := nextAs[messages.PortionCompletion](t, completions); c.Outcome != messages.OutcomeOK || c.Rows != 3 {
		t.Fatalf("completion %+v", c)
	}
	if s := d.Stats(); s.Malformed != 6 || s.Executed != 1 || s.RefusalsSent != 1 {
		t.Fatalf("stats %+v", s)
	}
}

// A dispatch whose body does not decode, from an RC that names itself and the
// portion in the headers: the DAP refuses it to that RC, BAD_REQUEST naming
// the DAP. Headers that are not valid ids (or name no RC: an older RC) are
// not trusted as a subject to publish on: no refusal, as before.
func TestMalformedDispatchRefusedToItsRC(t *testing.T) {
	nc := startNATS(t, 0)
	d := started(t, testConfig(nc, EngineSource{Store: demoStore(t)}))
	refusals := subscribe(t, nc, subjects.Default().RCRefused("rc1"))
	wild := subscribe(t, nc, "sg.rc.>")
	subject := subjects.Default().DAPPortion(d.ID())
	publish := func(r messages.Routing) {
		h := nats.Header{}
		r.Write(h)
		if err := nc.PublishMsg(&nats.Msg{Subject: subject, Header: h, Data: []byte{0xc1}}); err != nil {
			t.Fatal(err)
		}
	}
	publish(messages.Routing{RequestID: "req1", RCID: "rc.>", PortionID: 7, Attempt: 2})
	publish(messages.Routing{RequestID: "req 1", RCID: "rc1", PortionID: 7, Attempt: 2})
	publish(messages.Routing{RequestID: "req1", PortionID: 7, Attempt: 2}) // an older RC's
	publish(messages.Routing{RequestID: "req1", RCID: "rc1", PortionID: 7, Attempt: 2})
	f := nextAs[messages.Refusal](t, refusals)
	if f.RequestID != "req1" || f.Service != subjects.ServiceDAP || f.ServiceID != d.ID() || f.PortionID != 7 || f.Attempt != 2 ||
		f.Code != messages.CodeBadRequest || !strings.Contains(f.Reason, "portion dispatch") {
		t.Fatalf("refusal %+v", f)
	}
	// Nothing else went to any RC before it.
	if m := next(t, wild); m.Subject != subjects.Default().RCRefused("rc1") {
		t.Fatalf("first message to an RC on %s", m.Subject)
	}
	if s := d.Stats(); s.Malformed != 4 || s.RefusalsSent != 1 {
		t.Fatalf("stats %+v", s)
	}
}

// A dispatch with the headers the RC sends (messages' one home for them)
// and a body corrupted on its way: the DAP reads back the RC, the portion and
// its attempt, and refuses the dispatch to that RC.
func TestMalformedDispatchRefusedByTheRCsHeaders(t *testing.T) {
	nc := startNATS(t, 0)
	d := started(t, testConfig(nc, EngineSource{Store: demoStore(t)}))
	refusals := subscribe(t, nc, subjects.Default().RCRefused("rc1"))
	p := dispatch(7, true)
	p.Attempt, p.LogCorr = 3, "corr-1"
	sendBody(t, nc, d.ID(), p, []byte{0xc1, 0x00})
	f := nextAs[messages.Refusal](t, refusals)
	if f.RequestID != p.RequestID || f.Service != subjects.ServiceDAP || f.ServiceID != d.ID() || f.PortionID != p.PortionID || f.Attempt != p.Attempt ||
		f.Code != messages.RefusalCodeRequest {
		t.Fatalf("refusal %+v, dispatch %s of %s", f, p.Ref(), p.RequestID)
	}
}

// A partial above the connection's max payload travels in chunks and reassembles whole.
func TestLargePartialIsChunked(t *testing.T) {
	nc := startNATS(t, 64<<10)
	big := make([]byte, 300_000)
	for i := range big {
		big[i] = byte(i * 7)
	}
	payload, _ := msgpack.Marshal(big) // a msgpack bin: the payload must be msgpack
	src := funcSource(func(context.Context, string, messages.Args) ([]byte, error) { return payload, nil })
	d := started(t, testConfig(nc, src))
	partials := subscribe(t, nc, subjects.Default().AggPartial("agg1"))
	completions := subscribe(t, nc, subjects.Default().RCCompletion("rc1"))
	send(t, nc, d.ID(), dispatch(1, true))

	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	data, hdr, err := messages.ReceiveChunked(ctx, partials, 0)
	if err != nil {
		t.Fatal(err)
	}
	pr, err := messages.DecodeValid[messages.PartialResult](data)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(pr.Payload, payload) || hdr.Get(messages.HdrRequestID) != "req1" {
		t.Fatalf("reassembled payload %d bytes, want %d; header %v", len(pr.Payload), len(payload), hdr)
	}
	if c := nextAs[messages.PortionCompletion](t, completions); c.Outcome != messages.OutcomeOK || c.Bytes != int64(len(payload)) {
		t.Fatalf("completion %+v", c)
	}
}

// stubbornSource ignores its context: it returns only when released.
type stubbornSource struct {
	started chan string
	release chan struct{}
}

func (s *stubbornSource) Execute(_ context.Context, _ string, args messages.Args, _ messages.LabelSet, _ messages.TimeRange) ([]byte, error) {
	var id string
	_ = msgpack.Unmarshal(args.Msgpack, &id)
	s.started <- id
	<-s.release
	return pingPayload, nil
}

// A Source that does not stop at the deadline: the RC and the Agg hear TIMEOUT
// at the deadline all the same, no result follows when the Source returns, and
// the slot stays taken until it has returned.
func TestDeadlineWhileTheSourceWillNotStop(t *testing.T) {
	nc := startNATS(t, 0)
	src := &stubbornSource{started: make(chan string, 10), release: make(chan struct{})}
	cfg := testConfig(nc, src)
	cfg.Concurrency = 1
	d := started(t, cfg)
	completions := subscribe(t, nc, subjects.Default().RCCompletion("rc1"))
	partials := subscribe(t, nc, subjects.Default().AggPartial("agg1"))

	// The deadline leaves p1 time to start on a loaded machine (one already
	// past is answered without running); p2 then waits behind p1's Source,
	// whether it comes before the deadline or after.
	slow := dispatch(1, "1")
	slow.Deadline = time.Now().Add(time.Second).UnixNano()
	send(t, nc, d.ID(), slow)
	if id := natstest.Receive(t, src.started, "the first portion to start", wait); id != "1" {
		t.Fatalf("portion %s started", id)
	}
	next := dispatch(2, "2")
	send(t, nc, d.ID(), next)
	waitQueued(t, d, 1)
	c := nextAs[messages.PortionCompletion](t, completions) // while the Source still runs
	if c.Outcome != messages.OutcomeError || c.Code != messages.CodeTimeout || c.Ref() != slow.Ref() {
		t.Fatalf("completion %+v", c)
	}
	if pr := nextAs[messages.PartialResult](t, partials); pr.Status.RC != messages.CodeTimeout || pr.Ref() != slow.Ref() {
		t.Fatalf("partial %+v", pr)
	}
	// p2 still waits in the queue, the slot taken by p1's Source.
	if st := d.Stats(); st.Received != 2 || st.Queued != 1 || st.Running != 1 {
		t.Fatalf("after p1's timeout: %+v, want p2 received and queued behind p1's running Source", st)
	}
	select {
	case id := <-src.started:
		t.Fatalf("portion %s started while the slot's Source still ran", id)
	default:
	}
	close(src.release)
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
