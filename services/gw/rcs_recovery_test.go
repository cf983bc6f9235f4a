package gw

import (
	"testing"
	"time"

	"github.com/sg-project/sg/messages"
)

func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// An RC incarnation ends on a restart, a drain or silence; each ends once.
func TestRCIncarnationEnds(t *testing.T) {
	now := time.Unix(1000, 0)
	r := newRCRegistry(time.Second, 10*time.Second)
	a := &messages.RCAnnouncement{V: 1, RCID: "rc-1", StartedAt: 1}
	r.announce(a, now)
	gone := r.Gone("rc-1", 1)
	if closed(gone) || !r.Alive("rc-1", 1) {
		t.Fatal("live incarnation reported gone")
	}
	if !closed(r.Gone("rc-1", 7)) {
		t.Fatal("unknown incarnation not reported gone")
	}
	// Drain, then restart (the sequence that once closed a channel twice).
	r.announce(&messages.RCAnnouncement{V: 1, RCID: "rc-1", StartedAt: 1, Draining: true}, now)
	if !closed(gone) {
		t.Fatal("drain did not end the incarnation")
	}
	r.announce(&messages.RCAnnouncement{V: 1, RCID: "rc-1", StartedAt: 2}, now)
	g2 := r.Gone("rc-1", 2)
	if closed(g2) {
		t.Fatal("new incarnation reported gone")
	}
	if id, started, _ := r.pick("", AffinityHard, now); id != "rc-1" || started != 2 {
		t.Fatalf("pick %s/%d, want rc-1/2", id, started)
	}
	// Silence: after three periods no new requests, but the incarnation
	// lives on (a busy RC); if it speaks again, nothing happened.
	r.Prune(now.Add(3500 * time.Millisecond))
	if closed(g2) {
		t.Fatal("three silent periods ended the incarnation")
	}
	if id, _, _ := r.pick("", AffinityHard, now.Add(3500*time.Millisecond)); id != "" {
		t.Fatalf("silent RC %s picked", id)
	}
	r.announce(&messages.RCAnnouncement{V: 1, RCID: "rc-1", StartedAt: 2}, now.Add(4*time.Second))
	if closed(g2) || r.Gone("rc-1", 2) != g2 {
		t.Fatal("the RC came back, yet its incarnation ended")
	}
	// Silent for deadAfter: dead, its requests are driven again.
	r.Prune(now.Add(14 * time.Second))
	if closed(g2) {
		t.Fatal("ended before deadAfter")
	}
	r.Prune(now.Add(14 * time.Second).Add(time.Millisecond))
	if !closed(g2) {
		t.Fatal("deadAfter of silence did not end the incarnation")
	}
	r.Prune(now.Add(time.Hour)) // nothing left to end twice
}

// While a scope's RCs restart, a request waits for the next one: the
// failover window is three periods after one last served.
func TestFailoverWindow(t *testing.T) {
	now := time.Unix(1000, 0)
	r := newRCRegistry(time.Second, 10*time.Second)
	if until := r.Failover("a2", AffinityHard); !until.Before(now) {
		t.Fatalf("no RC ever served a2, yet wait until %v", until)
	}
	r.announce(&messages.RCAnnouncement{V: 1, RCID: "rc-2", Assembly: "a2", StartedAt: 1}, now)
	r.announce(&messages.RCAnnouncement{V: 1, RCID: "rc-2", Assembly: "a2", StartedAt: 1, Draining: true}, now.Add(time.Second))
	if until := r.Failover("a2", AffinityHard); !until.Equal(now.Add(3 * time.Second)) {
		t.Fatalf("failover until %v, want 3 periods after the last serving announcement", until)
	}
	r.announce(&messages.RCAnnouncement{V: 1, RCID: "rc-g", StartedAt: 1}, now.Add(2*time.Second))
	if until := r.Failover("a2", AffinitySoft); !until.Equal(now.Add(5 * time.Second)) {
		t.Fatalf("soft affinity failover until %v, want the global RC's window", until)
	}
}
