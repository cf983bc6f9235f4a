package test

import (
	"strings"
	"testing"
	"time"

	"github.com/sg-project/sg/messages"
	"github.com/sg-project/sg/services/agg"
	"github.com/sg-project/sg/services/dap/demo"
	"github.com/sg-project/sg/services/gw"
	"github.com/sg-project/sg/test/promtest"
)

// oneRC: a durable global RC owning every DAP, an Agg, and the fleet.
func oneRC(t *testing.T) *deployment {
	d := newDeployment(t)
	d.startAgg("agg-1")
	d.startRC("rc-1", rcOpts{durable: true})
	d.startFleet(func(string) (string, string) { return "rc-1", "" })
	d.waitFleet(9, "rc-1")
	return d
}

func TestRestartRCMidRequestIsAnsweredOnceAndRight(t *testing.T) {
	d := oneRC(t)
	ans := d.collect()
	g := d.startGW("gw-1", gwOpts{durable: true})
	depWaitGWRCs(t, g, "rc-1")
	held := d.dapIDs("eu")[0]
	d.gates[held].hold()

	args := tradeArgs()
	d.send(d.newRequest("r1", args, messages.Scope{}, 20*time.Second))
	d.waitEntered(held)

	// The RC dies with the request in flight, saying nothing.
	d.crash("rc-1")
	r := d.startRC("rc-1", rcOpts{durable: true})
	// The new RC knew the whole fleet from the DAP state stream before it
	// first announced itself, so before any DAP could react to it.
	if n := r.RecoveredDAPs(); n != 9 {
		t.Fatalf("restarted RC rebuilt %d DAPs from the stream, want 9", n)
	}
	// The GW drives the request again on the new RC: its portion reaches
	// the held DAP a second time.
	d.waitEntered(held)
	d.gates[held].release()

	st, tbl := depStatus(t, ans.wait(t, "r1", 15*time.Second))
	if !st.IsOK() || !depTablesEqual(t, tbl, d.want(args)) {
		t.Fatalf("after the RC restart: %+v, %d rows", st, tbl.NumRows())
	}
	if n := promtest.Sum(t, d.proc("gw-1").reg, "sg_gw_redrives_total", map[string]string{"reason": "rc gone"}); n != 1 {
		t.Errorf("re-drives: %v, want 1", n)
	}
	// A new RC, never seen before, has the fleet too.
	if n := d.startRC("rc-new", rcOpts{durable: true}).RecoveredDAPs(); n != 9 {
		t.Errorf("new RC rebuilt %d DAPs, want 9", n)
	}
	quiet(t, d, ans, "r1")
}

func TestRestartRCTooLateIsTimedOutOnce(t *testing.T) {
	d := oneRC(t)
	ans := d.collect()
	g := d.startGW("gw-1", gwOpts{durable: true, margin: 300 * time.Millisecond})
	depWaitGWRCs(t, g, "rc-1")
	held := d.dapIDs("eu")[0]
	d.gates[held].hold()
	defer d.gates[held].release()

	d.send(d.newRequest("r2", tradeArgs(), messages.Scope{}, 1500*time.Millisecond))
	d.waitEntered(held)
	d.crash("rc-1")
	// No RC until past the deadline: the GW answers the timeout itself.
	st, _ := depStatus(t, ans.wait(t, "r2", 10*time.Second))
	if st.RC != messages.CodeTimeout || st.AC != messages.CodeErr || st.AI != gw.TextTimeout {
		t.Fatalf("got %+v, want the GW timeout", st)
	}
	d.startRC("rc-1", rcOpts{durable: true})
	quiet(t, d, ans, "r2")
}

func TestRestartGWMidRequestIsAnsweredOnceAndRight(t *testing.T) {
	d := oneRC(t)
	ans := d.collect()
	g := d.startGW("gw-1", gwOpts{durable: true})
	depWaitGWRCs(t, g, "rc-1")
	held := d.dapIDs("us")[0]
	d.gates[held].hold()
	// The GW dies once the entry is written (before it, nothing would be
	// promised; with an opt-in CreateAfter the write waits that long).
	entries, err := d.nc.SubscribeSync(d.s.RequestLogEntryPattern())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = entries.Unsubscribe() }()
	if err := d.nc.Flush(); err != nil {
		t.Fatal(err)
	}

	args := tradeArgs()
	d.send(d.newRequest("g1", args, messages.Scope{}, 20*time.Second))
	d.waitEntered(held)
	if _, err := entries.NextMsg(10 * time.Second); err != nil {
		t.Fatalf("g1's request log entry: %v", err)
	}

	// The GW dies; its next incarnation finds the open entry in the
	// request log, adopts it and drives it again.
	d.crash("gw-1")
	d.startGW("gw-1", gwOpts{durable: true})
	d.waitEntered(held)
	d.gates[held].release()

	st, tbl := depStatus(t, ans.wait(t, "g1", 15*time.Second))
	if !st.IsOK() || !depTablesEqual(t, tbl, d.want(args)) {
		t.Fatalf("after the GW restart: %+v, %d rows", st, tbl.NumRows())
	}
	if n := promtest.Sum(t, d.proc("gw-1").reg, "sg_gw_requests_adopted_total", nil); n != 1 {
		t.Errorf("adopted %v, want 1", n)
	}
	quiet(t, d, ans, "g1")
}

