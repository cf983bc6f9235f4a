package rc

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/sg-project/sg/messages"
	"github.com/sg-project/sg/services/defaults"
	"github.com/sg-project/sg/subjects"
	"github.com/sg-project/sg/test/natstest"
)

// tickRC is an RC on nc whose clock is *clock, warm, with DAP d1 registered
// and beating every 200 ms as of *clock; hb is d1's heartbeat.
func tickRC(t *testing.T, nc *nats.Conn, clock *time.Time, cfg Config) (r *RC, hb []byte) {
	t.Helper()
	cfg.ID, cfg.NC, cfg.Subjects, cfg.Log, cfg.WarmUp = "rc-1", nc, subjects.Default(), zerolog.Nop(), -1
	cfg.Now = func() time.Time { return *clock }
	r, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	r.isWarm = true
	reg := messages.DAPRegistration{V: messages.DAPVersion, DAPID: "d1", Labels: messages.LabelSet{"region": "eu"},
		Tier: messages.TierHDB, Purview: messages.Unbounded, Tables: []messages.TableInfo{{Name: "trade", Kind: messages.TablePartitioned}},
		Available: true, Concurrency: 1, PurviewVersion: 1, ReferenceVintage: 1}
	data, err := messages.Encode(&reg)
	if err != nil {
		t.Fatal(err)
	}
	r.dapEvent("d1", subjects.EventRegister, data, *clock)
	hb, err = messages.Encode(&messages.DAPHeartbeat{V: messages.DAPVersion, DAPID: "d1", Seq: 1, IntervalMS: 200,
		PurviewVersion: 1, ReferenceVintage: 1})
	if err != nil {
		t.Fatal(err)
	}
	r.dapEvent("d1", subjects.EventHeartbeat, hb, *clock)
	return r, hb
}

// TestTickHearsQueuedHeartbeatsFirst: after 10 s in which nothing was
// handled (the loop judged all along: the silence is the DAP's), a tick does
// not drop a DAP whose heartbeat is waiting in the inbox; with no heartbeat
// waiting, the same tick drops it.
func TestTickHearsQueuedHeartbeatsFirst(t *testing.T) {
	nc := natstest.Connect(t, natstest.Start(t))
	s := subjects.Default()
	for _, queued := range []bool{true, false} {
		clock := time.Unix(1_000_000, 0)
		r, hb := tickRC(t, nc, &clock, Config{})

		clock = clock.Add(10 * time.Second)
		r.stall.Wake(clock) // the loop judged all along: not a stall of the RC's (stall.go)
		inbox := make(chan input, 4)
		if queued {
			inbox <- input{subject: s.DAPHeartbeat("d1"), msg: &nats.Msg{Subject: s.DAPHeartbeat("d1"), Data: hb}}
		}
		r.onTick(inbox)
		if _, known := r.daps["d1"]; known != queued {
			t.Fatalf("heartbeat queued %v: DAP still known %v after the tick", queued, known)
		}
		if len(inbox) != 0 {
			t.Fatalf("%d inputs left in the inbox", len(inbox))
		}
	}
}

// TestStallIsNotSilence: the RC's own loop stalled 10 s (a stopped or
// starved process; in sg run its DAPs and Aggs with it): the first tick after
// it drops neither the DAP nor the Agg, whose beats could not be heard
// meanwhile; silence after it, on the RC's running time, still drops both.
func TestStallIsNotSilence(t *testing.T) {
	nc := natstest.Connect(t, natstest.Start(t))
	clock := time.Unix(1_000_000, 0)
	const period = 100 * time.Millisecond // the RC's announcement period: its loop wakes at least this often
	r, _ := tickRC(t, nc, &clock, Config{AnnounceEvery: period, AggIDs: []string{"agg-1"}})
	ahb, err := messages.Encode(&messages.AggHeartbeat{V: messages.AggVersion, AggID: "agg-1", Seq: 1, StartedAt: 1, IntervalMS: 200})
	if err != nil {
		t.Fatal(err)
	}
	r.aggs["agg-1"] = &aggRecord{lastSeen: clock, interval: defaultAggHeartbeat}
	r.onAggHeartbeat("agg-1", ahb, clock)
	inbox := make(chan input)
	r.onTick(inbox) // the loop runs

	clock = clock.Add(10 * time.Second) // the loop stalled
	r.onTick(inbox)
	if _, known := r.daps["d1"]; !known {
		t.Fatal("the DAP was dropped for the RC's own stall")
	}
	if r.aggs["agg-1"].dead {
		t.Fatal("the Agg was lost for the RC's own stall")
	}
	// Nothing heard after the stall: 3 intervals (600 ms) of the RC's
	// running time, judged at its period, and both are gone.
	for range 10 {
		clock = clock.Add(period)
		r.onTick(inbox)
	}
	if _, known := r.daps["d1"]; known {
		t.Fatal("the DAP, silent 1 s after the stall, is still known")
	}
	if !r.aggs["agg-1"].dead {
		t.Fatal("the Agg, silent 1 s after the stall, is not lost")
	}
}

