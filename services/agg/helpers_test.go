package agg

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"
	"github.com/sg-project/sg/messages"
	"github.com/sg-project/sg/services/agg/merge"
	"github.com/sg-project/sg/services/dap/demo"
	"github.com/sg-project/sg/services/dap/engine"
	"github.com/sg-project/sg/subjects"
	"github.com/sg-project/sg/test/natstest"
	"github.com/vmihailenco/msgpack/v5"
)

// wait bounds every wait for a message: tests wait on messages, never on sleeps.
const wait = 10 * time.Second

var (
	subj = subjects.Default()
	t0   = time.Date(2024, 1, 2, 9, 0, 0, 0, time.UTC)
)

func startNATS(t *testing.T) *nats.Conn {
	t.Helper()
	return natstest.Connect(t, natstest.Start(t))
}

// env is one Agg on an embedded server, with the subjects a GW and an RC listen on.
type env struct {
	t       *testing.T
	nc      *nats.Conn
	agg     *Agg
	answers *nats.Subscription // every answer to gw1
	done    *nats.Subscription // AggDone to rc1
	dones   []doneSeen         // requests of the AggDones read, not yet returned
	stop    func()             // stops the Agg and waits for Run to return
}

func newEnv(t *testing.T, mutate func(*Config)) *env {
	t.Helper()
	nc := startNATS(t)
	cfg := Config{ID: "agg1", NC: nc, Subjects: subj, Log: zerolog.Nop()}
	if mutate != nil {
		mutate(&cfg)
	}
	a, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, nc: nc, agg: a, answers: subscribe(t, nc, subj.GWAnswerPattern("gw1")), done: subscribe(t, nc, subj.RCAggDone("rc1"))}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := a.Run(ctx); err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	e.stop = func() { cancel(); wg.Wait() }
	t.Cleanup(e.stop)
	select {
	case <-a.Ready():
	case <-time.After(wait):
		t.Fatal("Agg not ready")
	}
	return e
}

func subscribe(t *testing.T, nc *nats.Conn, subject string) *nats.Subscription {
	t.Helper()
	return natstest.Subscribe(t, nc, subject)
}

func (e *env) publish(subject string, v any) {
	e.t.Helper()
	if err := publishOn(e.nc, subject, v, nil); err != nil {
		e.t.Fatal(err)
	}
}

// publishOn publishes v, encoded, with h on nc.
func publishOn(nc *nats.Conn, subject string, v any, h nats.Header) error {
	b, err := messages.Encode(v)
	if err != nil {
		return err
	}
	return nc.PublishMsg(&nats.Msg{Subject: subject, Header: h, Data: b})
}

func (e *env) expect(x messages.AggExpectation) { e.t.Helper(); e.publish(subj.AggExpect("agg1"), &x) }

// partial sends a partial result as a DAP does: chunked when above max payload.
func (e *env) partial(p messages.PartialResult) {
	e.t.Helper()
	if err := partialOn(e.nc, p); err != nil {
		e.t.Fatal(err)
	}
}

// dapHeader is the headers a DAP sends partial result p with
// (messages.PortionDispatch.ReplyHeader).
func dapHeader(p messages.PartialResult) nats.Header {
	d := messages.PortionDispatch{RequestID: p.RequestID, PortionID: p.PortionID, Attempt: p.Attempt}
	return d.ReplyHeader(p.Status)
}

// partialOn sends p on nc as a DAP does (env.partial), for a test or
// benchmark that sends on a connection of its own.
func partialOn(nc *nats.Conn, p messages.PartialResult) error {
	b, err := messages.Encode(&p)
	if err != nil {
		return err
	}
	h := dapHeader(p)
	if int64(len(b))+4096 > nc.MaxPayload() {
		_, err = messages.SendChunked(nc, subj.AggPartial("agg1"), h, b, 0)
		return err
	}
	return nc.PublishMsg(&nats.Msg{Subject: subj.AggPartial("agg1"), Header: h, Data: b})
}

