package rc

import (
	"strings"
	"testing"

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