// stallRC is tickRC with the loop running (judging every period) while d1
// stays silent for silent, then lets it come back late by late on top of the
// period; it returns the RC after that tick.
func stallRC(t *testing.T, clock *time.Time, period, silent, late time.Duration) *RC {
	t.Helper()
	nc := natstest.Connect(t, natstest.Start(t))
	r, _ := tickRC(t, nc, clock, Config{AnnounceEvery: period})
	inbox := make(chan input)
	r.onTick(inbox)
	for end := clock.Add(silent); clock.Before(end); {
		*clock = clock.Add(period)
		r.onTick(inbox)
	}
	if _, known := r.daps["d1"]; !known {
		t.Fatalf("the DAP was dropped after %v of silence, under its limit", silent)
	}
	*clock = clock.Add(period + late)
	r.onTick(inbox)
	return r
}

// TestStallKeepsSilenceBeforeIt: a DAP (200 ms heartbeat: dropped after
// 600 ms of silence) already silent 500 ms when the RC stalls 10 s is kept by
// the first tick after it (its silence is 600 ms of the RC's running time:
// the 500 ms and the period the loop is due to wake in) and dropped one
// period later: the stall is credited, not a reset of its silence.
func TestStallKeepsSilenceBeforeIt(t *testing.T) {
	const period = 100 * time.Millisecond
	clock := time.Unix(1_000_000, 0)
	r := stallRC(t, &clock, period, 500*time.Millisecond, 10*time.Second)
	if _, known := r.daps["d1"]; !known {
		t.Fatal("the DAP was dropped for the RC's own stall")
	}
	clock = clock.Add(period)
	r.onTick(make(chan input))
	if _, known := r.daps["d1"]; known {
		t.Fatal("the DAP, silent 500 ms before the stall and a period after it, is still known: the stall erased its silence")
	}
}

// TestSmallLatenessIsCredited: a lateness of the RC's loop under a quarter
// period (20 ms of a 100 ms period) is still not the DAP's silence: it is
// credited exactly, so a DAP silent 500 ms before it is at its 600 ms limit
// after it, and dropped a nanosecond later.
func TestSmallLatenessIsCredited(t *testing.T) {
	const period = 100 * time.Millisecond
	clock := time.Unix(1_000_000, 0)
	r := stallRC(t, &clock, period, 500*time.Millisecond, 20*time.Millisecond)
	if _, known := r.daps["d1"]; !known {
		t.Fatal("the DAP was dropped for the RC's lateness of 20 ms")
	}
	clock = clock.Add(time.Nanosecond)
	r.onTick(make(chan input))
	if _, known := r.daps["d1"]; known {
		t.Fatal("the DAP, at its limit, is still known a nanosecond later: more than the lateness was credited")
	}
}

// TestStallIsNotPeerRCSilence: a peer RC (dropped after 3 s of silence)
// already silent 2.5 s when this RC stalls 10 s is kept by the announcement
// after the stall, which judges peers, and dropped about one period past
// its 3 s of the RC's running time.
func TestStallIsNotPeerRCSilence(t *testing.T) {
	nc := natstest.Connect(t, natstest.Start(t))
	const period = 100 * time.Millisecond
	clock := time.Unix(1_000_000, 0)
	r, _ := tickRC(t, nc, &clock, Config{AnnounceEvery: period})
	r.peers["rc-2"] = &peerRC{startedAt: 1, lastSeen: clock, period: period}
	r.onAnnounce()
	for end := clock.Add(2500 * time.Millisecond); clock.Before(end); {
		clock = clock.Add(period)
		r.onAnnounce()
	}
	clock = clock.Add(10 * time.Second)
	r.onAnnounce()
	if _, known := r.peers["rc-2"]; !known {
		t.Fatal("the peer RC was dropped for this RC's own stall")
	}
	for range 6 { // 600 ms: 3.1 s of silence on the RC's running time
		clock = clock.Add(period)
		r.onAnnounce()
	}
	if _, known := r.peers["rc-2"]; known {
		t.Fatal("the peer RC, silent 2.5 s before the stall and 600 ms after it, is still known: the stall erased its silence")
	}
}

