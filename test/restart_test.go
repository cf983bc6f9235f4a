package test

import (
	"testing"
	"time"

	"github.com/sg-project/sg/messages"
	"github.com/sg-project/sg/services/gw"
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
	if n := depCounter(t, d.proc("gw-1").reg, "sg_gw_redrives_total", map[string]string{"reason": "rc gone"}); n != 1 {
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
	if n := depCounter(t, d.proc("gw-1").reg, "sg_gw_requests_adopted_total", nil); n != 1 {
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
	if n := depCounter(t, d.proc("gw-2").reg, "sg_gw_requests_adopted_total", nil); n != 1 {
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
	if n := depCounter(t, d.proc("gw-1").reg, "sg_gw_redrives_total", nil); n != 0 {
		t.Errorf("GW re-drives %v: the RC alone should have recovered", n)
	}
	quiet(t, d, ans, "dap1")
}