func TestRestartGWPeerAdoptsTheDeadGWsRequests(t *testing.T) {
	d := oneRC(t)
	ans := d.collect()
	g1 := d.startGW("gw-1", gwOpts{durable: true})
	depWaitGWRCs(t, g1, "rc-1")
	held := d.dapIDs("asia")[0]
	d.gates[held].hold()

	args := tradeArgs()
	d.send(d.newRequest("p1", args, messages.Scope{}, 20*time.Second))
	d.waitEntered(held)
	g2 := d.startGW("gw-2", gwOpts{durable: true})
	depWaitGWRCs(t, g2, "rc-1")

	// gw-1 dies for good: gw-2 misses its heartbeats, adopts the request
	// and drives it again.
	d.crash("gw-1")
	d.waitEntered(held)
	d.gates[held].release()

	st, tbl := depStatus(t, ans.wait(t, "p1", 15*time.Second))
	if !st.IsOK() || !depTablesEqual(t, tbl, d.want(args)) {
		t.Fatalf("after gw-1 died: %+v, %d rows", st, tbl.NumRows())
	}
	if n := promtest.Sum(t, d.proc("gw-2").reg, "sg_gw_requests_adopted_total", nil); n != 1 {
		t.Errorf("gw-2 adopted %v, want 1", n)
	}
	quiet(t, d, ans, "p1")
}

// quiet checks that no second answer comes: it waits, bounded, for anything
// still in flight to arrive (the GW's margin, a late drive's answer).
func quiet(t *testing.T, d *deployment, ans *depAnswers, ids ...string) {
	t.Helper()
	if err := d.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	deadline := time.After(time.Second)
	for {
		select {
		case <-ans.more:
			continue
		case <-deadline:
		}
		break
	}
	for _, id := range ids {
		if n := ans.count(id); n != 1 {
			t.Errorf("%s: %d answers, want exactly 1", id, n)
		}
	}
}

func TestRestartDAPSilentIsDroppedAndItsWorkRetried(t *testing.T) {
	d := oneRC(t)
	ans := d.collect()
	g := d.startGW("gw-1", gwOpts{durable: true})
	depWaitGWRCs(t, g, "rc-1")
	held := d.dapIDs("eu")[0]
	d.gates[held].hold()

	args := tradeArgs()
	d.send(d.newRequest("dap1", args, messages.Scope{}, 20*time.Second))
	d.waitEntered(held)
	// The DAP dies without a word: its heartbeats stop, the RC drops it
	// after three intervals and requeues its portion.
	d.crash(held)
	d.waitAnnouncedDAPs("rc-1", 8)
	// A DAP for that shard comes back: the requeued portion goes to it.
	d.restartDAP(held)
	d.waitEntered(held)
	d.gates[held].release()

	st, tbl := depStatus(t, ans.wait(t, "dap1", 15*time.Second))
	if !st.IsOK() || !depTablesEqual(t, tbl, d.want(args)) {
		t.Fatalf("after the DAP was lost: %+v, %d rows", st, tbl.NumRows())
	}
	if n := promtest.Sum(t, d.proc("gw-1").reg, "sg_gw_redrives_total", nil); n != 0 {
		t.Errorf("GW re-drives %v: the RC alone should have recovered", n)
	}
	quiet(t, d, ans, "dap1")
}

