package retryafter

import (
	"fmt"
	"testing"
	"time"
)

// The seed's worked examples: "Using parameters: D=10, C=50, R=2s,
// P_input=2s, P_decrypt=4s, T=100ms, M=0.2". Every row of every table is a
// test vector. (The examples also assume "B(E)=3s (constant)"; the backoff
// table is tested on its own below, so that assumption is not used.)
const (
	seedD       = 10.0 // TX drain rate, items/s
	seedC       = 50.0 // readiness max concurrency
	seedR       = 2 * time.Second
	seedPInput  = 2 * time.Second
	seedPDecr   = 4 * time.Second
	seedT       = 100 * time.Millisecond
	seedMargin  = 0.2
	seedElapsed = 0 // not used by the running-state formulas
)

var seedParams = Params{SafetyMargin: seedMargin} // min 1 s, max 300 s: the defaults

func TestSeedInputProofQueued(t *testing.T) {
	// ⌈(p/D × 1000 + P + T) × (1+M) / 1000⌉, P = 2 s.
	for _, row := range []struct{ p, want int }{
		{0, 3}, {1, 3}, {10, 4}, {100, 15}, {1000, 123},
	} {
		e := Estimate{Queues: []Queue{{Ahead: row.p, Rate: seedD}}, Nominal: []time.Duration{seedPInput, seedT}}
		check(t, fmt.Sprintf("input proof queued p=%d", row.p), Seconds(e, seedElapsed, seedParams), row.want)
	}
	// TxInFlight: ⌈P × 1.2 / 1000⌉ = 3 s (constant).
	check(t, "input proof tx in flight", Seconds(Estimate{Nominal: []time.Duration{seedPInput}}, 0, seedParams), 3)
}

func TestSeedDecryptQueuedInReadiness(t *testing.T) {
	// ⌈(p/C × 1000 + Q/D × 1000 + P + T) × (1+M) / 1000⌉ with p = Q.
	for _, row := range []struct{ p, want int }{
		{0, 5}, {1, 6}, {10, 7}, {100, 20}, {1000, 149},
	} {
		e := Estimate{
			Queues:  []Queue{{Ahead: row.p, Rate: seedC}, {Ahead: row.p, Rate: seedD}},
			Nominal: []time.Duration{seedPDecr, seedT},
		}
		check(t, fmt.Sprintf("decrypt queued in readiness p=Q=%d", row.p), Seconds(e, 0, seedParams), row.want)
	}
}

func TestSeedDecryptProcessingOutOfReadiness(t *testing.T) {
	// ⌈(R + Q/D × 1000 + P + T) × (1+M) / 1000⌉.
	for _, row := range []struct{ q, want int }{
		{0, 8}, {1, 8}, {10, 9}, {100, 20}, {1000, 128},
	} {
		e := Estimate{Queues: []Queue{{Ahead: row.q, Rate: seedD}}, Nominal: []time.Duration{seedR, seedPDecr, seedT}}
		check(t, fmt.Sprintf("decrypt processing out of readiness Q=%d", row.q), Seconds(e, 0, seedParams), row.want)
	}
}

func TestSeedDecryptProcessingInTXQueue(t *testing.T) {
	// ⌈(p/D × 1000 + P + T) × (1+M) / 1000⌉, P = 4 s.
	for _, row := range []struct{ p, want int }{
		{0, 5}, {1, 6}, {10, 7}, {100, 17}, {1000, 125},
	} {
		e := Estimate{Queues: []Queue{{Ahead: row.p, Rate: seedD}}, Nominal: []time.Duration{seedPDecr, seedT}}
		check(t, fmt.Sprintf("decrypt processing in tx queue p=%d", row.p), Seconds(e, 0, seedParams), row.want)
	}
	// TxInFlight: ⌈4000 × 1.2 / 1000⌉ = 5 s (constant).
	check(t, "decrypt tx in flight", Seconds(Estimate{Nominal: []time.Duration{seedPDecr}}, 0, seedParams), 5)
}

