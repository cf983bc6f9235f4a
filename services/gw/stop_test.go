package gw_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"github.com/sg-project/sg/messages"
	"github.com/sg-project/sg/services/gw"
	"github.com/sg-project/sg/subjects"
	"github.com/sg-project/sg/test/natstest"
)

// A GW stopped while requests pour in answers every request it took, OK or
// UNAVAILABLE, and nothing after Run returned; a request no GW took gets
// NATS's "no responders". None waits for its timeout. Twenty stops, under
// -race: no panic, no race.
func TestStopUnderLoadAnswersEveryRequest(t *testing.T) {
	srv := natstest.Start(t)
	client := natstest.Connect(t, srv)
	s := subjects.Default()
	// A fake RC that answers at once.
	sub, err := client.Subscribe(s.RCSubmit("rc1"), func(m *nats.Msg) {
		sb, err := messages.DecodeValid[messages.RCSubmission](m.Data)
		if err != nil {
			t.Errorf("bad submission: %v", err)
			return
		}
		resp := messages.Response{Header: messages.ResponseHeader{V: 1, RequestID: sb.RequestID, API: sb.Header.API, Status: messages.StatusOK},
			Content: sb.Content}
		body, _ := resp.Encode()
		h := nats.Header{}
		messages.StatusOK.Write(h)
		h.Set(messages.HdrRequestID, sb.RequestID)
		h.Set(messages.HdrContentType, string(sb.Content))
		_ = client.PublishMsg(&nats.Msg{Subject: sb.ReplyTo, Header: h, Data: body})
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	announce := func() {
		ann, _ := messages.Encode(&messages.RCAnnouncement{V: messages.RCVersion, RCID: "rc1", StartedAt: 1})
		_ = client.Publish(s.RCAnnounce("rc1"), ann)
	}

	var ok, unavailable, noResponders atomic.Int64
	for round := range 20 {
		nc := natstest.Connect(t, srv)
		g, err := gw.New(gw.Config{ID: "gw1", NC: nc, Subjects: s, Log: zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel),
			StartupWait: time.Second, ShutdownGrace: 10 * time.Millisecond, Registry: prometheus.NewRegistry()})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- g.Run(ctx) }()
		select {
		case <-g.Ready():
		case err := <-done:
			t.Fatalf("round %d: Run: %v", round, err)
		case <-time.After(wait):
			t.Fatalf("round %d: GW not ready", round)
		}
		announce()
		var wg sync.WaitGroup
		stop := make(chan struct{})
		for range 8 {
			wg.Go(func() {
				for {
					select {
					case <-stop:
						return
					default:
					}
					m, err := client.RequestMsg(&nats.Msg{Subject: s.GWAPI(subjects.APIPing),
						Data: []byte(`{"header":{"api":"ping"},"payload":{}}`)}, 5*time.Second)
					switch {
					case errors.Is(err, nats.ErrNoResponders):
						noResponders.Add(1)
						return
					case err != nil:
						t.Errorf("round %d: a request got no answer: %v", round, err)
						return
					}
					st, err := messages.ReadStatus(m.Header)
					switch {
					case err != nil:
						t.Errorf("round %d: answer without a status: %v", round, err)
					case st.IsOK():
						ok.Add(1)
					case st.RC == messages.CodeUnavailable || st.RC == messages.CodeNoResources:
						unavailable.Add(1)
					default:
						t.Errorf("round %d: answer %v", round, st)
					}
				}
			})
		}
		time.Sleep(time.Duration(5+round) * time.Millisecond) // let the load run a moment: the stop lands anywhere in it
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(wait):
			t.Fatal("Run did not return")
		}
		close(stop)
		wg.Wait()
		nc.Close()
	}
	t.Logf("ok %d, unavailable %d, no responders %d", ok.Load(), unavailable.Load(), noResponders.Load())
	if ok.Load() == 0 {
		t.Fatal("no request was served")
	}
}
