package main

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// The small floor is only a floor if it makes sg's messages: with the log,
// each request's entry and then its `answered` record are written (the
// record last on the request's subject, empty, with its TTL); without, no
// stream is made.
func TestSmallFloorWritesTheRequestLog(t *testing.T) {
	srv := testNATSServer(t)
	dial := func() (*nats.Conn, error) { return nats.Connect(srv.ClientURL(), inProcess(srv)) }
	caller, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer caller.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	const calls = 5
	f, err := startSmallFloor(ctx, dial, true)
	if err != nil {
		t.Fatal(err)
	}
	for range calls {
		if n, err := f.call(caller, []byte(`{"table":"trade"}`)); err != nil || n != floorBodyBytes {
			t.Fatalf("call: %d bytes, %v; want the answer's %d", n, err, floorBodyBytes)
		}
	}
	st, err := f.js.Stream(ctx, floorStreamName)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// One subject per request; each kept its last record only, `answered`,
	// which replaced the entry (2 writes each: sequences 1 to 2*calls).
	if info.State.Msgs != calls || info.State.LastSeq != 2*calls {
		t.Fatalf("stream holds %d records, last sequence %d; want %d and %d", info.State.Msgs, info.State.LastSeq, calls, 2*calls)
	}
	for i := 1; i <= calls; i++ {
		m, err := st.GetLastMsgForSubject(ctx, f.base+".log."+strconv.Itoa(i))
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		if len(m.Data) != 0 || m.Header.Get(jetstream.MsgTTLHeader) == "" {
			t.Fatalf("request %d: last record %d bytes, TTL %q; want `answered`: empty, with a TTL", i, len(m.Data), m.Header.Get(jetstream.MsgTTLHeader))
		}
	}
	f.close()
	// Asked on the caller's connection: the floor's own are closed.
	js, err := jetstream.New(caller)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.Stream(ctx, floorStreamName); !errors.Is(err, jetstream.ErrStreamNotFound) {
		t.Fatalf("after close, the floor's stream: %v; want it deleted", err)
	}

	f, err = startSmallFloor(ctx, dial, false)
	if err != nil {
		t.Fatal(err)
	}
	defer f.close()
	if _, err := f.call(caller, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := js.Stream(ctx, floorStreamName); !errors.Is(err, jetstream.ErrStreamNotFound) {
		t.Fatalf("a floor without the log, its stream: %v; want none", err)
	}
}

func TestFloorAck(t *testing.T) {
	if seq, err := floorAck([]byte(`{"stream":"sg-bench-floor","seq":42}`)); err != nil || seq != 42 {
		t.Fatalf("got %d, %v; want 42", seq, err)
	}
	for _, bad := range []string{`{"error":{"code":400,"err_code":10071,"description":"wrong last sequence: 1"}}`, `{"stream":"X"}`, `{"seq":}`} {
		if _, err := floorAck([]byte(bad)); err == nil {
			t.Errorf("%s: no error", bad)
		}
	}
}
