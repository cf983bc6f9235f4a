package rc

import (
	"testing"
	"time"

	"github.com/sg-project/sg/messages"
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