// TestPingAfterStall: a ping handled after a stall of the RC's, before its
// first tick, reports a DAP heard just before the stall as reached.
func TestPingAfterStall(t *testing.T) {
	nc := natstest.Connect(t, natstest.Start(t))
	const period = 100 * time.Millisecond
	clock := time.Unix(1_000_000, 0)
	r, _ := tickRC(t, nc, &clock, Config{AnnounceEvery: period})
	r.onTick(make(chan input))
	clock = clock.Add(10 * time.Second)

	reply, err := nc.SubscribeSync(nats.NewInbox())
	if err != nil {
		t.Fatal(err)
	}
	r.answerPing(messages.RCSubmission{V: messages.RequestVersion, RequestID: "ping-1", ReplyTo: reply.Subject, Content: messages.ContentJSON}, clock)
	m, err := reply.NextMsg(5 * time.Second)
	if err != nil {
		t.Fatalf("no ping answer: %v", err)
	}
	resp, err := messages.DecodeResponse(m.Header, m.Data)
	if err != nil {
		t.Fatal(err)
	}
	if !resp.Header.Status.IsOK() {
		t.Fatalf("ping answered %v", resp.Header.Status)
	}
	var out []PingResult
	if err := json.Unmarshal(resp.Payload, &out); err != nil {
		t.Fatal(err)
	}
	if len(out) != 1 || out[0].DAP != "d1" || !out[0].Reached {
		t.Fatalf("ping after the RC's stall: %+v, want d1 reached", out)
	}
}

// loopSim emulates the RC's loop (Run) on a fake clock: the wake ticker at
// the period armWake gives it, the announcement ticker every AnnounceEvery,
// d1 beating every 200 ms while beating. Every wake also judges, as a tick
// of the RC's timer does.
type loopSim struct {
	r       *RC
	clock   *time.Time
	hb      []byte
	ticker  *time.Ticker // armWake resets it; the emulation reads r.stall.Period
	inbox   chan input
	beating bool

	nextWake, nextAnnounce, nextBeat time.Time
}

func newLoopSim(t *testing.T, r *RC, clock *time.Time, hb []byte) *loopSim {
	l := &loopSim{r: r, clock: clock, hb: hb, ticker: time.NewTicker(time.Hour), inbox: make(chan input), beating: true}
	t.Cleanup(l.ticker.Stop)
	r.wantWake = r.wakePeriod() // as Run does before its loop
	r.armWake(l.ticker)
	r.stall.Wake(*clock)
	l.nextWake, l.nextAnnounce, l.nextBeat = clock.Add(r.stall.Period), clock.Add(r.cfg.AnnounceEvery), clock.Add(200*time.Millisecond)
	return l
}

// run lets the loop run for d, handling every wake due until then.
func (l *loopSim) run(d time.Duration) {
	end := l.clock.Add(d)
	for {
		next := l.nextWake
		if l.nextAnnounce.Before(next) {
			next = l.nextAnnounce
		}
		if l.beating && l.nextBeat.Before(next) {
			next = l.nextBeat
		}
		if next.After(end) {
			*l.clock = end
			return
		}
		*l.clock = next
		period := l.r.stall.Period
		switch {
		case l.beating && next.Equal(l.nextBeat):
			l.r.dapEvent("d1", subjects.EventHeartbeat, l.hb, next)
			l.nextBeat = next.Add(200 * time.Millisecond)
		case next.Equal(l.nextWake):
			l.r.onTick(l.inbox)
			l.nextWake = next.Add(period)
		default:
			l.r.onAnnounce()
			l.nextAnnounce = next.Add(l.r.cfg.AnnounceEvery)
		}
		l.r.armWake(l.ticker)
		if l.r.stall.Period != period { // Reset: the next tick a new period on
			l.nextWake = next.Add(l.r.stall.Period)
		}
	}
}

// stall stops the loop for d; then the ticks due meanwhile are ready, and the
// first handled judges.
func (l *loopSim) stall(d time.Duration) {
	*l.clock = l.clock.Add(d)
	l.r.onTick(l.inbox)
	l.r.armWake(l.ticker)
	l.nextWake, l.nextAnnounce = l.clock.Add(l.r.stall.Period), l.clock.Add(l.r.cfg.AnnounceEvery)
	if l.nextBeat.Before(*l.clock) {
		l.nextBeat = *l.clock
	}
}

