package dap

import (
	"context"
	"testing"
	"time"

	"github.com/sg-project/sg/messages"
	"github.com/vmihailenco/msgpack/v5"
)

// TestReadyOnceRegistered: Ready closes once the DAP is subscribed and has
// registered, not before Run, and then a dispatch sent at once is served.
func TestReadyOnceRegistered(t *testing.T) {
	nc := startNATS(t, 0)
	cfg := testConfig(nc, funcSource(func(context.Context, string, messages.Args) ([]byte, error) { return msgpack.Marshal("ok") }))
	reg := subscribe(t, nc, cfg.Subjects.DAPRegister(cfg.ID))
	d, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-d.Ready():
		t.Fatal("ready before Run")
	default:
	}
	d = runDAP(t, cfg)
	select {
	case <-d.Ready():
	case <-time.After(wait):
		t.Fatal("not ready")
	}
	// Ready comes after the registration was published.
	if _, err := reg.NextMsg(wait); err != nil {
		t.Fatalf("ready without a registration: %v", err)
	}
	done := subscribe(t, nc, cfg.Subjects.RCCompletion(cfg.RCID))
	send(t, nc, cfg.ID, dispatch(1, map[string]any{"table": "trade"}))
	if _, err := done.NextMsg(wait); err != nil {
		t.Fatalf("no completion of a portion sent once ready: %v", err)
	}
}