// The seed's summary table ("Status | Input Proof | Decrypt") is the tables
// above at p = Q = 100.
func TestSeedSummaryTable(t *testing.T) {
	q := func(n int, rate float64) Queue { return Queue{Ahead: n, Rate: rate} }
	for _, row := range []struct {
		name string
		e    Estimate
		want int
	}{
		{"queued, input proof", Estimate{[]Queue{q(100, seedD)}, []time.Duration{seedPInput, seedT}}, 15},
		{"queued, decrypt", Estimate{[]Queue{q(100, seedC), q(100, seedD)}, []time.Duration{seedPDecr, seedT}}, 20},
		{"processing in readiness, decrypt", Estimate{[]Queue{q(100, seedD)}, []time.Duration{seedR, seedPDecr, seedT}}, 20},
		{"processing in tx queue, input proof", Estimate{[]Queue{q(100, seedD)}, []time.Duration{seedPInput, seedT}}, 15},
		{"processing in tx queue, decrypt", Estimate{[]Queue{q(100, seedD)}, []time.Duration{seedPDecr, seedT}}, 17},
		{"tx in flight, input proof", Estimate{Nominal: []time.Duration{seedPInput}}, 3},
		{"tx in flight, decrypt", Estimate{Nominal: []time.Duration{seedPDecr}}, 5},
	} {
		check(t, row.name, Seconds(row.e, 0, seedParams), row.want)
	}
}

func TestSeedBackoffTable(t *testing.T) {
	for _, row := range []struct {
		elapsed time.Duration
		want    int
	}{
		{0, 4}, {59 * time.Second, 4},
		{60 * time.Second, 10}, {119 * time.Second, 10},
		{2 * time.Minute, 30}, {5*time.Minute - time.Millisecond, 30},
		{5 * time.Minute, 60}, {15*time.Minute - time.Millisecond, 60},
		{15 * time.Minute, 300}, {24 * time.Hour, 300},
	} {
		check(t, fmt.Sprintf("B(%s)", row.elapsed), Backoff(row.elapsed), row.want)
	}
}

func TestClampAndMargin(t *testing.T) {
	// The floor: nothing ahead and nothing nominal is still min (1 s).
	check(t, "floor", Seconds(Estimate{}, 0, Params{}), 1)
	// The ceiling: 10,000 ahead at 1/s is far above max (300 s).
	check(t, "ceiling", Seconds(Estimate{Queues: []Queue{{Ahead: 10000, Rate: 1}}}, 0, Params{}), 300)
	// Configured bounds win; a max below min is lifted to min.
	check(t, "custom max", Seconds(Estimate{Queues: []Queue{{Ahead: 10000, Rate: 1}}}, 0, Params{Max: 60 * time.Second}), 60)
	check(t, "max below min", Pad(0, Params{Min: 5 * time.Second, Max: 2 * time.Second}), 5)
	// An exact whole second stays whole after the margin: 2500 ms × 1.2 = 3 s, not 4.
	check(t, "exact", Pad(2500*time.Millisecond, Params{}), 3)
	// A margin of 0 is a valid choice with NoDefaults.
	check(t, "no margin", Pad(2100*time.Millisecond, Params{NoDefaults: true, Max: time.Hour}), 3)
	check(t, "no margin, floor 0", Pad(0, Params{NoDefaults: true, Max: time.Hour}), 0)
}

func TestUnmeasuredDrainFallsBackToBackoff(t *testing.T) {
	e := Estimate{Queues: []Queue{{Ahead: 3, Rate: 0}}, Nominal: []time.Duration{time.Second}}
	if _, ok := e.ETA(); ok {
		t.Fatal("ETA with items ahead and no drain rate must not be estimable")
	}
	check(t, "backoff at 90s", Seconds(e, 90*time.Second, Params{}), 10)
	// Nothing ahead: the missing rate does not matter.
	e.Queues[0].Ahead = 0
	check(t, "nothing ahead", Seconds(e, 90*time.Second, Params{}), 2) // ⌈1000 × 1.2 / 1000⌉
}

func check(t *testing.T, name string, got, want int) {
	t.Helper()
	if got != want {
		t.Errorf("%s: Retry-After %d s, want %d s", name, got, want)
	}
}
