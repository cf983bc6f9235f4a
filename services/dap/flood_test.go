package dap

import (
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/sg-project/sg/messages"
	"github.com/sg-project/sg/services/defaults"
	"github.com/sg-project/sg/subjects"
	"github.com/sg-project/sg/test/promtest"
	"github.com/sg-project/sg/test/testlog"
)

// TestMalformedDispatchFloodLogsWithinTheLimit: a publisher floods the DAP
// with dispatches that do not decode, naming an RC. Every one is counted
// (sg_dap_malformed_messages_total) and refused to the RC
// (sg_dap_refusals_sent_total), the lines about them stay within loglimit's
// bound, and the DAP still runs a good portion.
func TestMalformedDispatchFloodLogsWithinTheLimit(t *testing.T) {
	const n = 5000
	nc := startNATS(t, 0)
	var logs testlog.Buffer
	reg := prometheus.NewRegistry()
	cfg := testConfig(nc, EngineSource{Store: demoStore(t)})
	cfg.Log, cfg.Registry = zerolog.New(&logs), reg
	d := started(t, cfg)
	completions := subscribe(t, nc, subjects.Default().RCCompletion("rc1"))
	h := nats.Header{}
	messages.Routing{RequestID: "req1", RCID: "rc1", PortionID: 7, Attempt: 1}.Write(h)
	for range n {
		if err := nc.PublishMsg(&nats.Msg{Subject: subjects.Default().DAPPortion(d.ID()), Header: h, Data: []byte{0xc1}}); err != nil {
			t.Fatal(err)
		}
	}
	// Dispatches are handled in order: once the good one completes, every
	// one of the flood was handled.
	send(t, nc, d.ID(), dispatch(2, messages.GetDataArgs{Table: "trade", Limit: 3}))
	if c := nextAs[messages.PortionCompletion](t, completions); c.Outcome != messages.OutcomeOK || c.Rows != 3 {
		t.Fatalf("completion after the flood %+v, want OK, 3 rows", c)
	}
	for name, want := range map[string]float64{"sg_dap_malformed_messages_total": n, "sg_dap_refusals_sent_total": n} {
		if got := promtest.Sum(t, reg, name, nil); got != want {
			t.Fatalf("%s %v, want %v", name, got, want)
		}
	}
	msg := "malformed portion dispatch: refused to its RC"
	if lines := strings.Count(logs.String(), msg); lines == 0 || lines > 2*defaults.LogBurst {
		t.Fatalf("%d lines %q about %d dispatches, want 1 to %d", lines, msg, n, 2*defaults.LogBurst)
	}
	if line := logs.Line(msg); !strings.Contains(line, `"request_id":"req1"`) {
		t.Fatalf("line without its request id: %s", line)
	}
}
