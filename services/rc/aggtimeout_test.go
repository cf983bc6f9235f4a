package rc

import (
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sg-project/sg/messages"
)

// TestAggTimeoutNoticeAnswersAtOnce: the Agg's AggDone with TimedOut makes
// the RC answer the seed's timeout message at once, before its own deadline.
func TestAggTimeoutNoticeAnswersAtOnce(t *testing.T) {
	f := startRC(t)
	portions, _ := f.nc.SubscribeSync(f.s.DAPPortion("d1"))
	expects, _ := f.nc.SubscribeSync(f.s.AggExpect("agg-1"))
	replies, _ := f.nc.SubscribeSync("reply.agg")
	f.registerDAP("d1", true)
	f.submit("qa", 30*time.Second, "reply.agg")
	f.completeDispatched(portions, expects, "d1")
	f.publish(f.s.RCAggDone("rc-1"), &messages.AggDone{V: messages.AggDoneVersion, AggID: "agg-1", Done: []messages.AggDoneEntry{{RequestID: "qa",
		Status: messages.Errorf(messages.CodeTimeout, messages.CodeErr, "Agg agg-1: deadline passed"), TimedOut: true}}})
	m := next(t, replies) // within 5 s, long before the 30 s deadline
	st, err := messages.ReadStatus(m.Header)
	if err != nil || st.RC != messages.CodeTimeout || !strings.Contains(st.AI, `[rc=rc-1;status="aggregating";agg=agg-1]`) {
		t.Fatalf("status %+v %v", st, err)
	}
}

// completeDispatched reads the next portion dispatched (on portions), has
// DAP dap complete it OK with its partial sent, and waits for the Agg's
// expectation that follows (on expects).
func (f *fixture) completeDispatched(portions, expects *nats.Subscription, dap string) {
	f.t.Helper()
	pd, err := messages.DecodeValid[messages.PortionDispatch](next(f.t, portions).Data)
	if err != nil {
		f.t.Fatal(err)
	}
	f.publish(f.s.RCCompletion("rc-1"), &messages.PortionCompletion{
		V: messages.PortionVersion, RequestID: pd.RequestID, PortionID: pd.PortionID, Attempt: pd.Attempt,
		DAPID: dap, Outcome: messages.OutcomeOK, Code: messages.CodeOK, PartialSent: true,
	})
	next(f.t, expects)
}
