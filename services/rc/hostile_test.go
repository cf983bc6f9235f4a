package rc

import (
	"testing"

	"github.com/sg-project/sg/messages"
)

// A loss notice whose body does not decode, or names another DAP, changes
// nothing: before, any bytes on evt.dap.<id>.lost dropped the DAP.
func TestMalformedLossNoticeKeepsTheDAP(t *testing.T) {
	f := startRC(t)
	f.registerDAP("dap-a", true)
	for _, body := range [][]byte{nil, {0xc1}, hugeTables} {
		if err := f.nc.Publish(f.s.DAPLost("dap-a"), body); err != nil {
			t.Fatal(err)
		}
	}
	f.publish(f.s.DAPLost("dap-a"), &messages.DAPLost{V: messages.DAPVersion, DAPID: "dap-b", Reason: "shutdown"})
	// Events are handled in order: once dap-b is known, every notice above
	// was too.
	f.registerDAPAs("dap-b")
	f.waitDAPs(2)
}

// registerDAPAs registers one more available DAP without waiting.
func (f *fixture) registerDAPAs(id string) {
	f.publish(f.s.DAPRegister(id), &messages.DAPRegistration{
		V: messages.DAPVersion, DAPID: id, Labels: messages.LabelSet{"region": "us"}, Tier: messages.TierRDB,
		Purview: messages.Unbounded, Tables: []messages.TableInfo{{Name: "trade", Kind: messages.TablePartitioned}},
		Available: true, Concurrency: 1,
	})
}
