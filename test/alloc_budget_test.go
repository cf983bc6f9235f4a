package test

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/sg-project/sg/messages"
	"github.com/sg-project/sg/services/dap/demo"
)

// allocBudgetPath is the most a small getData may allocate end to end in one
// process: the Go client, the GW, the RC, the DAP, the Agg and the embedded NATS
// server together (the per-service core budgets are in their packages, e.g.
// services/rc/core TestAllocBudgetSmallRequest). Measured 807 here without
// -race (issue 10, after the codec pools), background heartbeats and
// announcements included, which grow with a slow run; -race adds its own.
const allocBudgetPath = 1000

// A small request's allocations along the whole path do not grow past the budget.
func TestAllocBudgetSmallRequestPath(t *testing.T) {
	sys := startSystem(t, systemOptions{})
	src, _ := engineSource(t, sys)
	sys.startDAP(oneDAP(src, 1))
	sys.waitDAPs(1)
	args := messages.GetDataArgs{Table: demo.Trade, Limit: 1,
		StartTS: demoEnd.Add(-time.Hour), EndTS: demoEnd.Add(-time.Hour + time.Minute)}
	ctx := context.Background()
	do := func(n int) {
		for range n {
			resp, err := sys.client.Do(ctx, "getData", args, messages.Opts{})
			if err != nil || !resp.Header.Status.IsOK() {
				t.Fatalf("getData: %v %+v", err, resp.Header.Status)
			}
		}
	}
	do(50) // warm: pools, maps, the client's inbox
	const n = 300
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	do(n)
	runtime.ReadMemStats(&after)
	per := float64(after.Mallocs-before.Mallocs) / n
	budget := float64(allocBudgetPath)
	if raceEnabled {
		budget *= 1.5
	}
	t.Logf("allocations per small request, whole path: %.0f (budget %.0f)", per, budget)
	if per > budget {
		t.Fatalf("a small request allocates %.0f times along the path, budget %.0f", per, budget)
	}
}
