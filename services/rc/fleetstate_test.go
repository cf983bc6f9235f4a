package rc

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/sg-project/sg/messages"
	"github.com/sg-project/sg/services/poison"
	"github.com/sg-project/sg/subjects"
	"github.com/sg-project/sg/test/natstest"
	"github.com/sg-project/sg/test/testlog"
)

// hugeTables is the 13-byte message of issue 8: a registration whose tables
// field claims 4,294,967,295 entries.
var hugeTables = []byte{0x81, 0xa6, 't', 'a', 'b', 'l', 'e', 's', 0xdd, 0xff, 0xff, 0xff, 0xff}

// A DAP state stream that holds poison records (the 13-byte message, a
// truncated registration, a registration on another DAP's subject) still
// rebuilds the fleet: each is skipped, counted and logged with its sequence.
func TestReplaySkipsPoisonRecords(t *testing.T) {
	srv := natstest.Start(t)
	nc := natstest.Connect(t, srv)
	s := subjects.Default()
	run := func(reg *prometheus.Registry, logs *testlog.Buffer) *RC {
		t.Helper()
		r, err := New(Config{ID: "rc-1", NC: nc, Subjects: s, Log: zerolog.New(logs), Registry: reg,
			JetStream: &Durability{Memory: true}, TickEvery: 50 * time.Millisecond, AnnounceEvery: 50 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- r.Run(ctx) }()
		t.Cleanup(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("rc run: %v", err)
				}
			case <-time.After(5 * time.Second):
				t.Error("rc did not stop within 5s")
			}
		})
		select {
		case <-r.Ready():
		case err := <-done:
			t.Fatalf("rc stopped before it was ready: %v", err)
		case <-time.After(10 * time.Second):
			t.Fatal("rc not ready within 10s")
		}
		return r
	}
	var logs1 testlog.Buffer
	run(nil, &logs1) // creates the stream; the records below reach it live too

	good := messages.DAPRegistration{V: messages.DAPVersion, DAPID: "dap-a", Labels: messages.LabelSet{"region": "eu"},
		Tier: messages.TierRDB, Purview: messages.Unbounded, Tables: []messages.TableInfo{{Name: "trade", Kind: messages.TablePartitioned}},
		Available: true, Concurrency: 1}
	goodBytes, err := messages.Encode(&good)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []struct {
		subject string
		data    []byte
	}{
		{s.DAPRegister("dap-a"), goodBytes},
		{s.DAPRegister("dap-x"), hugeTables},
		{s.DAPRegister("dap-y"), goodBytes[:len(goodBytes)/2]},
		{s.DAPRegister("dap-z"), goodBytes}, // dap-a's registration on dap-z's subject
	} {
		if err := nc.Publish(p.subject, p.data); err != nil {
			t.Fatal(err)
		}
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for {
		st, err := js.Stream(ctx, s.DAPStateStream())
		if err == nil {
			if info, err := st.Info(ctx); err == nil && info.State.Msgs == 4 {
				break
			}
		}
		select {
		case <-ctx.Done():
			t.Fatal("the DAP state stream did not hold 4 records within 5s")
		case <-time.After(10 * time.Millisecond):
		}
	}

	// A second RC (the first still runs: same stream, another id is not
	// needed for the replay) rebuilds the fleet from the stream.
	reg := prometheus.NewRegistry()
	var logs2 testlog.Buffer
	r2 := run(reg, &logs2)
	if n := r2.RecoveredDAPs(); n != 1 {
		t.Fatalf("recovered %d DAPs, want 1 (dap-a)", n)
	}
	if got := poisonCount(t, reg, s.DAPStateStream()); got != 3 {
		t.Fatalf("%s{stream=%q} = %v, want 3", poison.MetricName, s.DAPStateStream(), got)
	}
	if n := strings.Count(logs2.String(), "poison record skipped"); n != 3 {
		t.Fatalf("%d poison log lines, want 3:\n%s", n, logs2.String())
	}
	for _, want := range []string{`"seq":2`, `"seq":3`, `"seq":4`, "announces 4294967295 values", `on the subject of DAP \"dap-z\"`} {
		if !strings.Contains(logs2.String(), want) {
			t.Errorf("replay log lacks %s:\n%s", want, logs2.String())
		}
	}
}

func poisonCount(t *testing.T, reg *prometheus.Registry, stream string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != poison.MetricName {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "stream" && l.GetValue() == stream {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

// A replay that overruns RecoverTimeout (here at once) is cut short, and the
// RC comes up anyway with what it read.
func TestReplayCutShortStillComesUp(t *testing.T) {
	srv := natstest.Start(t)
	nc := natstest.Connect(t, srv)
	s := subjects.Default()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: s.DAPStateStream(), Subjects: s.DAPEventStreamSubjects(),
		MaxMsgsPerSubject: 1, Storage: jetstream.MemoryStorage}); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		id := fmt.Sprintf("dap-%d", i)
		b, _ := messages.Encode(&messages.DAPRegistration{V: messages.DAPVersion, DAPID: id, Labels: messages.LabelSet{"region": "eu"},
			Tier: messages.TierRDB, Purview: messages.Unbounded, Available: true, Concurrency: 1})
		if _, err := js.Publish(ctx, s.DAPRegister(id), b); err != nil {
			t.Fatal(err)
		}
	}
	var logs testlog.Buffer
	r, err := New(Config{ID: "rc-1", NC: nc, Subjects: s, Log: zerolog.New(&logs), JetStream: &Durability{Memory: true},
		RecoverTimeout: time.Nanosecond, TickEvery: 50 * time.Millisecond, AnnounceEvery: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(context.Background())
	defer stop()
	done := make(chan error, 1)
	go func() { done <- r.Run(runCtx) }()
	select {
	case <-r.Ready():
	case err := <-done:
		t.Fatalf("rc stopped instead of coming up: %v", err)
	case <-ctx.Done():
		t.Fatal("rc not ready within 10s")
	}
	defer func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("rc run: %v", err)
		}
	}()
	if !strings.Contains(logs.String(), "DAP state replay cut short") {
		t.Fatalf("no warning about the cut replay:\n%s", logs.String())
	}
}