// TestShortHeartbeatStall: a DAP beating every 200 ms (dropped after 600 ms
// of silence) under an RC announcing every second; the RC's loop stalls
// 700 ms just after a wake. The stall is measured at half the DAP's interval
// (stall.go), not at the announcement period, so the DAP is kept; silent
// after the stall, it is still dropped after 600 ms of the RC's running time
// (less what the stall could not be told from a punctual wake: one wake
// period).
func TestShortHeartbeatStall(t *testing.T) {
	nc := natstest.Connect(t, natstest.Start(t))
	clock := time.Unix(1_000_000, 0)
	r, hb := tickRC(t, nc, &clock, Config{}) // AnnounceEvery: 1 s
	l := newLoopSim(t, r, &clock, hb)
	l.run(2 * time.Second) // ends on a beat, a wake and an announcement
	if _, known := r.daps["d1"]; !known {
		t.Fatal("the DAP, beating, was dropped")
	}

	l.stall(700 * time.Millisecond)
	if _, known := r.daps["d1"]; !known {
		t.Fatalf("the DAP (600 ms dead-after) was dropped for a 700 ms stall of the RC's own, measured at a %v period", r.stall.Period)
	}

	l.beating = false
	l.run(400 * time.Millisecond)
	if _, known := r.daps["d1"]; !known {
		t.Fatal("the DAP, silent 400 ms after the stall, was dropped: the stall was counted as its silence")
	}
	l.run(200 * time.Millisecond)
	if _, known := r.daps["d1"]; known {
		t.Fatal("the DAP, silent 600 ms after the stall, is still known: more than the stall was credited")
	}
}

// TestWakePeriod: the wake period follows the shortest heartbeat interval of
// the DAPs and live Aggs (half of it), at once when one beats faster, at the
// next announcement when it leaves; never above the announcement period, and
// never below defaults.RCWakeFloor, whatever interval a hostile DAP announces.
func TestWakePeriod(t *testing.T) {
	nc := natstest.Connect(t, natstest.Start(t))
	clock := time.Unix(1_000_000, 0)
	r, _ := tickRC(t, nc, &clock, Config{AggIDs: []string{"agg-1"}}) // d1 beats every 200 ms
	r.aggs["agg-1"] = &aggRecord{lastSeen: clock, interval: defaultAggHeartbeat}
	ticker := time.NewTicker(time.Hour)
	defer ticker.Stop()
	period := func(want time.Duration, when string) {
		t.Helper()
		r.armWake(ticker)
		if r.stall.Period != want {
			t.Fatalf("%s: wake period %v, want %v", when, r.stall.Period, want)
		}
	}
	period(100*time.Millisecond, "d1 beating every 200 ms")

	beat := func(dap string, ms int64) {
		t.Helper()
		reg := r.daps["d1"].reg
		reg.DAPID = dap
		hb, err := messages.Encode(&messages.DAPHeartbeat{V: messages.DAPVersion, DAPID: dap, Seq: 1, IntervalMS: ms,
			PurviewVersion: 1, ReferenceVintage: 1, Registration: &reg})
		if err != nil {
			t.Fatal(err)
		}
		r.dapEvent(dap, subjects.EventHeartbeat, hb, clock)
	}
	beat("d2", 1) // registers d2 from its heartbeat
	beat("d2", 1) // and says its interval: 1 ms
	period(defaults.RCWakeFloor, "a DAP announcing 1 ms")

	lost, err := messages.Encode(&messages.DAPLost{V: messages.DAPVersion, DAPID: "d2", Reason: "shutdown"})
	if err != nil {
		t.Fatal(err)
	}
	r.dapEvent("d2", subjects.EventLost, lost, clock)
	period(defaults.RCWakeFloor, "d2 gone, before the next announcement")
	r.onAnnounce()
	period(100*time.Millisecond, "d2 gone, after the announcement")

	aggBeat := func(ms int64) {
		t.Helper()
		ahb, err := messages.Encode(&messages.AggHeartbeat{V: messages.AggVersion, AggID: "agg-1", Seq: 1, StartedAt: 1, IntervalMS: ms})
		if err != nil {
			t.Fatal(err)
		}
		r.onAggHeartbeat("agg-1", ahb, clock)
	}
	aggBeat(60)
	period(30*time.Millisecond, "the Agg beating every 60 ms")

	beat("d1", 10_000)
	aggBeat(10_000)
	r.onAnnounce()
	period(r.cfg.AnnounceEvery, "every beat slower than twice the announcement period")
}
