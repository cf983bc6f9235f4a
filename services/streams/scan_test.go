package streams_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sg-project/sg/services/streams"
	"github.com/sg-project/sg/test/natstest"
)

func setup(t *testing.T) (jetstream.JetStream, jetstream.Stream) {
	t.Helper()
	nc := natstest.Connect(t, natstest.Start(t))
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "SCAN", Subjects: []string{"scan.>"}, Storage: jetstream.MemoryStorage})
	if err != nil {
		t.Fatal(err)
	}
	// a.0..a.4 twice each (the second round is each subject's last), b.0..b.2 once.
	for round := range 2 {
		for i := range 5 {
			if _, err := js.Publish(ctx, fmt.Sprintf("scan.a.%d", i), fmt.Appendf(nil, "a%d-%d", i, round)); err != nil {
				t.Fatal(err)
			}
		}
	}
	for i := range 3 {
		if _, err := js.Publish(ctx, fmt.Sprintf("scan.b.%d", i), fmt.Appendf(nil, "b%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	return js, st
}

func scanAll(t *testing.T, js jetstream.JetStream, o streams.Options) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var got []string
	var last uint64
	err := streams.Scan(ctx, js, "SCAN", o, func(r streams.Record) error {
		if r.Seq <= last || r.Time.IsZero() {
			t.Errorf("record %s: seq %d after %d, time %v", r.Subject, r.Seq, last, r.Time)
		}
		last = r.Seq
		got = append(got, r.Subject+"="+string(r.Data))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

func TestScanReadsWhatTheStreamHolds(t *testing.T) {
	js, st := setup(t)
	for _, tc := range []struct {
		name string
		o    streams.Options
		want string
	}{
		{"all", streams.Options{},
			"scan.a.0=a0-0 scan.a.1=a1-0 scan.a.2=a2-0 scan.a.3=a3-0 scan.a.4=a4-0 scan.a.0=a0-1 scan.a.1=a1-1 scan.a.2=a2-1 scan.a.3=a3-1 scan.a.4=a4-1 scan.b.0=b0 scan.b.1=b1 scan.b.2=b2"},
		{"last per subject", streams.Options{LastPerSubject: true},
			"scan.a.0=a0-1 scan.a.1=a1-1 scan.a.2=a2-1 scan.a.3=a3-1 scan.a.4=a4-1 scan.b.0=b0 scan.b.1=b1 scan.b.2=b2"},
		{"filtered", streams.Options{Filter: "scan.b.*"}, "scan.b.0=b0 scan.b.1=b1 scan.b.2=b2"},
		{"filtered, nothing there", streams.Options{Filter: "scan.c.*"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := strings.Join(scanAll(t, js, tc.o), " "); got != tc.want {
				t.Fatalf("read\n%s\nwant\n%s", got, tc.want)
			}
		})
	}
	// Each scan deletes its consumer: sweeps repeated for days leave none.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n := info.State.Consumers; n != 0 {
		t.Fatalf("%d consumers left after the scans, want 0", n)
	}
}

// A scan whose context ends stops at once, mid-batch, with the context's
// error: a stopping service does not wait for the rest of a stream.
func TestScanStopsWithItsContext(t *testing.T) {
	js, _ := setup(t)
	ctx, cancel := context.WithCancel(context.Background())
	n := 0
	err := streams.Scan(ctx, js, "SCAN", streams.Options{}, func(streams.Record) error {
		n++
		if n == 3 {
			cancel()
		}
		return nil
	})
	if !errors.Is(err, context.Canceled) || n != 3 {
		t.Fatalf("scan returned %v after %d records, want context.Canceled after 3", err, n)
	}
	// fn's own error ends the scan and is returned as is.
	stop := errors.New("enough")
	if err := streams.Scan(context.Background(), js, "SCAN", streams.Options{}, func(streams.Record) error { return stop }); err != stop {
		t.Fatalf("scan returned %v, want fn's error", err)
	}
}

func TestScanOfAMissingStreamFails(t *testing.T) {
	js, _ := setup(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := streams.Scan(ctx, js, "NOPE", streams.Options{}, func(streams.Record) error { return nil })
	if err == nil || !strings.Contains(err.Error(), "stream NOPE") {
		t.Fatalf("scan of a missing stream: %v, want an error naming it", err)
	}
}
