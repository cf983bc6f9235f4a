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
// Agg each decode the JSON once (encoding/json's decode allocates more than
// the hand msgpack decoder, BenchmarkHop/GetDataArgsJSON, outside the fast
// path of messages/getdata_fastjson.go), and the Agg encodes a JSON answer
// (EncodeTableJSON). Measured without -race on 2026-11-25: agg 70, client
// 21, dap 33, gw 46, nats 117, rc 33; the budgets of the hops that decode
// the arguments keep about 15-35% above, client and nats allocBudgetHop's.
// Their history: git log of this file and BENCHMARKS.md.
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
