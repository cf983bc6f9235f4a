package test

import (
	"fmt"
	"testing"
	"time"

	"github.com/sg-project/sg/messages"
)

// BenchmarkRequestLogCost: the price of the request log, one request at a
// time through GW, RC, 9 DAPs and the Agg, without it (log=false), as
// deployed (log=true: two JetStream writes per request, the create beside
// the first drive and `answered` with a TTL that removes the entry; file
// storage, R1), and with an opt-in CreateAfter of 20 ms (log=deferred: a
// request answered sooner writes nothing).
//
//	go test ./test -run '^$' -bench RequestLogCost -benchtime 2000x
//
// 2000 requests, not fewer: at 500 (under a second each) the warm-up and
// the 1 s fsync period dominate, and log=false came out slower than
// log=true in one of two rounds; at 2000 both rounds ordered them as the
// writes do (README, Durability settings).
func BenchmarkRequestLogCost(b *testing.B) {
	for _, log := range []string{"false", "true", "deferred"} {
		b.Run("log="+log, func(b *testing.B) {
			d := newDeployment(b)
			d.startAgg("agg-1")
			d.startRC("rc-1", rcOpts{})
			d.startFleet(func(string) (string, string) { return "rc-1", "" })
			d.waitFleet(9, "rc-1")
			o := gwOpts{durable: log != "false"}
			if log == "deferred" {
				o.createAfter = 20 * time.Millisecond
			}
			g := d.startGW("gw-1", o)
			depWaitGWRCs(b, g, "rc-1")
			ans := d.collect()
			args := tradeArgs()
			args.StartTS = deployEnd.Add(-10 * time.Minute) // one DAP per region: a small request
			b.ResetTimer()
			for i := range b.N {
				id := fmt.Sprintf("b%d", i)
				d.send(d.newRequest(id, args, messages.Scope{}, 10*time.Second))
				if st, _ := depStatus(b, ans.wait(b, id, 10*time.Second)); !st.IsOK() {
					b.Fatalf("%+v", st)
				}
			}
		})
	}
}
