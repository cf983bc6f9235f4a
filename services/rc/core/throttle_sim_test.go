package core

import (
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"
)

// TestThrottleSimulation runs the seeded simulation (sim_test.go) with DAPs
// also answering portions THROTTLED at random, for a few endpoint keys: every
// invariant of the simulation still holds after every step (each request
// ends exactly once and never after its deadline, coverage exactly once at
// one vintage, concurrency, oldest first, no ready DAP idle beside work it
// could take, paused DAPs given nothing), and a throttle never counts as a
// retry. Replay one seed with SIM_SEED=<n> -run ThrottleSimulation -v.
func TestThrottleSimulation(t *testing.T) {
	if s := os.Getenv("SIM_SEED"); s != "" {
		seed, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("SIM_SEED=%q: %v", s, err)
		}
		if err := simulateThrottled(seed, t.Logf); err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		return
	}
	n := 100
	if s := os.Getenv("SIM_SEEDS"); s != "" {
		if v, err := strconv.Atoi(s); err == nil && v > 0 {
			n = max(1, v/2)
		}
	}
	quiet := func(string, ...any) {}
	failed := 0
	for seed := uint64(1); seed <= uint64(n); seed++ {
		if err := simulateThrottled(seed, quiet); err != nil {
			t.Errorf("seed %d: %v\n  replay: SIM_SEED=%d go test ./services/rc/core -run ThrottleSimulation -v", seed, err, seed)
			if failed++; failed >= 5 {
				t.FailNow()
			}
		}
	}
	t.Logf("%d seeds", n)
}

// simulateThrottled is simulate with throttles among the events.
func simulateThrottled(seed uint64, logf func(string, ...any)) error {
	s := newSim(seed, 0x7410771e, logf)
	s.c = New(Config{Self: "rc-1", MaxRetry: s.maxRetry, TickEvery: time.Second, Aggs: []string{"agg-1", "agg-2"}})
	for i := 0; i < 1+s.rng.IntN(4); i++ {
		s.labels = append(s.labels, lbl("region", fmt.Sprintf("r%d", i)))
	}
	for i := 0; i < 1+s.rng.IntN(30); i++ {
		if err := s.addDAP(); err != nil {
			return err
		}
	}
	keys := []string{"", "ep-0", "ep-1", "ep-2"}
	steps := 200 + s.rng.IntN(400)
	for i := 0; i < steps; i++ {
		var err error
		if s.rng.IntN(100) < 12 {
			err = s.throttleOne(keys)
		} else {
			err = s.randomEvent()
		}
		if err != nil {
			return fmt.Errorf("step %d (t=+%s): %w", i, time.Duration(s.now-t0), err)
		}
	}
	return s.drain()
}

// throttleOne: a DAP answers one of its portions THROTTLED for up to 5 s.
func (s *sim) throttleOne(keys []string) error {
	var holders []*simDAP
	for _, id := range s.dapOrder {
		if d := s.daps[id]; len(d.inflight) > 0 {
			holders = append(holders, d)
		}
	}
	if len(holders) == 0 {
		return s.step(Tick{At: s.now})
	}
	d := holders[s.rng.IntN(len(holders))]
	i := s.rng.IntN(len(d.inflight))
	p := d.inflight[i]
	d.inflight = append(d.inflight[:i], d.inflight[i+1:]...)
	until := s.now + int64(s.rng.IntN(5000))*int64(time.Millisecond)
	before, _ := s.c.Stats()
	if err := s.step(DAPThrottled{At: s.now, Request: p.d.Portion.Request, Portion: p.d.Portion.ID, DAP: d.info.ID,
		Endpoint: keys[s.rng.IntN(len(keys))], Until: until}); err != nil {
		return err
	}
	after, _ := s.c.Stats()
	if after.Retries != before.Retries {
		return fmt.Errorf("throttle of portion %d counted %d retries", p.d.Portion.ID, after.Retries-before.Retries)
	}
	if cd := s.c.fleet.byID[d.info.ID]; cd != nil && until > s.now && cd.pausedUntil < until {
		return fmt.Errorf("DAP %s paused until %s, asked %s", d.info.ID, formatTS(cd.pausedUntil), formatTS(until))
	}
	return nil
}
