package main

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sg-project/sg/messages"
	"github.com/sg-project/sg/subjects"
	"github.com/sg-project/sg/test/natstest"
)

// sg live --tables runs the label sets of a schema file: each registers its three DAPs,
// and stops cleanly when ctx ends, leaving its manifest.
func TestLiveCommand(t *testing.T) {
	srv := natstest.Start(t)
	nc := natstest.Connect(t, srv)
	dir := t.TempDir()
	schema := filepath.Join(dir, "tables.json")
	if err := os.WriteFile(schema, []byte(`{"labelSets": [{"desk": "fx"}, {"desk": "rates"}],
	  "tables": [{"name": "fills", "labels": ["desk"], "columns": [{"name": "time", "type": "timestamp"},
	    {"name": "desk", "type": "symbol"}, {"name": "qty", "type": "int"}]},
	    {"name": "book", "labels": ["desk"], "columns": [{"name": "name", "type": "symbol"}, {"name": "desk", "type": "symbol"}]}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	regs := make(chan messages.DAPRegistration, 16)
	sub, err := nc.Subscribe(subjects.Default().DAPRegister("*"), func(m *nats.Msg) {
		if r, err := messages.DecodeValid[messages.DAPRegistration](m.Data); err == nil {
			regs <- r
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	_ = nc.Flush()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- realMain(ctx, []string{"live", "--nats", srv.ClientURL(), "--dir", filepath.Join(dir, "data"), "--tables", schema,
			"--log-level", "error", "--eod-every", "1h"}, io.Discard, io.Discard)
	}()
	seen := map[string]messages.DAPRegistration{}
	for len(seen) < 6 {
		select {
		case r := <-regs:
			seen[r.DAPID] = r
		case err := <-done:
			t.Fatalf("sg live ended: %v", err)
		case <-time.After(20 * time.Second):
			t.Fatalf("registrations %v", seen)
		}
	}
	if r := seen["dap-fx-hdb"]; r.Tier != messages.TierHDB || len(r.Tables) != 2 || r.Tables[1].Kind != messages.TableSharded {
		t.Fatalf("hdb registration %+v", r)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("sg live did not stop")
	}
	for _, key := range []string{"desk=fx", "desk=rates"} {
		if _, err := os.Stat(filepath.Join(dir, "data", key, "manifest.json")); err != nil {
			t.Fatal(err)
		}
	}
	// A bad schema is refused with the reason.
	bad := filepath.Join(dir, "bad.json")
	_ = os.WriteFile(bad, []byte(`{"labelSets":[{"desk":"fx"}],"tables":[{"name":"t","columns":[{"name":"time","type":"date"}]}]}`), 0o644)
	if err := realMain(context.Background(), []string{"live", "--nats", srv.ClientURL(), "--dir", dir, "--tables", bad, "--log-level", "error"}, io.Discard, io.Discard); err == nil {
		t.Fatal("bad schema accepted")
	}
}
