package core

import (
	"math"
	"testing"
	"time"
)

// A story: one DAP of concurrency 1 runs portions of 200 ms; three requests
// queue behind the first. The core reports each one's place (items ahead,
// 0-indexed) and the drain rate and execution time it measured.
func TestPositionAndDrainRate(t *testing.T) {
	h := newHarness(t, Config{})
	h.register("eu", lbl("region", "eu"), concurrency(1))
	eu := Selector{"region": {"eu"}}
	d1 := dispatchedTo(t, h.requestFrom("r1", "a", eu), "eu")
	for _, id := range []string{"r2", "r3", "r4"} {
		none[*Dispatch](t, h.requestFrom(id, "a", eu))
	}
	p, ok := h.c.Position("r4")
	if !ok || p.Status != StatusAllocating || p.Ahead != 2 || p.Queued != 1 || p.DrainRate != 0 || p.Exec != 0 {
		t.Fatalf("before any completion: %+v %v", p, ok)
	}
	if p, _ := h.c.Position("r1"); p.Status != StatusExecuting || p.Running != 1 || p.Ahead != 0 {
		t.Fatalf("r1: %+v", p)
	}
	h.advance(200 * time.Millisecond)
	d2 := dispatchedTo(t, h.complete(d1, OutcomeOK), "eu")
	p, _ = h.c.Position("r4")
	if p.Ahead != 1 || math.Abs(p.DrainRate-5) > 1e-9 || p.Exec != 200*time.Millisecond {
		t.Fatalf("after one completion: %+v", p)
	}
	// A slower portion moves the mean by execAlpha.
	h.advance(400 * time.Millisecond)
	h.complete(d2, OutcomeOK)
	p, _ = h.c.Position("r4")
	if p.Ahead != 0 || p.Exec != 240*time.Millisecond {
		t.Fatalf("after two completions: %+v", p)
	}
	if _, ok := h.c.Position("nope"); ok {
		t.Fatal("unknown request has a position")
	}
	if r := h.c.FleetDrainRate(); math.Abs(r-1/0.24) > 1e-9 {
		t.Fatalf("fleet drain rate %v", r)
	}
}
