package gw

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/sg-project/sg/messages"
	"github.com/sg-project/sg/services/agg"
	"github.com/sg-project/sg/services/agg/merge"
	"github.com/sg-project/sg/services/dap/demo"
	"github.com/sg-project/sg/services/dap/engine"
	"github.com/sg-project/sg/services/gw/client"
	"github.com/sg-project/sg/services/gw/core"
	"github.com/sg-project/sg/subjects"
	"github.com/sg-project/sg/test/natstest"
	"github.com/sg-project/sg/test/promtest"
)

// slowAnswered is how long the `answered` write's acknowledgement is held
// at most in TestStreamWholeWhileAnsweredIsSlow: the slow JetStream write.
const slowAnswered = 300 * time.Millisecond

// A large streamed answer (far more frames than the GW holds while it
// writes `answered`) reaches its caller whole while that write is slow: the
// GW paces the Agg (StartStream), which sends messages.StreamStartFrames
// frames and waits for the GW. The acknowledgement of `answered` is held
// until the Agg sent more frames than the GW may hold (an Agg that does not
// wait) or slowAnswered passed. Real GW (with its request log), Agg and
// client; the RC and the DAP are played here.
func TestStreamWholeWhileAnsweredIsSlow(t *testing.T) {
	nc := natstest.Connect(t, natstest.Start(t))
	s := subjects.Default()
	log := zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.InfoLevel)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })

	// The partial: trade over eight hours, a few hundred frames of 1 KiB.
	t0 := time.Date(2024, 1, 2, 9, 0, 0, 0, time.UTC)
	t1 := t0.Add(8 * time.Hour)
	args := messages.GetDataArgs{Table: demo.Trade, StartTS: t0, EndTS: t1}
	st := engine.NewStore()
	if err := (demo.Config{Seed: 3}).Load(st, "eu", t0, t1, true); err != nil {
		t.Fatal(err)
	}
	part, err := st.Execute(args, t0, t1)
	if err != nil {
		t.Fatal(err)
	}
	payload, err := merge.EncodePartial(part)
	if err != nil {
		t.Fatal(err)
	}

	a, err := agg.New(agg.Config{ID: "agg-1", NC: nc, Subjects: s, Log: log, StreamWindow: 1024})
	if err != nil {
		t.Fatal(err)
	}
	wg.Go(func() {
		if err := a.Run(ctx); err != nil {
			t.Errorf("agg: %v", err)
		}
	})
	<-a.Ready()

	// The Agg's frames, as the GW gets them: once it sent more than the GW
	// may hold, or at slowAnswered, the `answered` acknowledgement goes on.
	frames := make(chan *nats.Msg, 4096)
	fsub, err := nc.ChanSubscribe(s.GWAnswerPattern("gw1"), frames)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = fsub.Unsubscribe() })
	release := make(chan struct{})
	wg.Go(func() {
		defer close(release)
		var slow <-chan time.Time // from frame 0 on
		for n := 0; n <= core.MaxHeldFrames+1; n++ {
			select {
			case m := <-frames:
				if n == 0 {
					slow = time.After(slowAnswered)
				}
				if m.Header.Get(messages.HdrStreamEnd) == "1" {
					t.Errorf("the answer ended at frame %d: too short to test", n)
					return
				}
			case <-slow:
				return
			case <-ctx.Done():
				return
			case <-time.After(testWait):
				t.Errorf("frame %d not sent", n)
				return
			}
		}
	})
	acks := make(chan *nats.Msg, 64)
	asub, err := nc.ChanSubscribe("held.>", acks)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = asub.Unsubscribe() })
	wg.Go(func() {
		select {
		case <-release:
		case <-ctx.Done():
			return
		}
		for {
			select {
			case m := <-acks:
				if err := nc.Publish(strings.TrimPrefix(m.Subject, "held."), m.Data); err != nil {
					t.Errorf("pass the acknowledgement on: %v", err)
				}
			case <-ctx.Done():
				return
			}
		}
	})

	g, err := New(Config{ID: "gw1", NC: nc, Subjects: s, Log: log, RequestLog: &Durability{Memory: true}, Timeout: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	g.divertAck = func(w core.WriteLog, reply string) string {
		if w.Op == "answered" {
			return "held." + reply
		}
		return reply
	}
	wg.Go(func() {
		if err := g.Run(ctx); err != nil {
			t.Errorf("gw: %v", err)
		}
	})
	<-g.Ready()

	// The RC: the expectation, then the DAP's partial.
	rcSub, err := nc.Subscribe(s.RCSubmit("rc1"), func(m *nats.Msg) {
		sub, err := messages.DecodeValid[messages.RCSubmission](m.Data)
		if err != nil {
			t.Errorf("submission: %v", err)
			return
		}
		x := messages.AggExpectation{RequestID: sub.RequestID, Seq: 1, API: sub.Header.API, Expect: []messages.PortionRef{{PortionID: 100, Attempt: 1}},
			Sealed: true, ReplyTo: sub.ReplyTo, RCID: "rc1", Content: sub.Content, Deadline: sub.Deadline, Stream: sub.Stream,
			StreamStart: sub.StreamStart, AnswerID: sub.AnswerID}
		x.SetArguments(sub.Arguments())
		p := messages.PartialResult{V: messages.PortionVersion, RequestID: sub.RequestID, PortionID: 100, Attempt: 1, DAPID: "dap1",
			Status: messages.StatusOK, Payload: payload}
		for _, out := range []struct {
			subject string
			v       any
		}{{s.AggExpect("agg-1"), &x}, {s.AggPartial("agg-1"), &p}} {
			b, err := messages.Encode(out.v)
			if err == nil {
				err = nc.Publish(out.subject, b)
			}
			if err != nil {
				t.Errorf("%s: %v", out.subject, err)
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rcSub.Unsubscribe() })
	ann, _ := messages.Encode(&messages.RCAnnouncement{V: messages.RCVersion, RCID: "rc1", StartedAt: 1})
	if err := nc.Publish(s.RCAnnounce("rc1"), ann); err != nil {
		t.Fatal(err)
	}
	wait, stop := context.WithTimeout(ctx, testWait)
	defer stop()
	if err := g.WaitRCs(wait, func(rcs []RCInfo) bool { return len(rcs) == 1 }); err != nil {
		t.Fatal(err)
	}

	q, stopQ := context.WithTimeout(ctx, 20*time.Second)
	defer stopQ()
	rows, windows := 0, 0
	hdr, err := client.New(nc, s).GetDataStream(q, client.GetDataQuery{Args: args}, func(tb messages.Table) error {
		rows += tb.NumRows()
		windows++
		return nil
	})
	if err != nil || !hdr.Status.IsOK() {
		t.Fatalf("after %d windows, %d rows: %v (%+v)", windows, rows, err, hdr.Status)
	}
	if want := part.Rows.NumRows(); rows != want || windows <= 2*core.MaxHeldFrames {
		t.Fatalf("%d rows in %d windows, want %d rows in more than %d", rows, windows, want, 2*core.MaxHeldFrames)
	}
	if n := promtest.Value(t, g.met.streamStarts.WithLabelValues("sent")); n != 1 {
		t.Fatalf("%v start signals sent, want 1", n)
	}
}
