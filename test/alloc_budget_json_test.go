package test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/sg-project/sg/messages"
	"github.com/sg-project/sg/services/dap/demo"
)

// allocBudgetHopJSON is allocBudgetHop for a JSON caller's small getData. Its
// arguments go downstream as sent (messages/args.go): the RC, the DAP and the
// Agg each decode the JSON once, where the GW used to re-encode them to
// msgpack for them. Measured (issue 10, wip/argsj, without -race): agg=130
// dap=62 gw=52 rc=37 client=21 nats=113 (426 in all), against agg=124 dap=56
// gw=54 rc=30 (408) when the GW re-encoded them: encoding/json's decode
// allocates more than the hand msgpack decoder (BenchmarkHop/GetDataArgsJSON).
// With the fast path for the common shape (messages/getdata_fastjson.go,
// wip/fastjson, without -race): agg=126 dap=57 gw=47 rc=32 client=21 nats=113
// (407 in all), against agg=130 dap=62 gw=52 rc=38 nats=114 (427) in the same
// session before it. The budgets of the hops that decode the arguments keep
// about 15% above; client and nats, which it does not touch, keep theirs.
// Session 14 (wip/aggpath, see allocBudgetHop): agg=76 (109 with -race),
// from 117 on main before it (without -race); the Agg's budget keeps a
// quarter above: 95. The rest of a JSON answer's cost is its encoding
// (EncodeTableJSON), which that branch did not touch. Session 14
// (wip/dapportion, see allocBudgetHop): dap 33 (43 with -race), from 51 on
// main before it: its budget keeps a quarter above, 42.
var allocBudgetHopJSON = map[string]float64{
	"client": 40, "gw": 55, "rc": 38, "dap": 42, "agg": 95, "nats": 145,
}

// Allocations per small JSON getData, hop by hop, do not grow past their budgets.
func TestAllocBudgetPerHopJSON(t *testing.T) {
	nop := zerolog.Nop()
	sys := startSystem(t, systemOptions{log: &nop})
	src, _ := engineSource(t, sys)
	sys.startDAP(oneDAP(src, 1))
	sys.waitDAPs(1)
	args, err := json.Marshal(map[string]any{"table": demo.Trade, "limit": 1,
		"startTS": demoEnd.Add(-time.Hour).Format(time.RFC3339Nano), "endTS": demoEnd.Add(-time.Hour + time.Minute).Format(time.RFC3339Nano)})
	if err != nil {
		t.Fatal(err)
	}
	do := func(n int) {
		for range n {
			raw, err := sys.client.DoJSON(context.Background(), "getData", args, messages.Opts{})
			var env struct {
				Header messages.ResponseHeader `json:"header"`
			}
			if err != nil || json.Unmarshal(raw, &env) != nil || !env.Header.Status.IsOK() {
				t.Fatalf("getData: %v %.200s", err, raw)
			}
		}
	}
	checkHopBudgets(t, do, allocBudgetHopJSON, "small JSON request")
}
