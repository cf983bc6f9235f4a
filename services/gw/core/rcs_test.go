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
// every announcement period, came late) is not its RCs' silence: their
// announcements could not be heard meanwhile. Silence after it still counts.
func TestStallIsNotRCSilence(t *testing.T) {
	s := newStory(t, "gw-1", 1)
	s.rc("rc-1", 1)
	s.step(Tick{At: s.now})
	s.now += 10 * deadAfter // stalled
	s.step(Tick{At: s.now})
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
