package gw

import (
	"slices"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/rs/zerolog"

	"github.com/sg-project/sg/messages"
	"github.com/sg-project/sg/subjects"
	"github.com/sg-project/sg/test/natstest"
)

// TestStallIsNotPeerSilence: a stall of this GW's loop (ten failover windows
// in which its ticker did not run) is not counted as the silence of its peer
// GWs: the first tick after it judges no peer gone and their open entries
// stay theirs, also those of a GW this GW has not heard yet. A peer that
// keeps beating after the stall is never judged gone; one that is silent
// after it is, within its failover window of the GW's running time, and so
// is the GW never heard. The ticks and heartbeats are driven as the loop
// does (shell.wake, prunePeers), on a clock of the test's.
func TestStallIsNotPeerSilence(t *testing.T) {
	g, sh, at, period, deadAfter := stallGW(t)
	tick := func() []string { sh.wake(at); return g.prunePeers(at) }
	beat := func(id string) {
		g.heardPeer(messages.GWHeartbeat{V: messages.RecoveryVersion, GWID: id, StartedAt: 7, IntervalMS: period.Milliseconds()}, at)
	}
	entry := func(id string) messages.LogEntry { return messages.LogEntry{GWID: id, GWStarted: 7} }
	orphans := func() []string {
		var ids []string
		for _, id := range []string{"live", "silent", "unheard"} {
			if g.orphan(entry(id), at) {
				ids = append(ids, id)
			}
		}
		return ids
	}

	// This GW has listened for a while: both peers beat, "unheard" never.
	for range 5 {
		beat("live")
		beat("silent")
		if gone := tick(); len(gone) != 0 {
			t.Fatalf("before the stall: %v judged gone", gone)
		}
		at = at.Add(period)
	}

	// The stall: the next tick comes ten failover windows late, and the
	// first heartbeats after it are heard after that tick.
	at = at.Add(10 * deadAfter)
	if gone := tick(); len(gone) != 0 {
		t.Fatalf("peers %v judged gone for this GW's own stall", gone)
	}
	if o := orphans(); len(o) != 0 {
		t.Fatalf("entries of %v adoptable right after this GW's stall", o)
	}
	var mv dto.Metric
	if err := g.met.stalls.Write(&mv); err != nil {
		t.Fatal(err)
	}
	if n := mv.GetCounter().GetValue(); n != 1 {
		t.Fatalf("sg_gw_loop_stalls_total = %v after one stall, want 1", n)
	}

	// After the stall, "live" beats every period and "silent" no more.
	window := max(announceMisses*period, deadAfter)
	stallEnd := at
	var silentGone time.Time
	for at.Sub(stallEnd) <= window+2*period {
		at = at.Add(period)
		beat("live")
		gone := tick()
		if slices.Contains(gone, "live") {
			t.Fatalf("the live peer judged gone %v after the stall", at.Sub(stallEnd))
		}
		if slices.Contains(gone, "silent") {
			silentGone = at
		}
	}
	if silentGone.IsZero() {
		t.Fatalf("the peer silent since the stall not judged gone %v after it", at.Sub(stallEnd))
	}
	if d := silentGone.Sub(stallEnd); d < window {
		t.Fatalf("the silent peer judged gone %v after the stall, before its failover window (%v)", d, window)
	}
	if o := orphans(); !slices.Equal(o, []string{"silent", "unheard"}) {
		t.Fatalf("entries adoptable %v after the stall, want those of the silent and the unheard GW", o)
	}
	if err := g.met.stalls.Write(&mv); err != nil {
		t.Fatal(err)
	}
	if n := mv.GetCounter().GetValue(); n != 1 {
		t.Fatalf("sg_gw_loop_stalls_total = %v after one stall and punctual ticks, want 1", n)
	}
}

// TestSmallLatenessIsNotPeerSilence: a tick late by less than a quarter
// period (40 ms of 200 ms) is not counted as a stall (metric), but its
// lateness is credited exactly: a peer silent 1.8 s of its 2 s failover
// window before it is at the window after it, and gone a nanosecond later.
func TestSmallLatenessIsNotPeerSilence(t *testing.T) {
	g, sh, at, period, _ := stallGW(t)
	tick := func() []string { sh.wake(at); return g.prunePeers(at) }
	g.heardPeer(messages.GWHeartbeat{V: messages.RecoveryVersion, GWID: "peer", StartedAt: 7, IntervalMS: period.Milliseconds()}, at)
	tick()
	for range 9 { // 1.8 s of the peer's silence
		at = at.Add(period)
		if gone := tick(); len(gone) != 0 {
			t.Fatalf("%v judged gone before its failover window", gone)
		}
	}
	at = at.Add(period + 40*time.Millisecond)
	if gone := tick(); len(gone) != 0 {
		t.Fatalf("%v judged gone for this GW's lateness of 40 ms", gone)
	}
	var mv dto.Metric
	if err := g.met.stalls.Write(&mv); err != nil {
		t.Fatal(err)
	}
	if n := mv.GetCounter().GetValue(); n != 0 {
		t.Fatalf("sg_gw_loop_stalls_total = %v after a lateness under a quarter period, want 0", n)
	}
	at = at.Add(time.Nanosecond)
	if gone := tick(); !slices.Equal(gone, []string{"peer"}) {
		t.Fatalf("gone %v a nanosecond past the peer's failover window, want the peer: more than the lateness was credited", gone)
	}
}

// stallGW is a GW whose peer judgement a test drives as the loop does, on a
// clock of the test's starting at at: period is its AnnounceEvery, deadAfter
// its failover window.
func stallGW(t *testing.T) (g *GW, sh *shell, at time.Time, period, deadAfter time.Duration) {
	t.Helper()
	nc := natstest.Connect(t, natstest.Start(t))
	period, deadAfter = 200*time.Millisecond, 2*time.Second
	g, err := New(Config{ID: "gw1", NC: nc, Subjects: subjects.Default(), Log: zerolog.New(zerolog.NewTestWriter(t)),
		AnnounceEvery: period, DeadAfter: deadAfter})
	if err != nil {
		t.Fatal(err)
	}
	at = time.Unix(1_000_000, 0)
	g.startedAt, g.peers.listening = at.UnixNano(), at
	return g, &shell{g: g, stall: g.newStallWatch()}, at, period, deadAfter
}
