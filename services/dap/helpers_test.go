package dap

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"
	"github.com/sg-project/sg/messages"
	"github.com/sg-project/sg/subjects"
	"github.com/sg-project/sg/test/natstest"
	"github.com/vmihailenco/msgpack/v5"
)

// wait bounds every wait for a message: tests wait on messages, never on sleeps.
const wait = 10 * time.Second

// startNATS runs an embedded server on a random port until the test ends. maxPayload 0
// keeps the server's default (1 MiB).
func startNATS(t *testing.T, maxPayload int32) *nats.Conn {
	t.Helper()
	srv := natstest.Start(t, func(o *server.Options) { o.MaxPayload = maxPayload })
	return natstest.Connect(t, srv)
}

func subscribe(t *testing.T, nc *nats.Conn, subject string) *nats.Subscription {
	t.Helper()
	return natstest.Subscribe(t, nc, subject)
}

// next returns the next message on sub, failing the test after wait.
func next(t *testing.T, sub *nats.Subscription) *nats.Msg {
	t.Helper()
	m, err := sub.NextMsg(wait)
	if err != nil {
		t.Fatalf("no message on %s within %v: %v", sub.Subject, wait, err)
	}
	return m
}

// nextAs decodes and validates the next message on sub as a T.
func nextAs[T any, P interface {
	*T
	messages.Validator
}](t *testing.T, sub *nats.Subscription) T {
	t.Helper()
	m := next(t, sub)
	v, err := messages.DecodeValid[T, P](m.Data)
	if err != nil {
		t.Fatalf("message on %s: %v", m.Subject, err)
	}
	return v
}

func testConfig(nc *nats.Conn, src Source) Config {
	return Config{
		ID: "dap-eu-hdb-0", RCID: "rc1", Labels: messages.LabelSet{"region": "eu"}, Tier: messages.TierHDB,
		Purview: messages.Unbounded, Tables: []messages.TableInfo{{Name: "trade", Kind: messages.TablePartitioned}},
		PurviewVersion: 1, ReferenceVintage: 1, Concurrency: 2, Heartbeat: time.Hour,
		NC: nc, Subjects: subjects.Default(), Log: zerolog.Nop(), Source: src,
	}
}

// runDAP starts d.Run and stops it when the test ends.
func runDAP(t *testing.T, cfg Config) *DAP {
	t.Helper()
	d, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := d.Run(ctx); err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	t.Cleanup(func() { cancel(); wg.Wait() })
	return d
}

// started subscribes to the DAP's registration before starting it, and returns once the
// registration arrived: the DAP's subscriptions are then live.
func started(t *testing.T, cfg Config) *DAP {
	t.Helper()
	reg := subscribe(t, cfg.NC, cfg.Subjects.DAPRegister(cfg.ID))
	defer reg.Unsubscribe()
	d := runDAP(t, cfg)
	next(t, reg)
	return d
}

func dispatch(portion messages.PortionID, args any) messages.PortionDispatch {
	raw, err := msgpack.Marshal(args)
	if err != nil {
		panic(err)
	}
	return messages.PortionDispatch{
		V: messages.PortionVersion, RequestID: "req1", PortionID: portion, Attempt: 1, RCID: "rc1",
		API: subjects.APIGetData, Args: raw, Labels: messages.LabelSet{"region": "eu"}, Range: messages.Unbounded,
		PurviewVersion: 1, ReferenceVintage: 1, AggID: "agg1", Deadline: time.Now().Add(time.Minute).UnixNano(),
	}
}

// send sends p to DAP dapID as the RC does: its body, and the headers the
// RC sends a dispatch with (messages.PortionDispatch.Header).
func send(t *testing.T, nc *nats.Conn, dapID string, p messages.PortionDispatch) {
	t.Helper()
	data, err := messages.Encode(&p)
	if err != nil {
		t.Fatal(err)
	}
	sendBody(t, nc, dapID, p, data)
}

// sendBody is send with data, not p's encoding, as the body.
func sendBody(t *testing.T, nc *nats.Conn, dapID string, p messages.PortionDispatch, data []byte) {
	t.Helper()
	if err := nc.PublishMsg(&nats.Msg{Subject: subjects.Default().DAPPortion(dapID), Header: p.Header(), Data: data}); err != nil {
		t.Fatal(err)
	}
}

// funcSource adapts a function to Source.
type funcSource func(ctx context.Context, api string, args messages.Args) ([]byte, error)

func (f funcSource) Execute(ctx context.Context, api string, args messages.Args, _ messages.LabelSet, _ messages.TimeRange) ([]byte, error) {
	return f(ctx, api, args)
}

func contextWithCancel() (context.Context, context.CancelFunc) {
	return context.WithCancel(context.Background())
}