// TestRestartGWPeerAdoptionEndsTheOldDrivesWait: gw-1 dies while its
// request's answer streams: the Agg sent the first frames of the drive to
// gw-1's subject and waits for a start signal that never comes, holding the
// drive's partials. gw-2 adopts the request and, once its adoption landed,
// cancels that drive at its RC: the RC answers it cancelled (to the gone
// GW's subject) and tells the Agg, well before the drive's deadline, at
// which the Agg's TIMEOUT frame would otherwise be the next message there.
// The caller gets the adopted drive's whole stream, once.
func TestRestartGWPeerAdoptionEndsTheOldDrivesWait(t *testing.T) {
	d := newDeployment(t)
	d.startAggWith("agg-1", func(c *agg.Config) { c.StreamWindow = 1024 })
	d.startRC("rc-1", rcOpts{durable: true})
	d.startFleet(func(string) (string, string) { return "rc-1", "" })
	d.waitFleet(9, "rc-1")
	ans := d.collect()
	g1 := d.startGW("gw-1", gwOpts{durable: true})
	depWaitGWRCs(t, g1, "rc-1")
	held := d.dapIDs("asia")[0]
	d.gates[held].hold()

	// What reaches gw-1's answer subject for the request, and the RC's
	// cancels to the Agg.
	old, err := d.nc.SubscribeSync(d.s.GWAnswer("gw-1", "*")) // the GW's own id of the request
	if err != nil {
		t.Fatal(err)
	}
	aggCancels, err := d.nc.SubscribeSync(d.s.AggCancel("agg-1"))
	if err != nil {
		t.Fatal(err)
	}
	if err := d.nc.Flush(); err != nil {
		t.Fatal(err)
	}

	args := messages.GetDataArgs{Table: demo.Trade, StartTS: deployEnd.Add(-48 * time.Hour), EndTS: deployEnd.Add(time.Hour)}
	req := d.newRequest("w1", args, messages.Scope{}, 30*time.Second)
	req.msg.Header.Set(messages.HdrAcceptStream, "1")
	d.send(req)
	d.waitEntered(held)
	g2 := d.startGW("gw-2", gwOpts{durable: true}) // after gw-1 took the request
	depWaitGWRCs(t, g2, "rc-1")

	// gw-1 dies; the drive completes and the Agg streams it to gw-1's
	// subject until it waits for the start signal.
	d.crash("gw-1")
	d.gates[held].release()
	var drive string
	for seq := range messages.StreamStartFrames {
		m, err := old.NextMsg(10 * time.Second)
		if err != nil {
			t.Fatalf("frame %d of the first drive: %v", seq, err)
		}
		drive = m.Header.Get(messages.HdrRequestID)
		if f, err := messages.ReadStreamFrame(m.Header); err != nil || f.Seq != seq || f.End {
			t.Fatalf("frame %+v (%v) of the first drive where %d was due: too short an answer to wait", f, err, seq)
		}
	}

	// gw-2 adopts (gw-1 silent for DeadAfter, 3 s): the first drive's wait
	// ends with the RC's cancel, long before its deadline (30 s).
	m, err := old.NextMsg(15 * time.Second)
	if err != nil {
		t.Fatalf("nothing more on gw-1's subject after the first drive's frames: %v", err)
	}
	if messages.IsStreamFrame(m.Header) {
		f, _ := messages.ReadStreamFrame(m.Header)
		st, _ := messages.ReadStatus(m.Header)
		t.Fatalf("the first drive's stream went on: frame %+v, status %+v; want the RC's cancel", f, st)
	}
	if st, err := messages.ReadStatus(m.Header); err != nil || st.IsOK() || !strings.Contains(st.AI, "cancelled") {
		t.Fatalf("the first drive answered %+v (%v) on gw-1's subject, want the RC's cancel", st, err)
	}
	for {
		c, err := aggCancels.NextMsg(5 * time.Second)
		if err != nil {
			t.Fatalf("the RC did not tell the Agg to drop the first drive: %v", err)
		}
		if c.Header.Get(messages.HdrRequestID) == drive {
			break
		}
	}

	// The caller gets the adopted drive's stream to its end.
	for i := 0; ; i++ {
		ms := ans.waitN(t, "w1", i+1, 15*time.Second)
		m := ms[i]
		f, err := messages.ReadStreamFrame(m.Header)
		if err != nil || f.Seq != i {
			t.Fatalf("answer message %d: frame %+v (%v)", i, f, err)
		}
		if st, err := messages.ReadStatus(m.Header); err == nil && !st.IsOK() {
			t.Fatalf("answer frame %d: %+v", i, st)
		}
		if f.End {
			break
		}
	}
	if n := promtest.Sum(t, d.proc("gw-2").reg, "sg_gw_requests_adopted_total", nil); n != 1 {
		t.Errorf("gw-2 adopted %v, want 1", n)
	}
}
