package rc

import (
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// TestAssemblyFromKey: with the assembly key set, the RC's assembly is the
// value of that label (seed: KXI_ASSEMBLY_KEY); a name that disagrees is refused.
func TestAssemblyFromKey(t *testing.T) {
	nc := &nats.Conn{}
	c, err := Config{ID: "rc-1", NC: nc, AssemblyKey: "asm", Labels: map[string]string{"asm": "eu", "x": "y"}}.withDefaults()
	if err != nil || c.Assembly != "eu" {
		t.Fatalf("assembly %q, err %v; want eu", c.Assembly, err)
	}
	c, err = Config{ID: "rc-1", NC: nc, AssemblyKey: "asm", Labels: map[string]string{"x": "y"}}.withDefaults()
	if err != nil || c.Assembly != "" {
		t.Fatalf("no label: assembly %q, err %v; want a global RC", c.Assembly, err)
	}
	if _, err := (Config{ID: "rc-1", NC: nc, AssemblyKey: "asm", Assembly: "us", Labels: map[string]string{"asm": "eu"}}).withDefaults(); err == nil || !strings.Contains(err.Error(), "disagrees") {
		t.Fatalf("disagreeing name: err %v", err)
	}
	if _, err := (Config{ID: "rc-1", NC: nc, AssemblyKey: "asm", Labels: map[string]string{"asm": "e u"}}).withDefaults(); err == nil {
		t.Fatal("an assembly label that is not a subject token was accepted")
	}
	// MaxRetry passes through: the core owns the default, and 0 is not turned into 3 here.
	if c, _ := (Config{ID: "rc-1", NC: nc, MaxRetry: -1}).withDefaults(); c.MaxRetry != -1 {
		t.Fatalf("MaxRetry %d", c.MaxRetry)
	}
}

// TestLabelSetRetentionFromEnv: SG_RC_LABEL_SET_RETENTION takes a Go
// duration or milliseconds; 0 is "remember nothing" (negative in Config).
func TestLabelSetRetentionFromEnv(t *testing.T) {
	for _, tc := range []struct {
		v    string
		want time.Duration
		bad  bool
	}{
		{"90s", 90 * time.Second, false},
		{"600000", 10 * time.Minute, false},
		{" 1h ", time.Hour, false},
		{"0", -1, false},
		{"0s", -1, false},
		{"-5m", 0, true},
		{"ten minutes", 0, true},
		{"99999999999999999", 0, true},
	} {
		c := Config{}
		err := c.LimitsFromEnv(func(k string) (string, bool) { return tc.v, k == EnvLabelSetRetention })
		if tc.bad {
			if err == nil || !strings.Contains(err.Error(), EnvLabelSetRetention) {
				t.Errorf("%q: err %v, want one naming %s", tc.v, err, EnvLabelSetRetention)
			}
			continue
		}
		if err != nil || c.LabelSetRetention != tc.want {
			t.Errorf("%q: %v %v, want %v", tc.v, c.LabelSetRetention, err, tc.want)
		}
	}
	// Unset: as it was (the core's default).
	c := Config{}
	if err := c.LimitsFromEnv(func(string) (string, bool) { return "", false }); err != nil || c.LabelSetRetention != 0 {
		t.Fatalf("%v %v", c.LabelSetRetention, err)
	}
}
