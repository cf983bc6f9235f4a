// Package retryafter computes when a caller should come back: the dynamic
// Retry-After of the seed dynamic-retry-after-design.txt, in one pure
// function (no clock, no state), so that the GW's async answers, its
// refusals over a limit and the RC's refusals all say the same thing for the
// same facts.
//
// The seed's formulas all have one shape: the time the request still needs,
// stage by stage, padded by the safety margin, rounded up to whole seconds
// and clamped,
//
//	clamp(⌈(Σ queued_i/rate_i + Σ nominal_j) × (1+M) / 1000⌉, min, max)
//
// where a queue term is the number of items ahead of the request (its
// position p, not the queue's length: "position-based instead of
// queue-size-based") divided by the rate at which that queue drains (D
// items/s, or C for a concurrency-bound stage), and a nominal term is a stage
// whose duration is known (P, T, R). Where nothing can be estimated, the seed
// falls back to a backoff on the time already spent waiting, B(E), with no
// safety margin; terminal states are 0.
//
// sg maps its stages onto these terms (DESIGN section 5): a queued portion is
// a queue term (portions ahead of it for the DAPs that can serve it, at the
// measured drain rate of those DAPs) plus the nominal execution and
// aggregation times; an executing request is its remaining nominal times; a
// request waiting on something sg cannot measure is the backoff.
//
// Milliseconds are used internally, as in the seed ("Why milliseconds
// internally": sub-second terms such as p/D = 0.1 s must not round away).
package retryafter

import (
	"math"
	"time"

	"github.com/sg-project/sg/services/defaults"
)

// Defaults of the seed's parameters table.
const (
	DefaultMin          = defaults.RetryMin          // min_seconds: the floor
	DefaultMax          = defaults.RetryMax          // max_seconds: the ceiling
	DefaultSafetyMargin = defaults.RetrySafetyMargin // safety_margin: multiplier on the ETA
)

// Params are the seed's clamp and margin. The zero value means the defaults.
type Params struct {
	Min, Max     time.Duration
	SafetyMargin float64 // M, 0.0 to 1.0; negative is treated as 0
	// NoDefaults keeps a zero Min, Max or SafetyMargin as zero instead of
	// taking the default (a margin of 0 is a valid choice).
	NoDefaults bool
}

// WithDefaults fills the zero fields with the seed's defaults.
func (p Params) WithDefaults() Params {
	if p.NoDefaults {
		return p
	}
	if p.Min == 0 {
		p.Min = DefaultMin
	}
	if p.Max == 0 {
		p.Max = DefaultMax
	}
	if p.SafetyMargin == 0 {
		p.SafetyMargin = DefaultSafetyMargin
	}
	return p
}

// Queue is one queue term: Ahead items before the request, drained at Rate
// items per second. A queue with nothing ahead costs nothing; one with items
// ahead but no measured drain (Rate <= 0) cannot be estimated (see Estimate).
type Queue struct {
	Ahead int
	Rate  float64
}

// Estimate is what is known of a request that is still running: the queues
// it waits in and the nominal durations of the stages still ahead of it.
type Estimate struct {
	Queues  []Queue
	Nominal []time.Duration
}

// ETA is the unpadded time the request still needs; ok is false when a
// queue has items ahead and no measured drain rate, so no ETA can be given.
func (e Estimate) ETA() (eta time.Duration, ok bool) {
	ms := 0.0
	for _, q := range e.Queues {
		if q.Ahead <= 0 {
			continue
		}
		if q.Rate <= 0 || math.IsNaN(q.Rate) || math.IsInf(q.Rate, 0) {
			return 0, false
		}
		ms += float64(q.Ahead) / q.Rate * 1000
	}
	for _, d := range e.Nominal {
		if d > 0 {
			ms += float64(d) / float64(time.Millisecond)
		}
	}
	return time.Duration(ms * float64(time.Millisecond)), true
}

// Seconds is the seed's formula for a running request:
// clamp(⌈ETA × (1+M) / 1000⌉, min, max) in whole seconds. When the ETA
// cannot be estimated, it falls back to Backoff(elapsed), as the seed does for
// a stage whose response time is unpredictable.
func Seconds(e Estimate, elapsed time.Duration, p Params) int {
	eta, ok := e.ETA()
	if !ok {
		return Backoff(elapsed)
	}
	return Pad(eta, p)
}

// Pad applies the margin, the ceiling to whole seconds and the clamp to an
// ETA: clamp(⌈eta × (1+M) / 1000⌉, min, max).
func Pad(eta time.Duration, p Params) int {
	p = p.WithDefaults()
	m := max(p.SafetyMargin, 0)
	ms := float64(eta) / float64(time.Millisecond) * (1 + m)
	// Round to a microsecond before the ceiling: 2100 × 1.2 is
	// 2520.0000000000005 in floating point, and an exact 3000 ms must stay 3 s.
	ms = math.Round(ms*1000) / 1000
	s := int64(math.Ceil(ms / 1000))
	lo, hi := ceilSeconds(p.Min), ceilSeconds(p.Max)
	if hi < lo {
		hi = lo
	}
	return int(min(max(s, lo), hi))
}

func ceilSeconds(d time.Duration) int64 {
	return int64((d + time.Second - 1) / time.Second)
}

// Backoff is the seed's B(E) for a stage whose duration cannot be predicted,
// by the time E already spent in it (no safety margin: the table is already
// the intended polling interval).
func Backoff(elapsed time.Duration) int {
	for _, step := range backoffTable {
		if elapsed < step.below {
			return step.seconds
		}
	}
	return backoffTable[len(backoffTable)-1].seconds
}

// backoffTable is the seed's "Elapsed Time | Retry-After" table.
var backoffTable = []struct {
	below   time.Duration
	seconds int
}{
	{60 * time.Second, 4},  // 0-60s: expect response soon
	{2 * time.Minute, 10},  // 60s-2m: taking longer than usual
	{5 * time.Minute, 30},  // 2m-5m: significant delay
	{15 * time.Minute, 60}, // 5m-15m: major delay
	{math.MaxInt64, 300},   // 15m+: likely stuck, minimal polling
}
