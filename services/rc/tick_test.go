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

// TestTickHearsQueuedHeartbeatsFirst: after a stall of the RC's loop (its
// clock moved 10 s while nothing was handled), a tick does not drop a DAP
// whose heartbeat is waiting in the inbox; with no heartbeat waiting, the
// same tick drops it.
func TestTickHearsQueuedHeartbeatsFirst(t *testing.T) {
	nc := natstest.Connect(t, natstest.Start(t))
	s := subjects.Default()
	for _, queued := range []bool{true, false} {
		clock := time.Unix(1_000_000, 0)
		r, err := New(Config{ID: "rc-1", NC: nc, Subjects: s, Log: zerolog.Nop(), WarmUp: -1,
			Now: func() time.Time { return clock }})
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
		r.dapEvent("d1", subjects.EventRegister, data, clock)
		hb, err := messages.Encode(&messages.DAPHeartbeat{V: messages.DAPVersion, DAPID: "d1", Seq: 1, IntervalMS: 200,
			PurviewVersion: 1, ReferenceVintage: 1})
		if err != nil {
			t.Fatal(err)
		}
		r.dapEvent("d1", subjects.EventHeartbeat, hb, clock) // beats every 200 ms

		clock = clock.Add(10 * time.Second) // the loop stalled
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
