package retryafter

import (
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/sg-project/sg/messages"
	"github.com/sg-project/sg/services/defaults"
)

// Defaults of the nominal times (seed: "All nominal times are required in
// configuration"; sg has defaults so that a bare `sg run` works, and
// measured figures replace them as soon as a DAP completes a portion).
const (
	// DefaultNominalExec is P: one portion's execution at a DAP when none
	// was measured yet (the seed's P for its shortest request type).
	DefaultNominalExec = defaults.RetryNominalExec
	// DefaultNominalAgg is T: the Agg's merge and the answer's way back.
	DefaultNominalAgg = defaults.RetryNominalAgg
)

// Config is everything the sg mapping takes: the seed's clamp and margin,
// and the nominal times. Zero fields take the defaults.
type Config struct {
	Params
	NominalExec time.Duration // SG_RETRY_NOMINAL_EXEC
	NominalAgg  time.Duration // SG_RETRY_NOMINAL_AGG
}

// Check refuses what a caller could not use, for settings taken as given
// (flags, with NoDefaults): a zero or negative floor, ceiling or nominal time
// (a Retry-After of 0 would have async callers poll without pause), a
// ceiling below the floor, a margin outside [0, 1]. Errors name the flags
// and their environment variables.
func (c Config) Check() error {
	for _, d := range []struct {
		flag, env string
		v         time.Duration
	}{{"retry-min", EnvMin, c.Min}, {"retry-max", EnvMax, c.Max},
		{"retry-nominal-exec", EnvNominalExec, c.NominalExec}, {"retry-nominal-agg", EnvNominalAgg, c.NominalAgg}} {
		if d.v <= 0 {
			return fmt.Errorf("--%s (%s) %s: want a positive duration", d.flag, d.env, d.v)
		}
	}
	if c.Max < c.Min {
		return fmt.Errorf("--retry-max (%s) %s is below --retry-min (%s) %s", EnvMax, c.Max, EnvMin, c.Min)
	}
	if c.SafetyMargin < 0 || c.SafetyMargin > 1 {
		return fmt.Errorf("--retry-safety-margin (%s) %g: want a number in [0, 1]", EnvSafetyMargin, c.SafetyMargin)
	}
	return nil
}

// WithDefaults fills the zero fields.
func (c Config) WithDefaults() Config {
	c.Params = c.Params.WithDefaults()
	if c.NominalExec <= 0 {
		c.NominalExec = DefaultNominalExec
	}
	if c.NominalAgg <= 0 {
		c.NominalAgg = DefaultNominalAgg
	}
	return c
}

// Environment variables of Config (flags of `sg run`/`sg gw` carry the same
// names in lower case with dashes: --retry-min etc.).
const (
	EnvMin          = "SG_RETRY_MIN"           // min_seconds, a duration (default 1s)
	EnvMax          = "SG_RETRY_MAX"           // max_seconds, a duration (default 300s)
	EnvSafetyMargin = "SG_RETRY_SAFETY_MARGIN" // safety_margin, 0.0-1.0 (default 0.2)
	EnvNominalExec  = "SG_RETRY_NOMINAL_EXEC"  // P, a duration (default 2s)
	EnvNominalAgg   = "SG_RETRY_NOMINAL_AGG"   // T, a duration (default 100ms)
)

// FromEnv reads Config from the environment (look is os.LookupEnv in
// production; nil means it); unset variables keep c's values.
func FromEnv(c Config, look func(string) (string, bool)) (Config, error) {
	if look == nil {
		look = os.LookupEnv
	}
	for _, d := range []struct {
		name string
		to   *time.Duration
	}{{EnvMin, &c.Min}, {EnvMax, &c.Max}, {EnvNominalExec, &c.NominalExec}, {EnvNominalAgg, &c.NominalAgg}} {
		if s, ok := look(d.name); ok && s != "" {
			// Positive only: a zero field takes the default (WithDefaults),
			// so a 0 read here would silently mean 1s or 300s.
			v, err := defaults.ParseDuration(d.name, s, false)
			if err != nil {
				return c, err
			}
			*d.to = v
		}
	}
	if s, ok := look(EnvSafetyMargin); ok && s != "" {
		m, err := strconv.ParseFloat(s, 64)
		if err != nil || m < 0 || m > 1 {
			return c, fmt.Errorf("%s=%q: want a number in [0, 1]", EnvSafetyMargin, s)
		}
		c.SafetyMargin = m
		if m == 0 {
			// A margin of 0 is a choice: keep it, default the rest now.
			c.Params.NoDefaults = false
			c.Params = c.Params.WithDefaults()
			c.SafetyMargin = 0
			c.Params.NoDefaults = true
		}
	}
	return c, nil
}

