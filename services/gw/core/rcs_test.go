package core

import "testing"

// An RC incarnation ends on a restart, a drain or silence for DeadAfter;
// three silent periods only stop new requests.
func TestRCIncarnationEnds(t *testing.T) {
	r := newRCs()
	now := t0
	r.announce(RCInfo{ID: "rc-1", StartedAt: 1}, now, announce)
	if !r.alive("rc-1", 1) || r.alive("rc-1", 7) {
		t.Fatal("wrong incarnation alive")
	}
	r.announce(RCInfo{ID: "rc-1", StartedAt: 1, Draining: true}, now, announce)
	if r.alive("rc-1", 1) {
		t.Fatal("drain did not end the incarnation")
	}
	if changed := r.announce(RCInfo{ID: "rc-1", StartedAt: 2}, now, announce); !changed || !r.alive("rc-1", 2) {
		t.Fatal("restart not noticed")
	}
	if rc, _ := r.pick("", AffinityHard); rc == nil || rc.StartedAt != 2 {
		t.Fatal("restarted RC not picked")
	}
	// Silence: after three periods no new requests, but the incarnation
	// lives on (a busy RC).
	if r.prune(now+3*announce+ms, deadAfter) || !r.alive("rc-1", 2) {
		t.Fatal("three silent periods ended the incarnation")
	}
	if rc, _ := r.pick("", AffinityHard); rc != nil {
		t.Fatal("silent RC picked")
	}
	r.announce(RCInfo{ID: "rc-1", StartedAt: 2}, now+4*announce, announce)
	if rc, _ := r.pick("", AffinityHard); rc == nil {
		t.Fatal("the RC came back, yet is not picked")
	}
	if r.prune(now+4*announce+deadAfter, deadAfter) {
		t.Fatal("ended at deadAfter, before it was exceeded")
	}
	if !r.prune(now+4*announce+deadAfter+1, deadAfter) || r.alive("rc-1", 2) {
		t.Fatal("deadAfter of silence did not end the incarnation")
	}
}

// While a scope's RCs restart, a request waits for the next one: the
// failover window runs from when one last served.
func TestFailoverWindow(t *testing.T) {
	r := newRCs()
	const window = 3 * announce
	if until := r.failover("a2", AffinityHard, window); until != 0 {
		t.Fatalf("no RC ever served a2, yet wait until %d", until)
	}
	r.announce(RCInfo{ID: "rc-2", Assembly: "a2", StartedAt: 1}, t0, announce)
	r.announce(RCInfo{ID: "rc-2", Assembly: "a2", StartedAt: 1, Draining: true}, t0+announce, announce)
	if until := r.failover("a2", AffinityHard, window); until != t0+window {
		t.Fatalf("failover until +%d, want the window after the last serving announcement", until-t0)
	}
	r.announce(RCInfo{ID: "rc-g", StartedAt: 1}, t0+2*announce, announce)
	if until := r.failover("a2", AffinitySoft, window); until != t0+2*announce+window {
		t.Fatalf("soft affinity failover until +%d, want the global RC's window", until-t0)
	}
}

// The GW's own stall (a stopped or starved process: its ticker, which fires
// every announcement period, came late; the shell measures it and the Tick
// says it) is not its RCs' silence: their announcements could not be heard
// meanwhile. Silence after it still counts.
func TestStallIsNotRCSilence(t *testing.T) {
	s := newStory(t, "gw-1", 1)
	s.rc("rc-1", 1)
	s.step(Tick{At: s.now})
	s.now += 10 * deadAfter // stalled
	s.step(Tick{At: s.now, Late: 10*deadAfter - announce})
	if len(s.c.RCs()) != 1 {
		t.Fatal("the RC was judged silent for the GW's own stall")
	}
	for range 4 { // three silent periods on the GW's running time
		s.now += announce
		s.step(Tick{At: s.now})
	}
	if len(s.c.RCs()) != 0 {
		t.Fatal("the RC, silent four periods after the stall, still gets new requests")
	}
}

// The core credits the lateness its Tick says, and measures none itself: a
// Tick that comes long after the last one without a Late (the shell's timer
// after a quiet spell, with the periodic Ticks dropped as in this test)
// judges the RC silent.
func TestTickLateIsTheOnlyCredit(t *testing.T) {
	s := newStory(t, "gw-1", 1)
	s.rc("rc-1", 1)
	s.step(Tick{At: s.now})
	s.now += 10 * deadAfter
	s.step(Tick{At: s.now})
	if len(s.c.RCs()) != 0 {
		t.Fatal("the RC, silent for ten failover windows by a Tick without Late, still gets new requests: the core credited a stall of its own measure")
	}
}

// stalledStory: an RC announced, the GW ticking every period while the RC
// stays silent for silent, then a Tick late by late on top of the period.
func stalledStory(t *testing.T, silent, late int64) *story {
	s := newStory(t, "gw-1", 1)
	s.rc("rc-1", 1)
	s.step(Tick{At: s.now})
	for end := s.now + silent; s.now < end; {
		s.now += announce
		s.step(Tick{At: s.now})
	}
	if len(s.c.RCs()) != 1 {
		t.Fatalf("the RC, silent %d ms, under three periods, gets no new requests", silent/ms)
	}
	s.now += announce + late
	s.step(Tick{At: s.now, Late: late})
	return s
}

// An RC already silent 1.5 periods when the GW stalls is judged on the GW's
// running time: 2.5 periods after the stall (the 1.5 and the period the GW is
// due to tick in), silent (three periods) one period later: the stall is
// credited, not a reset of its silence.
func TestStallKeepsRCSilenceBeforeIt(t *testing.T) {
	s := stalledStory(t, 3*announce/2, 10*deadAfter)
	if len(s.c.RCs()) != 1 {
		t.Fatal("the RC was judged silent for the GW's own stall")
	}
	s.now += announce
	s.step(Tick{At: s.now})
	if len(s.c.RCs()) != 0 {
		t.Fatal("the RC, silent 1.5 periods before the stall and one after it, still gets new requests: the stall erased its silence")
	}
}

// A lateness of the GW's Tick under a quarter period (a fifth) is credited
// exactly: an RC silent two periods before it is at its limit of three after
// it, and silent a nanosecond later.
func TestSmallLatenessIsCreditedToRCs(t *testing.T) {
	s := stalledStory(t, 2*announce, announce/5)
	if len(s.c.RCs()) != 1 {
		t.Fatal("the RC was judged silent for the GW's lateness of a fifth of a period")
	}
	s.now++
	s.step(Tick{At: s.now})
	if len(s.c.RCs()) != 0 {
		t.Fatal("the RC, at its limit, still gets new requests a nanosecond later: more than the lateness was credited")
	}
}
