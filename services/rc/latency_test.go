package rc

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/sg-project/sg/messages"
)

// TestLatencyExcludesTheAggsHeldTime: the Agg holds an answer's notice for
// others to the same RC (AggDoneEntry.Held); the request's latency ends when
// the answer went out, so the RC takes the held time off. Here the notice
// arrives 10 s (of the RC's clock) after the request, having been held 4 s:
// the request took 6 s, not 10.
func TestLatencyExcludesTheAggsHeldTime(t *testing.T) {
	reg := prometheus.NewRegistry()
	var ahead atomic.Int64 // how far the RC's clock runs ahead of the wall's
	f := startRC(t, func(c *Config) {
		c.Registry = reg
		c.Now = func() time.Time { return time.Now().Add(time.Duration(ahead.Load())) }
	})
	portions, _ := f.nc.SubscribeSync(f.s.DAPPortion("d1"))
	expects, _ := f.nc.SubscribeSync(f.s.AggExpect("agg-1"))
	f.registerDAP("d1", true)
	f.submit("qh", time.Hour, "reply.qh")
	f.completeDispatched(portions, expects, "d1")
	ahead.Store(int64(10 * time.Second))
	f.publish(f.s.RCAggDone("rc-1"), &messages.AggDone{V: messages.AggDoneVersion, AggID: "agg-1", Done: []messages.AggDoneEntry{{
		RequestID: "qh", Status: messages.Status{RC: messages.CodeOK, AC: messages.CodeOK}, Held: int64(4 * time.Second)}}})

	m := waitMetric(t, reg, "kxi_rc_req_complete_time", func(m *dto.Metric) bool { return m.GetHistogram().GetSampleCount() > 0 })
	count, sum := m.GetHistogram().GetSampleCount(), m.GetHistogram().GetSampleSum()
	if count != 1 {
		t.Fatalf("kxi_rc_req_complete_time has %d samples within 5 s, want 1", count)
	}
	// 6 s and what the test itself took (well under a second).
	if sum < 6 || sum >= 7 {
		t.Fatalf("the request took %.3f s by kxi_rc_req_complete_time, want 6 s (10 s less the 4 s held at the Agg)", sum)
	}
}