// Facts are what sg measured of a request that is still running.
type Facts struct {
	// Stage is where the request stands, as an async caller sees it: a job
	// state (messages.Job*, the seed's Queued / Processing / TxInFlight /
	// ReceiptReceived / terminal rows mapped onto GW -> RC -> DAP -> Agg).
	Stage string
	// Ahead: queue items the request still waits behind, its own queued
	// items included (they drain before its last portion runs).
	Ahead int
	// DrainRate: items/s the DAPs that can serve it complete (measured; 0
	// unknown). Exec: their measured execution time (0: the nominal P).
	DrainRate float64
	Exec      time.Duration
	// Elapsed: time already spent in the stage (for the backoff B(E)).
	Elapsed time.Duration
}

// ForStage is the seed's table for sg's stages: Retry-After in whole
// seconds and the unpadded ETA (0 for terminal stages and the backoff).
//
//	queued (portions wait in the RC's queue; seed: Queued, "p/D"):
//	             clamp(⌈(Ahead/D + P + T) × (1+M)⌉, min, max)
//	executing (every portion is at a DAP; seed: Processing/TxInFlight):
//	             clamp(⌈(P + T) × (1+M)⌉, min, max)
//	aggregating (the Agg merges; seed: T):
//	             clamp(⌈T × (1+M)⌉, min, max)
//	waiting (nothing to estimate from: no RC reports the request, or it
//	waits on a secondary RC; seed: ReceiptReceived): B(E)
//	done, failed: 0
//
// P is the measured execution time when there is one, else NominalExec.
// A queued request with items ahead and no measured drain rate cannot be
// estimated: B(E).
func ForStage(f Facts, c Config) (retryAfter int, eta time.Duration) {
	c = c.WithDefaults()
	p := c.NominalExec
	if f.Exec > 0 {
		p = f.Exec
	}
	var e Estimate
	switch f.Stage {
	case messages.JobDone, messages.JobFailed:
		return 0, 0
	case messages.JobQueued:
		e = Estimate{Queues: []Queue{{Ahead: f.Ahead, Rate: f.DrainRate}}, Nominal: []time.Duration{p, c.NominalAgg}}
	case messages.JobExecuting:
		e = Estimate{Nominal: []time.Duration{p, c.NominalAgg}}
	case messages.JobAggregating:
		e = Estimate{Nominal: []time.Duration{c.NominalAgg}}
	default:
		return Backoff(f.Elapsed), 0
	}
	eta, ok := e.ETA()
	if !ok {
		return Backoff(f.Elapsed), 0
	}
	return Pad(eta, c.Params), eta
}

// Queued is the Retry-After of a caller refused over a limit: backlog items
// ahead of it, drained at rate items/s (measured, or NominalRate), without
// the execution terms (it is not admitted: it comes back to queue). It is
// the same formula as ForStage's queued row, so a refusal and an async
// answer say the same thing for the same facts.
func Queued(backlog int, rate float64, p Params) int {
	return Seconds(Estimate{Queues: []Queue{{Ahead: backlog, Rate: rate}}}, 0, p)
}

// NominalRate is the drain rate of slots workers at the nominal execution
// time, for when nothing was measured.
func NominalRate(slots int, nominalExec time.Duration) float64 {
	if nominalExec <= 0 {
		nominalExec = DefaultNominalExec
	}
	return float64(max(slots, 1)) / nominalExec.Seconds()
}
