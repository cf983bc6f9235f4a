package rc

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/sg-project/sg/messages"
	"github.com/sg-project/sg/services/defaults"
	"github.com/sg-project/sg/subjects"
	"github.com/sg-project/sg/test/promtest"
	"github.com/sg-project/sg/test/testlog"
)

// floodN is how many hostile messages of each kind a flood test publishes.
const floodN = 5000

// TestFloodOfBadCompletionsAndForgedRefusalsLogsWithinTheLimit: a publisher
// floods the RC with completions that do not decode and with refusals
// naming requests it never sent. Every one is counted
// (sg_rc_bad_messages_total, sg_rc_refusals_received_total{outcome="dropped"}),
// the lines about them stay within loglimit's bound (one line each made
// a flood of 100k a second 100k lines a second), and the RC still
// dispatches a good request.
func TestFloodOfBadCompletionsAndForgedRefusalsLogsWithinTheLimit(t *testing.T) {
	var logs testlog.Buffer
	reg := prometheus.NewRegistry()
	f := startRC(t, func(c *Config) { c.Log, c.Registry = zerolog.New(&logs), reg })
	portions, err := f.nc.SubscribeSync(f.s.DAPPortion("d1"))
	if err != nil {
		t.Fatal(err)
	}
	f.registerDAP("d1", true)
	forged := messages.NewRefusal("forged", subjects.ServiceAgg, "agg-x", messages.CodeBadRequest, "forged")
	for range floodN {
		if err := f.nc.Publish(f.s.RCCompletion("rc-1"), []byte{0xc1}); err != nil {
			t.Fatal(err)
		}
		f.publish(f.s.RCRefused("rc-1"), &forged)
	}
	// Submissions, completions and refusals come on one subscription (the
	// RC's inbox) and are handled in order: once the request is
	// dispatched, every message of the flood was handled.
	f.submit("q1", 5*time.Second, "reply.q1")
	pd, err := messages.DecodeValid[messages.PortionDispatch](next(t, portions).Data)
	if err != nil || pd.RequestID != "q1" {
		t.Fatalf("dispatch after the flood: %v %+v, want q1's", err, pd)
	}
	// (a) Every message counted.
	if n := promtest.Sum(t, reg, "sg_rc_bad_messages_total", nil); n != floodN {
		t.Fatalf("bad messages counted %v, want %d", n, floodN)
	}
	if n := promtest.Sum(t, reg, "sg_rc_refusals_received_total", map[string]string{"outcome": "dropped"}); n != floodN {
		t.Fatalf("dropped refusals counted %v, want %d", n, floodN)
	}
	// (b) The lines bounded: a burst per kind per period, two periods at
	// most in the test's time.
	for _, line := range []string{`"message":"bad message"`, "refusal dropped: forged or stale"} {
		if n := strings.Count(logs.String(), line); n > 2*defaults.LogBurst || n == 0 {
			t.Fatalf("%d lines %q about %d messages, want 1 to %d", n, line, floodN, 2*defaults.LogBurst)
		}
	}
	if line := logs.Line("refusal dropped"); !strings.Contains(line, `"request_id":"forged"`) {
		t.Fatalf("line about a dropped refusal without its request id: %s", line)
	}
}
