package rc

import (
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/sg-project/sg/messages"
)

// throttle answers dispatch pd as a DAP whose endpoint asked for a pause.
func (f *fixture) throttle(pd messages.PortionDispatch, key string, pause time.Duration) {
	f.t.Helper()
	data, err := messages.Encode(&messages.PortionCompletion{
		V: messages.PortionVersion, RequestID: pd.RequestID, PortionID: pd.PortionID, Attempt: pd.Attempt,
		DAPID: "d1", Outcome: messages.OutcomeError, Code: messages.CodeRateLimited, Message: "endpoint asked for a pause",
	})
	if err != nil {
		f.t.Fatal(err)
	}
	h := nats.Header{}
	messages.SetThrottle(h, key, pause)
	if err := f.nc.PublishMsg(&nats.Msg{Subject: f.s.RCCompletion("rc-1"), Header: h, Data: data}); err != nil {
		f.t.Fatal(err)
	}
}

// A THROTTLED completion pauses the DAP for the time asked; the portion is
// dispatched again after the pause, at the same attempt (not a retry).
func TestRCThrottledPortionRunsAfterThePause(t *testing.T) {
	f := startRC(t)
	portions, _ := f.nc.SubscribeSync(f.s.DAPPortion("d1"))
	expects, _ := f.nc.SubscribeSync(f.s.AggExpect("agg-1"))
	f.registerDAP("d1", true)
	f.submit("q1", 10*time.Second, "reply.q1")
	pd, err := messages.DecodeValid[messages.PortionDispatch](next(t, portions).Data)
	if err != nil {
		t.Fatal(err)
	}
	const pause = 300 * time.Millisecond
	throttledAt := time.Now()
	f.throttle(pd, "ads", pause)
	again, err := messages.DecodeValid[messages.PortionDispatch](next(t, portions).Data)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("dispatched again %s after the throttle", time.Since(throttledAt))
	if d := time.Since(throttledAt); d < pause {
		t.Fatalf("dispatched again %s after the throttle, inside the %s pause", d, pause)
	}
	if again.Attempt != pd.Attempt || again.Range != pd.Range || again.PortionID == pd.PortionID {
		t.Fatalf("dispatch after the pause %+v, first %+v: want a new portion at the same attempt", again, pd)
	}
	f.publish(f.s.RCCompletion("rc-1"), &messages.PortionCompletion{
		V: messages.PortionVersion, RequestID: "q1", PortionID: again.PortionID, Attempt: again.Attempt,
		DAPID: "d1", Outcome: messages.OutcomeOK, Code: messages.CodeOK, PartialSent: true,
	})
	// The Agg is told as the RC dispatches: the first portion (sealed), then on the
	// throttle that it no longer counts (unsealed: it is queued again), then the new one
	// (sealed); once it completes, nothing more (the Agg has the whole set).
	for i, want := range []struct {
		expect, supersede string
		sealed            bool
	}{{pd.PortionID.String(), "", true}, {"", pd.PortionID.String(), false}, {again.PortionID.String(), "", true}} {
		ex, err := messages.DecodeValid[messages.AggExpectation](next(t, expects).Data)
		if err != nil || ex.Seq != uint32(i+1) || ex.Sealed != want.sealed || refIDs(ex.Expect) != want.expect || refIDs(ex.Supersede) != want.supersede {
			t.Fatalf("expectation %d: %+v %v, want %+v", i+1, ex, err, want)
		}
	}
}

func refIDs(refs []messages.PortionRef) string {
	ids := make([]string, len(refs))
	for i, r := range refs {
		ids[i] = r.PortionID.String()
	}
	return strings.Join(ids, ",")
}

// A deadline inside the pause: the timeout names the pause.
func TestRCTimeoutInsideThePause(t *testing.T) {
	f := startRC(t)
	portions, _ := f.nc.SubscribeSync(f.s.DAPPortion("d1"))
	replies, _ := f.nc.SubscribeSync("reply.q2")
	f.registerDAP("d1", true)
	f.submit("q2", 500*time.Millisecond, "reply.q2")
	pd, err := messages.DecodeValid[messages.PortionDispatch](next(t, portions).Data)
	if err != nil {
		t.Fatal(err)
	}
	f.throttle(pd, "ads", time.Minute)
	st, err := messages.ReadStatus(next(t, replies).Header)
	if err != nil || st.RC != messages.CodeTimeout || !strings.Contains(st.AI, `reason=\"Paused by downstream rate limit until `) {
		t.Fatalf("status %+v %v", st, err)
	}
}
