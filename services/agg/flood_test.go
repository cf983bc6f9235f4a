package agg

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

// floodN is how many hostile messages a flood test publishes.
const floodN = 5000

// TestMalformedPartialFloodLogsWithinTheLimit: a publisher floods the Agg
// with partial results that do not decode, naming a portion an expectation
// counts on. Every one is counted (sg_agg_malformed_messages_total) and
// refused to the RC (sg_agg_refusals_sent_total), the lines about them stay
// within loglimit's bound (one line each, two with the refusal's, made a
// flood of 100k a second 200k lines a second), and the Agg still answers
// the request with its good partial.
func TestMalformedPartialFloodLogsWithinTheLimit(t *testing.T) {
	var logs testlog.Buffer
	reg := prometheus.NewRegistry()
	e := newEnv(t, func(c *Config) { c.Log, c.Registry = zerolog.New(&logs), reg })
	e.expect(expectation("req1", subjects.APIPing, nil, ref(1, 1)))
	// Expectations and partials come on two subscriptions: the flood is
	// refused to the expectation's RC once the expectation is applied.
	waitChanged(t, e.agg, func() bool { return e.agg.Stats().Expectations == 1 }, func() string { return "expectation not applied" })
	h := nats.Header{}
	messages.Routing{RequestID: "req1", PortionID: 1, Attempt: 1}.Write(h)
	for range floodN {
		if err := e.nc.PublishMsg(&nats.Msg{Subject: subj.AggPartial("agg1"), Header: h, Data: []byte{0xc1}}); err != nil {
			t.Fatal(err)
		}
	}
	// Partials are handled in order: once the good one is answered, every
	// partial of the flood was handled.
	e.partial(okPartial("req1", ref(1, 1), "dap0", []byte{0xc3}))
	// (c) The Agg still answers.
	if resp, _ := e.answer(); resp.Header.RequestID != "req1" || !resp.Header.IsOK() {
		t.Fatalf("answer after the flood %+v, want req1's, OK", resp.Header)
	}
	// (a) Every message counted, every refusal sent.
	for name, want := range map[string]float64{"sg_agg_malformed_messages_total": floodN, "sg_agg_refusals_sent_total": floodN} {
		if n := promtest.Sum(t, reg, name, nil); n != want {
			t.Fatalf("%s %v, want %v", name, n, want)
		}
	}
	if s := e.agg.Stats(); s.Malformed != floodN {
		t.Fatalf("Stats.Malformed %d, want %d", s.Malformed, floodN)
	}
	// (b) The lines bounded: a burst per kind per period, two periods at
	// most in the test's time; each with its request id.
	for _, msg := range []string{"malformed partial result", "message refused: the RC is told"} {
		n := strings.Count(logs.String(), msg)
		if n > 2*defaults.LogBurst || n == 0 {
			t.Fatalf("%d lines %q about %d partials, want 1 to %d", n, msg, floodN, 2*defaults.LogBurst)
		}
		if line := logs.Line(msg); !strings.Contains(line, `"request_id":"req1"`) {
			t.Fatalf("line without its request id: %s", line)
		}
	}
}
