package retryafter

import (
	"strings"
	"testing"
	"time"

	"github.com/sg-project/sg/messages"
)

// The sg mapping: each stage's row, with the seed's figures where they map
// (D=10, P=2s, T=100ms, M=0.2) and the measured execution time replacing P.
func TestForStage(t *testing.T) {
	c := Config{NominalExec: 2 * time.Second, NominalAgg: 100 * time.Millisecond}
	for _, tc := range []struct {
		name string
		f    Facts
		ra   int
		eta  time.Duration
	}{
		// The seed's input-proof Queued table, p -> Retry-After.
		{"queued p=0", Facts{Stage: messages.JobQueued, Ahead: 0, DrainRate: 10}, 3, 2100 * time.Millisecond},
		{"queued p=1", Facts{Stage: messages.JobQueued, Ahead: 1, DrainRate: 10}, 3, 2200 * time.Millisecond},
		{"queued p=10", Facts{Stage: messages.JobQueued, Ahead: 10, DrainRate: 10}, 4, 3100 * time.Millisecond},
		{"queued p=100", Facts{Stage: messages.JobQueued, Ahead: 100, DrainRate: 10}, 15, 12100 * time.Millisecond},
		{"queued p=1000", Facts{Stage: messages.JobQueued, Ahead: 1000, DrainRate: 10}, 123, 102100 * time.Millisecond},
		// Measured execution replaces the nominal P: (5/2 + 0.5 + 0.1) × 1.2 = 3.72.
		{"queued measured", Facts{Stage: messages.JobQueued, Ahead: 5, DrainRate: 2, Exec: 500 * time.Millisecond}, 4, 3100 * time.Millisecond},
		// Items ahead, no drain measured: the backoff.
		{"queued unmeasured", Facts{Stage: messages.JobQueued, Ahead: 5, Elapsed: 70 * time.Second}, 10, 0},
		{"executing", Facts{Stage: messages.JobExecuting}, 3, 2100 * time.Millisecond},
		{"aggregating", Facts{Stage: messages.JobAggregating}, 1, 100 * time.Millisecond},
		{"waiting", Facts{Stage: messages.JobWaiting, Elapsed: 3 * time.Minute}, 30, 0},
		{"done", Facts{Stage: messages.JobDone}, 0, 0},
		{"failed", Facts{Stage: messages.JobFailed}, 0, 0},
		// The ceiling: 1000 items at 1/s is far beyond max.
		{"clamped", Facts{Stage: messages.JobQueued, Ahead: 1000, DrainRate: 1}, 300, 1002100 * time.Millisecond},
	} {
		ra, eta := ForStage(tc.f, c)
		if ra != tc.ra || eta != tc.eta {
			t.Errorf("%s: ForStage = %d, %s; want %d, %s", tc.name, ra, eta, tc.ra, tc.eta)
		}
	}
}

func TestQueuedAndNominalRate(t *testing.T) {
	// 8 ahead at 4 workers × 1/2s = 2/s: 4 s × 1.2 = 4.8 -> 5.
	if got := Queued(8, NominalRate(4, 2*time.Second), Params{}); got != 5 {
		t.Errorf("Queued = %d, want 5", got)
	}
	if got := Queued(0, 0, Params{}); got != 1 {
		t.Errorf("Queued(0) = %d, want min 1", got)
	}
}

func TestFromEnv(t *testing.T) {
	env := map[string]string{EnvMin: "2s", EnvMax: "1m", EnvSafetyMargin: "0.1", EnvNominalExec: "250ms"}
	c, err := FromEnv(Config{}, func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	if err != nil {
		t.Fatal(err)
	}
	c = c.WithDefaults()
	if c.Min != 2*time.Second || c.Max != time.Minute || c.SafetyMargin != 0.1 || c.NominalExec != 250*time.Millisecond || c.NominalAgg != DefaultNominalAgg {
		t.Fatalf("FromEnv = %+v", c)
	}
	env = map[string]string{EnvSafetyMargin: "0"}
	c, err = FromEnv(Config{}, func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	if err != nil || c.WithDefaults().SafetyMargin != 0 || c.WithDefaults().Max != DefaultMax {
		t.Fatalf("margin 0: %+v %v", c.WithDefaults(), err)
	}
	if _, err := FromEnv(Config{}, func(k string) (string, bool) { return "x", k == EnvMax }); err == nil {
		t.Fatal("bad duration accepted")
	}
}

// SG_ durations take milliseconds too (README: Configuration), as every
// other duration setting does through defaults.ParseDuration; a value that is
// not one names its setting, and 0 is refused (a zero field would silently
// take the default).
func TestFromEnvMillisecondsAndErrors(t *testing.T) {
	env := map[string]string{EnvMin: "5000", EnvMax: "60000", EnvNominalExec: "250", EnvNominalAgg: "5ms"}
	c, err := FromEnv(Config{}, func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	if err != nil {
		t.Fatal(err)
	}
	if c.Min != 5*time.Second || c.Max != time.Minute || c.NominalExec != 250*time.Millisecond || c.NominalAgg != 5*time.Millisecond {
		t.Fatalf("FromEnv = %+v", c)
	}
	for _, name := range []string{EnvMin, EnvMax, EnvNominalExec, EnvNominalAgg} {
		for _, v := range []string{"x", "-5", "0", "-1s"} {
			_, err := FromEnv(Config{}, func(k string) (string, bool) { return v, k == name })
			if err == nil || !strings.Contains(err.Error(), name) {
				t.Errorf("%s=%q: error %v, want one naming %s", name, v, err, name)
			}
		}
	}
}
