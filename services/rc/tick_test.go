package rc

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/sg-project/sg/messages"
	"github.com/sg-project/sg/subjects"
	"github.com/sg-project/sg/test/natstest"
)

// tickRC is an RC on nc whose clock is *clock, warm, with DAP d1 registered
// and beating every 200 ms as of *clock; hb is d1's heartbeat.
func tickRC(t *testing.T, nc *nats.Conn, clock *time.Time, cfg Config) (r *RC, hb []byte) {
	t.Helper()
	cfg.ID, cfg.NC, cfg.Subjects, cfg.Log, cfg.WarmUp = "rc-1", nc, subjects.Default(), zerolog.Nop(), -1
	cfg.Now = func() time.Time { return *clock }
	r, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	r.isWarm = true
	reg := messages.DAPRegistration{V: messages.DAPVersion, DAPID: "d1", Labels: messages.LabelSet{"region": "eu"},
		Tier: messages.TierHDB, Purview: messages.Unbounded, Tables: []messages.TableInfo{{Name: "trade", Kind: messages.TablePartitioned}},
		Available: true, Concurrency: 1, PurviewVersion: 1, ReferenceVintage: 1}
	data, err := messages.Encode(&reg)
	if err != nil {
		t.Fatal(err)
	}
	r.dapEvent("d1", subjects.EventRegister, data, *clock)
	hb, err = messages.Encode(&messages.DAPHeartbeat{V: messages.DAPVersion, DAPID: "d1", Seq: 1, IntervalMS: 200,
		PurviewVersion: 1, ReferenceVintage: 1})
	if err != nil {
		t.Fatal(err)
	}
	r.dapEvent("d1", subjects.EventHeartbeat, hb, *clock)
	return r, hb
}

// TestTickHearsQueuedHeartbeatsFirst: after 10 s in which nothing was
// handled (the loop judged all along: the silence is the DAP's), a tick does
// not drop a DAP whose heartbeat is waiting in the inbox; with no heartbeat
// waiting, the same tick drops it.
func TestTickHearsQueuedHeartbeatsFirst(t *testing.T) {
	nc := natstest.Connect(t, natstest.Start(t))
	s := subjects.Default()
	for _, queued := range []bool{true, false} {
		clock := time.Unix(1_000_000, 0)
		r, hb := tickRC(t, nc, &clock, Config{})

		clock = clock.Add(10 * time.Second)
		r.awake = clock // not a stall of the RC's (stall.go)
		inbox := make(chan input, 4)
		if queued {
			inbox <- input{subject: s.DAPHeartbeat("d1"), msg: &nats.Msg{Subject: s.DAPHeartbeat("d1"), Data: hb}}
		}
		r.onTick(inbox)
		if _, known := r.daps["d1"]; known != queued {
			t.Fatalf("heartbeat queued %v: DAP still known %v after the tick", queued, known)
		}
		if len(inbox) != 0 {
			t.Fatalf("%d inputs left in the inbox", len(inbox))
		}
	}
}

// TestStallIsNotSilence: the RC's own loop stalled 10 s (a stopped or
// starved process; in sg run its DAPs and Aggs with it): the first tick after
// it drops neither the DAP nor the Agg, whose beats could not be heard
// meanwhile; silence after it, on the RC's running time, still drops both.
func TestStallIsNotSilence(t *testing.T) {
	nc := natstest.Connect(t, natstest.Start(t))
	clock := time.Unix(1_000_000, 0)
	const period = 100 * time.Millisecond // the RC's announcement period: its loop wakes at least this often
	r, _ := tickRC(t, nc, &clock, Config{AnnounceEvery: period, AggIDs: []string{"agg-1"}})
	ahb, err := messages.Encode(&messages.AggHeartbeat{V: messages.AggVersion, AggID: "agg-1", Seq: 1, StartedAt: 1, IntervalMS: 200})
	if err != nil {
		t.Fatal(err)
	}
	r.aggs["agg-1"] = &aggRecord{lastSeen: clock, interval: defaultAggHeartbeat}
	r.onAggHeartbeat("agg-1", ahb, clock)
	inbox := make(chan input)
	r.onTick(inbox) // the loop runs

	clock = clock.Add(10 * time.Second) // the loop stalled
	r.onTick(inbox)
	if _, known := r.daps["d1"]; !known {
		t.Fatal("the DAP was dropped for the RC's own stall")
	}
	if r.aggs["agg-1"].dead {
		t.Fatal("the Agg was lost for the RC's own stall")
	}
	// Nothing heard after the stall: 3 intervals (600 ms) of the RC's
	// running time, judged at its period, and both are gone.
	for range 10 {
		clock = clock.Add(period)
		r.onTick(inbox)
	}
	if _, known := r.daps["d1"]; known {
		t.Fatal("the DAP, silent 1 s after the stall, is still known")
	}
	if !r.aggs["agg-1"].dead {
		t.Fatal("the Agg, silent 1 s after the stall, is not lost")
	}
}
