package rc

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/sg-project/sg/messages"
	"github.com/sg-project/sg/subjects"
	"github.com/sg-project/sg/test/natstest"
)

// TestWarmUpHoldsEarlyRequests: a request that reaches a just-started RC
// before any DAP has registered waits for the fleet view to warm rather than
// fail "No DAP serves table"; the RC is Warm only once a heartbeat period has
// passed (no state stream names DAPs here).
func TestWarmUpHoldsEarlyRequests(t *testing.T) {
	f := startRC(t, func(c *Config) { c.WarmUp = 400 * time.Millisecond })
	replies, _ := f.nc.SubscribeSync("reply.early")
	portions, _ := f.nc.SubscribeSync(f.s.DAPPortion("d1"))
	start := time.Now()
	f.submit("early", 5*time.Second, "reply.early") // no DAP known yet
	// The DAP registers a little later, as after a restart of the RC.
	f.registerDAP("d1", true)
	pd, err := messages.DecodeValid[messages.PortionDispatch](next(t, portions).Data)
	if err != nil || pd.RequestID != "early" {
		t.Fatalf("dispatch %+v %v", pd, err)
	}
	if m, err := replies.NextMsg(50 * time.Millisecond); err == nil {
		st, _ := messages.ReadStatus(m.Header)
		t.Fatalf("early request answered %v instead of dispatched", st)
	}
	if el := time.Since(start); el < 300*time.Millisecond {
		t.Logf("dispatched after %s", el) // every known DAP heard from may end warm-up early
	}
}

// TestWarmUpEndsAfterThePeriod: Warm closes after the period when the
// state stream names no DAP, and not before it.
func TestWarmUpEndsAfterThePeriod(t *testing.T) {
	srvStart := time.Now()
	f := startRC(t, func(c *Config) { c.WarmUp = 300 * time.Millisecond })
	select {
	case <-f.rc.Warm():
		if el := time.Since(srvStart); el < 300*time.Millisecond {
			t.Fatalf("warm after %s, before the warm-up period", el)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("RC never warm")
	}
}

// TestWarmUpEndsWhenEveryReplayedDAPIsHeard: with the DAP state stream, the
// RC knows its DAPs at start; once each has been heard from live it is warm
// at once, long before the warm-up period.
func TestWarmUpEndsWhenEveryReplayedDAPIsHeard(t *testing.T) {
	srv := natstest.Start(t)
	nc := natstest.Connect(t, srv)
	s := subjects.Default()
	run := func(warm time.Duration) *RC {
		t.Helper()
		r, err := New(Config{ID: "rc-1", NC: nc, Subjects: s, Log: zerolog.Nop(), JetStream: &Durability{Memory: true},
			TickEvery: 50 * time.Millisecond, AnnounceEvery: 50 * time.Millisecond, WarmUp: warm})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- r.Run(ctx) }()
		t.Cleanup(func() {
			cancel()
			select {
			case <-done:
			case <-time.After(5 * time.Second):
				t.Error("rc did not stop")
			}
		})
		select {
		case <-r.Ready():
		case <-time.After(10 * time.Second):
			t.Fatal("rc not ready")
		}
		return r
	}
	run(-1) // creates the stream
	reg := messages.DAPRegistration{V: messages.DAPVersion, DAPID: "dap-a", Labels: messages.LabelSet{"region": "eu"},
		Tier: messages.TierRDB, Purview: messages.Unbounded, Tables: []messages.TableInfo{{Name: "trade", Kind: messages.TablePartitioned}},
		Available: true, Concurrency: 1}
	b, _ := messages.Encode(&reg)
	if err := nc.Publish(s.DAPRegister("dap-a"), b); err != nil {
		t.Fatal(err)
	}
	js, _ := jetstream.New(nc)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for {
		if st, err := js.Stream(ctx, s.DAPStateStream()); err == nil {
			if info, err := st.Info(ctx); err == nil && info.State.Msgs == 1 {
				break
			}
		}
		select {
		case <-ctx.Done():
			t.Fatal("the registration never reached the DAP state stream")
		case <-time.After(10 * time.Millisecond):
		}
	}
	r := run(time.Minute)
	if r.RecoveredDAPs() != 1 {
		t.Fatalf("recovered %d DAPs", r.RecoveredDAPs())
	}
	select {
	case <-r.Warm():
		t.Fatal("warm before hearing from the replayed DAP")
	default:
	}
	hb, _ := messages.Encode(&messages.DAPHeartbeat{V: messages.DAPVersion, DAPID: "dap-a", Seq: 1, SentAt: time.Now().UnixNano(), IntervalMS: 2000})
	if err := nc.Publish(s.DAPHeartbeat("dap-a"), hb); err != nil {
		t.Fatal(err)
	}
	select {
	case <-r.Warm():
	case <-time.After(5 * time.Second):
		t.Fatal("not warm after every replayed DAP was heard from")
	}
}

// TestWarmUpKeepsCancelsInOrder: a request cancelled while it is held is
// cancelled when the warm-up ends (its cancel is held behind it, not lost):
// the caller gets the cancel's answer and the DAP is told to stop.
func TestWarmUpKeepsCancelsInOrder(t *testing.T) {
	f := startRC(t, func(c *Config) { c.WarmUp = 300 * time.Millisecond })
	replies, _ := f.nc.SubscribeSync("reply.c1")
	dapCancels, _ := f.nc.SubscribeSync(f.s.DAPCancel("d1"))
	f.submit("c1", 5*time.Second, "reply.c1")
	m := nats.NewMsg(f.s.RCCancel("rc-1"))
	m.Header.Set(messages.HdrRequestID, "c1")
	if err := f.nc.PublishMsg(m); err != nil {
		t.Fatal(err)
	}
	f.registerDAP("d1", true)
	st, err := messages.ReadStatus(next(t, replies).Header)
	if err != nil || st.IsOK() {
		t.Fatalf("status %+v %v, want the cancel's", st, err)
	}
	if c := next(t, dapCancels); c.Header.Get(messages.HdrRequestID) != "c1" {
		t.Fatalf("DAP cancel for %q", c.Header.Get(messages.HdrRequestID))
	}
}

// TestWarmUpAnnounced: GWs learn from the announcement whether the RC can
// serve: it announces warming at start, and warm at once when its view
// warms, not at the next announcement period (an hour here).
func TestWarmUpAnnounced(t *testing.T) {
	f := startRC(t, func(c *Config) { c.WarmUp = 300 * time.Millisecond; c.AnnounceEvery = time.Hour })
	if a, err := messages.DecodeValid[messages.RCAnnouncement](f.first.Data); err != nil || !a.Warming {
		t.Fatalf("first announcement %+v (%v): want warming", a, err)
	}
	m, err := f.ann.NextMsg(5 * time.Second)
	if err != nil {
		t.Fatalf("no announcement when warm: %v", err)
	}
	a, err := messages.DecodeValid[messages.RCAnnouncement](m.Data)
	if err != nil {
		t.Fatal(err)
	}
	if a.Warming {
		t.Fatalf("second announcement still warming: %+v", a)
	}
	select {
	case <-f.rc.Warm():
	default:
		t.Fatal("announced warm before Warm closed")
	}
}
