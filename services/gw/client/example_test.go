package client_test

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/sg-project/sg/messages"
	"github.com/sg-project/sg/services/dap/ratelimit"
	"github.com/sg-project/sg/services/gw/client"
	"github.com/sg-project/sg/subjects"
)

// GetData against a stand-in gateway (a plain NATS responder, so the example
// runs on its own); against sg, connect to its NATS and skip the responder.
func Example() {
	srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true})
	if err != nil {
		panic(err)
	}
	go srv.Start()
	defer srv.Shutdown()
	if !srv.ReadyForConnections(10 * time.Second) {
		panic("nats-server not ready")
	}
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		panic(err)
	}
	defer nc.Close()
	s := subjects.Default()

	// The stand-in GW answers every getData with a one-row table.
	_, _ = nc.Subscribe(s.GWAPI(subjects.APIGetData), func(m *nats.Msg) {
		t := messages.NewTable([]messages.ColumnSpec{{Name: "sym", Type: messages.TypeSymbol}, {Name: "n", Type: messages.TypeInt}})
		_ = t.AppendRow("AAPL", int64(42))
		payload, _ := messages.Encode(t)
		body, _ := messages.Response{Header: messages.ResponseHeader{V: messages.RequestVersion,
			RequestID: m.Header.Get(messages.HdrRequestID), Status: messages.StatusOK}, Payload: payload}.Encode()
		h := nats.Header{}
		messages.StatusOK.Write(h)
		_ = m.RespondMsg(&nats.Msg{Header: h, Data: body})
	})

	cl := client.New(nc, s)
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel() // ending ctx before the answer would also cancel the request at the GW
	r, err := cl.GetData(ctx, client.GetDataQuery{
		Args: messages.GetDataArgs{Table: "trade", StartTS: time.Unix(0, 0), EndTS: time.Unix(3600, 0),
			GroupBy: []string{"sym"}, Agg: []messages.AggSpec{{Name: "n", Func: messages.AggCount}}},
		Scope: messages.Scope{Assembly: "eu"},
	})
	if err != nil {
		panic(err)
	}
	fmt.Println(r.Table.NumRows(), r.Table.Col("sym").Strings[0], r.Table.Col("n").Ints[0])
	// Output: 1 AAPL 42
}

// A client that keeps at most 16 requests in flight per GW endpoint, tries a
// RATE_LIMITED request 3 times (pausing all its callers each time for the
// GW's Sg-Retry-After), and counts the pauses in Prometheus.
func ExampleNewWithOptions() {
	var nc *nats.Conn // connected to sg's NATS
	m, err := ratelimit.NewMetrics(prometheus.DefaultRegisterer)
	if err != nil {
		panic(err)
	}
	cl := client.NewWithOptions(nc, subjects.Default(), client.Options{MaxInFlight: 16, MaxAttempts: 3, Metrics: m})
	defer cl.Close()
}