// answer receives the next answer (whole or chunked) and decodes its envelope.
func (e *env) answer() (messages.Response, nats.Header) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	data, h, err := messages.ReceiveChunked(ctx, e.answers, 0)
	if err != nil {
		e.t.Fatal(err)
	}
	r, err := messages.DecodeResponse(h, data)
	if err != nil {
		e.t.Fatal(err)
	}
	return r, h
}

// doneSeen is one request of an AggDone, with the Agg that sent it.
type doneSeen struct {
	messages.AggDoneEntry
	AggID string
}

// aggDone returns the next request the Agg told rc1 it is done with (an
// AggDone may carry several).
func (e *env) aggDone() doneSeen {
	e.t.Helper()
	if len(e.dones) == 0 {
		m, err := e.done.NextMsg(wait)
		if err != nil {
			e.t.Fatal(err)
		}
		d, err := messages.DecodeValid[messages.AggDone](m.Data)
		if err != nil {
			e.t.Fatal(err)
		}
		for _, x := range d.Done {
			e.dones = append(e.dones, doneSeen{AggDoneEntry: x, AggID: d.AggID})
		}
	}
	d := e.dones[0]
	e.dones = e.dones[1:]
	return d
}

func expectation(req, api string, args any, refs ...messages.PortionRef) messages.AggExpectation {
	var raw []byte
	if args != nil {
		var err error
		if raw, err = msgpack.Marshal(args); err != nil {
			panic(err)
		}
	}
	return messages.AggExpectation{V: messages.PortionVersion, RequestID: req, Seq: 1, API: api, Args: raw,
		Expect: refs, Sealed: true, ReplyTo: subj.GWAnswer("gw1", req), RCID: "rc1",
		Deadline: time.Now().Add(time.Minute).UnixNano(), LogCorr: "corr-" + req}
}

func ref(id messages.PortionID, attempt uint32) messages.PortionRef {
	return messages.PortionRef{PortionID: id, Attempt: attempt}
}

func okPartial(req string, r messages.PortionRef, dap string, payload []byte) messages.PartialResult {
	return messages.PartialResult{V: messages.PortionVersion, RequestID: req, PortionID: r.PortionID, Attempt: r.Attempt,
		DAPID: dap, Status: messages.StatusOK, Payload: payload}
}

// shard is the demo data of one region and time range, as one DAP holds it.
type shard struct {
	region     string
	start, end time.Time
}

var shards = []shard{{"eu", t0, t0.Add(time.Hour)}, {"eu", t0.Add(time.Hour), t0.Add(2 * time.Hour)}, {"us", t0, t0.Add(2 * time.Hour)}}

// partials executes args on each shard and returns the partials, encoded and decoded.
func partials(t *testing.T, args messages.GetDataArgs, cfg demo.Config) ([][]byte, []merge.Partial) {
	t.Helper()
	var enc [][]byte
	var dec []merge.Partial
	for _, s := range shards {
		st := engine.NewStore()
		if err := cfg.Load(st, s.region, s.start, s.end, true); err != nil {
			t.Fatal(err)
		}
		p, err := st.Execute(args, s.start, s.end)
		if err != nil {
			t.Fatal(err)
		}
		b, err := merge.EncodePartial(p)
		if err != nil {
			t.Fatal(err)
		}
		enc, dec = append(enc, b), append(dec, p)
	}
	return enc, dec
}

func decodeTable(t *testing.T, payload []byte) messages.Table {
	t.Helper()
	var tb messages.Table
	if err := messages.Decode(payload, &tb); err != nil {
		t.Fatal(err)
	}
	return tb
}

// natsMsg builds a message with hand-written headers.
type natsMsg struct {
	subject string
	data    []byte
	h       nats.Header
}

func (m *natsMsg) header(kv ...string) {
	m.h = nats.Header{}
	for i := 0; i+1 < len(kv); i += 2 {
		m.h.Set(kv[i], kv[i+1])
	}
}

func (m *natsMsg) msg() *nats.Msg { return &nats.Msg{Subject: m.subject, Header: m.h, Data: m.data} }
