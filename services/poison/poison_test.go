package poison

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/sg-project/sg/services/defaults"
)

func TestCounterSharedAndLogged(t *testing.T) {
	reg := prometheus.NewRegistry()
	a, err := NewCounter(reg)
	if err != nil {
		t.Fatal(err)
	}
	b, err := NewCounter(reg) // a second service in the same process
	if err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	log := zerolog.New(&logs)
	a.Skip(log, "SG_DAP_STATE", 7, "sg.evt.dap.d1.register", errors.New("malformed message: x"))
	b.Skip(log, "SG_DAP_STATE", 9, "sg.evt.dap.d1.status", errors.New("y"))
	b.Skip(log, "SG_LIVE", 3, "sg.live.x", errors.New("z"))
	if got := counts(t, reg); len(got) != 2 || got["SG_DAP_STATE"] != 2 || got["SG_LIVE"] != 1 {
		t.Fatalf("counts %v, want SG_DAP_STATE 2, SG_LIVE 1", got)
	}
	if got := strings.Count(logs.String(), "poison record skipped"); got != 3 {
		t.Fatalf("%d log lines, want 3:\n%s", got, logs.String())
	}
	for _, want := range []string{`"seq":7`, `"stream":"SG_DAP_STATE"`, `"subject":"sg.evt.dap.d1.register"`, `"error":"malformed message: x"`} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("log lacks %s:\n%s", want, logs.String())
		}
	}
	if _, err := NewCounter(nil); err != nil {
		t.Fatal(err)
	}
}

// counts gathers the counter's series from reg, by stream.
func counts(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != MetricName {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "stream" {
					out[l.GetValue()] = m.GetCounter().GetValue()
				}
			}
		}
	}
	return out
}

// TestPoisonFloodLogsWithinTheLimit: a stream full of poison counts every
// record but logs at most loglimit's burst per stream (in the test's time,
// two periods at most); another stream's records are logged apart.
func TestPoisonFloodLogsWithinTheLimit(t *testing.T) {
	reg := prometheus.NewRegistry()
	c, err := NewCounter(reg)
	if err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	log := zerolog.New(&logs)
	const n = 5000
	for i := range n {
		c.Skip(log, "SG_LIVE", uint64(i+1), "sg.live.x", errors.New("malformed"))
	}
	c.Skip(log, "SG_DAP_STATE", 1, "sg.evt.dap.d1.register", errors.New("malformed"))
	if got := counts(t, reg); got["SG_LIVE"] != n || got["SG_DAP_STATE"] != 1 {
		t.Fatalf("counts %v, want SG_LIVE %d, SG_DAP_STATE 1", got, n)
	}
	if lines := strings.Count(logs.String(), `"stream":"SG_LIVE"`); lines == 0 || lines > 2*defaults.LogBurst {
		t.Fatalf("%d lines about %d poison records, want 1 to %d", lines, n, 2*defaults.LogBurst)
	}
	if !strings.Contains(logs.String(), `"stream":"SG_DAP_STATE"`) {
		t.Fatal("another stream's poison record not logged: streams are limited apart")
	}
}
