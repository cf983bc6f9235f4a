package gw

import (
	"bytes"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/rs/zerolog"

	"github.com/sg-project/sg/messages"
	"github.com/sg-project/sg/services/gw/core"
)

// TestTickHearsQueuedInputsFirst: after a stall of the GW's loop (10 s in
// which nothing was handled), a tick does not judge an RC gone whose
// announcement waits in the loop's channel (the GW never says it is not
// ready), nor fail a log write whose acknowledgement waits in the ack
// channel; with nothing waiting, the same tick judges both.
func TestTickHearsQueuedInputsFirst(t *testing.T) {
	for _, queued := range []bool{true, false} {
		lw, nc := testLogWrites(t)
		g := lw.l.g
		g.rlog = lw.l
		var logged bytes.Buffer // written by this goroutine only: the shell is stepped here
		g.log = zerolog.New(&logged)
		t0 := time.Now().UnixNano()
		period := int64(200 * time.Millisecond)
		c := core.New(core.Config{Self: g.cfg.ID, Incarnation: t0, Start: t0, TimeoutMargin: int64(time.Second),
			AnnounceEvery: period, DeadAfter: int64(time.Second), MaxInFlight: 10, MaxInFlightPerCaller: 10,
			MaxAnswerBytes: 1 << 20, Logged: true, LogRetry: int64(time.Second),
			LogSubject: g.s.RequestLogEntry, AnswerSubject: g.s.GWAnswer})
		timer := time.NewTimer(time.Hour)
		sh := &shell{g: g, c: c, lw: lw, timer: timer, stall: g.newStallWatch()}
		sh.step(core.RCAnnounced{At: t0, RC: core.RCInfo{ID: "rc1", StartedAt: 1, Period: period}})
		if len(c.RCs()) != 1 {
			t.Fatalf("RC not known after its announcement: %v", c.RCs())
		}

		// A log write whose acknowledgement comes back.
		silent, err := nc.SubscribeSync("log.tick")
		if err != nil {
			t.Fatal(err)
		}
		w := core.WriteLog{ID: "r1", Subject: "log.tick", Op: "answered",
			Entry: messages.LogEntry{V: 1, RequestID: "r1", State: messages.LogAnswered}}
		if ev := lw.send(nc, logSend{write: w}, t0); ev != nil {
			t.Fatalf("send: %#v", ev)
		}
		m, err := silent.NextMsg(testWait)
		if err != nil {
			t.Fatal(err)
		}

		stalled := t0 + int64(10*time.Second) // the loop stalled
		if queued {
			g.in <- input{ev: core.RCAnnounced{At: stalled, RC: core.RCInfo{ID: "rc1", StartedAt: 1, Period: period}}}
			if err := nc.Publish(m.Reply, []byte(`{"stream":"`+g.s.RequestLogStream()+`","seq":4}`)); err != nil {
				t.Fatal(err)
			}
			// Bounded wait for the acknowledgement to be queued, as the
			// loop would find it.
			for deadline := time.Now().Add(testWait); len(lw.acks) == 0; {
				if time.Now().After(deadline) {
					t.Fatal("acknowledgement not delivered")
				}
				if err := nc.Flush(); err != nil {
					t.Fatal(err)
				}
			}
		}
		sh.tick(stalled, 0) // not measured: the loop judged all along, the silence is the RC's
		if known := len(c.RCs()) == 1; known != queued {
			t.Fatalf("announcement queued %v: RC still known %v after the tick", queued, known)
		}
		// An announcement heard after the tick brings the RC back at once:
		// only the readiness it lost in between tells of the misjudgment.
		if flapped := strings.Contains(logged.String(), "gw not ready"); flapped == queued {
			t.Fatalf("announcement queued %v: GW said not ready %v", queued, flapped)
		}
		var mv dto.Metric
		if err := g.met.logErrors.WithLabelValues("answered").Write(&mv); err != nil {
			t.Fatal(err)
		}
		failed := mv.GetCounter().GetValue()
		if wantFailed := !queued; (failed == 1) != wantFailed || lw.busy() != 0 {
			t.Fatalf("acknowledgement queued %v: %v writes failed, %d under way after the tick", queued, failed, lw.busy())
		}
		if len(g.in) != 0 || len(lw.acks) != 0 {
			t.Fatalf("%d inputs and %d acknowledgements left", len(g.in), len(lw.acks))
		}
		timer.Stop()
	}
}
