package gw_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"github.com/sg-project/sg/messages"
	"github.com/sg-project/sg/services/gw"
	"github.com/sg-project/sg/services/poison"
	"github.com/sg-project/sg/subjects"
)

// Request log records that do not decode, or that a GW must not act on (a
// client reply that is an internal subject), are skipped: counted and logged
// once each with their stream sequence, never adopted, never answered; the
// GW sweeps on and serves.
func TestRequestLogPoisonRecords(t *testing.T) {
	e := startGW(t, func(c *gw.Config) {
		c.RequestLog = &gw.Durability{Memory: true}
		c.AnnounceEvery, c.DeadAfter, c.SweepEvery = 50*time.Millisecond, 200*time.Millisecond, 100*time.Millisecond
	})
	lost := e.s.Prefix() + ".evt.dap.d1.lost"
	spy, err := e.nc.SubscribeSync(lost)
	if err != nil {
		t.Fatal(err)
	}
	js, err := jetstream.New(e.nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	// A map whose field claims an array of 4,294,967,295 entries.
	if _, err := js.Publish(ctx, e.s.RequestLogEntry("gw-dead", "r1"), []byte("\x81\xa3sub\xdd\xff\xff\xff\xff")); err != nil {
		t.Fatal(err)
	}
	planted := messages.LogEntry{V: messages.RecoveryVersion, RequestID: "r2", State: messages.LogOpen, GWID: "gw-dead",
		GWStarted: 1, ClientReply: lost, API: subjects.APIPing, Content: messages.ContentJSON,
		Submission: messages.RCSubmission{V: messages.RCVersion, RequestID: "r2", GWID: "gw-dead",
			Header: messages.RequestHeader{API: subjects.APIPing}, ReplyTo: e.s.GWAnswer("gw-dead", "r2"),
			Content: messages.ContentJSON, Deadline: time.Now().Add(time.Hour).UnixNano(), ReceivedAt: time.Now().UnixNano()}}
	if err := planted.Validate(); err != nil {
		t.Fatalf("the planted entry must pass decoding: %v", err)
	}
	data, err := messages.Encode(&planted)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, e.s.RequestLogEntry("gw-dead", "r2"), data); err != nil {
		t.Fatal(err)
	}
	poison := func() float64 { return counterL(t, e, gw.PoisonMetric, "stream", gw.PoisonStreamRequestLog) }
	for deadline := time.Now().Add(wait); poison() < 2; {
		if time.Now().After(deadline) {
			t.Fatalf("poison records counted %v, want 2", poison())
		}
		time.Sleep(20 * time.Millisecond) // polling a counter, bounded
	}
	// Several more sweeps pass over them: still counted once each.
	time.Sleep(5 * 100 * time.Millisecond)
	if n := poison(); n != 2 {
		t.Fatalf("poison records counted %v after more sweeps, want 2", n)
	}
	if n := counter(t, e.reg, "sg_gw_requests_adopted_total"); n != 0 {
		t.Fatalf("adopted %v", n)
	}
	if m, err := spy.NextMsg(50 * time.Millisecond); err == nil {
		t.Fatalf("the GW answered onto %s: %q", m.Subject, m.Data)
	}
	// Still serving (no RC here: the answer is NO_RESOURCES).
	if r := e.raw(subjects.APIPing, nil, []byte(`{"header":{"api":"ping"},"payload":{}}`)); r.Header.Status.RC != messages.CodeNoResources {
		t.Fatalf("after poison: %v", r.Header.Status)
	}
}

// counterL reads a counter with one label from e's registry.
func counterL(t *testing.T, e *env, name, label, value string) float64 {
	t.Helper()
	mfs, err := e.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == label && l.GetValue() == value {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

// Another service of the same process may register the poison counter
// first: the GW shares it.
func TestPoisonMetricShared(t *testing.T) {
	reg := prometheus.NewRegistry()
	other, err := poison.NewCounter(reg)
	if err != nil {
		t.Fatal(err)
	}
	other.Skip(zerolog.Nop(), "dap_state", 1, "sg.state.dap.x", errors.New("bad"))
	if _, err := gw.New(gw.Config{ID: "gw1", NC: startNATS(t), Registry: reg}); err != nil {
		t.Fatalf("New with the poison counter registered already: %v", err)
	}
}
