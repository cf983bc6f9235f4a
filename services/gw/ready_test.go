package gw_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/sg-project/sg/messages"
	"github.com/sg-project/sg/services/gw"
	"github.com/sg-project/sg/subjects"
)

// statsReadiness reads the GW's readiness from $SRV.STATS, where operators
// (`nats micro stats`) look: every endpoint's data carries it.
func (e *env) statsReadiness() gw.Readiness {
	e.t.Helper()
	m, err := e.nc.Request("$SRV.STATS."+e.s.ServiceName(subjects.ServiceGW), nil, wait)
	if err != nil {
		e.t.Fatalf("micro stats: %v", err)
	}
	var st micro.Stats
	if err := json.Unmarshal(m.Data, &st); err != nil || len(st.Endpoints) == 0 {
		e.t.Fatalf("micro stats %s: %v", m.Data, err)
	}
	var r gw.Readiness
	if err := json.Unmarshal(st.Endpoints[0].Data, &r); err != nil {
		e.t.Fatalf("endpoint data %s: %v", st.Endpoints[0].Data, err)
	}
	return r
}

// TestReadyOnlyWithAWarmRC: the GW takes requests at once but is ready only
// when it knows a warm RC. Until then it holds a request past StartupWait
// (a warming RC gets nothing), and says why it is not ready; the RC's warm
// announcement sends the request on and makes the GW ready.
func TestReadyOnlyWithAWarmRC(t *testing.T) {
	e := startGW(t, func(c *gw.Config) { c.StartupWait = 100 * time.Millisecond })
	if r := e.gw.Readiness(); r.Ready || r.Reason == "" {
		t.Fatalf("readiness with no RC: %+v", r)
	}
	if r := e.statsReadiness(); r.Ready || r.RCs != 0 {
		t.Fatalf("micro stats with no RC: %+v", r)
	}

	subs := make(chan messages.RCSubmission, 4)
	sub, err := e.nc.Subscribe(e.s.RCSubmit("rc-w"), func(m *nats.Msg) {
		if s, err := messages.DecodeValid[messages.RCSubmission](m.Data); err == nil {
			subs <- s
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	got := make(chan messages.Response, 1)
	go func() {
		r, err := e.cl.Do(ctxT(t), subjects.APIGetData, map[string]any{"table": "trade"}, messages.Opts{TimeoutMS: 4000})
		if err != nil {
			t.Error(err)
		}
		got <- r
	}()
	announce := func(warming bool) {
		b, _ := messages.Encode(&messages.RCAnnouncement{V: messages.RCVersion, RCID: "rc-w", StartedAt: 1, Warming: warming})
		if err := e.nc.Publish(e.s.RCAnnounce("rc-w"), b); err != nil {
			t.Fatal(err)
		}
	}
	announce(true)
	if err := e.gw.WaitRCs(ctxT(t), func(l []gw.RCInfo) bool { return len(l) == 1 && l[0].Warming }); err != nil {
		t.Fatalf("warming RC never listed: %v", err)
	}
	if r := e.gw.Readiness(); r.Ready || r.RCs != 1 || r.WarmRCs != 0 {
		t.Fatalf("readiness with a warming RC: %+v", r)
	}
	if r := e.statsReadiness(); r.Ready || r.RCs != 1 {
		t.Fatalf("micro stats with a warming RC: %+v", r)
	}
	// Not answered "No resources connected" after StartupWait, nor
	// submitted to the warming RC: held.
	select {
	case r := <-got:
		t.Fatalf("answered %v before any RC was warm", r.Header.Status)
	case s := <-subs:
		t.Fatalf("submitted %s to a warming RC", s.RequestID)
	case <-time.After(4 * 100 * time.Millisecond):
	}
	select {
	case <-e.gw.Serving():
		t.Fatal("serving before a warm RC")
	default:
	}

	announce(false)
	var s messages.RCSubmission
	select {
	case s = <-subs:
	case <-time.After(wait):
		t.Fatal("held request not submitted once the RC was warm")
	}
	e.reply(s, messages.StatusOK, map[string]string{"rc": "rc-w"})
	select {
	case r := <-got:
		if !r.Header.Status.IsOK() {
			t.Fatalf("held request answered %v", r.Header.Status)
		}
	case <-time.After(wait):
		t.Fatal("held request not answered")
	}
	select {
	case <-e.gw.Serving():
	case <-time.After(wait):
		t.Fatal("not serving with a warm RC")
	}
	if r := e.gw.Readiness(); !r.Ready || r.WarmRCs != 1 || r.Reason != "" {
		t.Fatalf("readiness with a warm RC: %+v", r)
	}
	if r := e.statsReadiness(); !r.Ready {
		t.Fatalf("micro stats with a warm RC: %+v", r)
	}
}
