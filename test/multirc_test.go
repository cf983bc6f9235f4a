package test

import (
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sg-project/sg/messages"
	"github.com/sg-project/sg/services/gw"
	"github.com/sg-project/sg/test/promtest"
)

// twoRCs: rc-1 is global and owns the eu DAPs (no assembly) and the asia
// DAPs (assembly a3, which has no RC of its own); rc-2 is the RC of
// assembly a2 and owns the us DAPs. Both see every DAP's events.
func twoRCs(t *testing.T) *deployment {
	d := newDeployment(t)
	d.startAgg("agg-1")
	d.startRC("rc-1", rcOpts{durable: true})
	d.startRC("rc-2", rcOpts{assembly: "a2", durable: true})
	d.startFleet(func(region string) (string, string) {
		switch region {
		case "us":
			return "rc-2", "a2"
		case "asia":
			return "rc-1", "a3"
		}
		return "rc-1", ""
	})
	d.waitFleet(9, "rc-1", "rc-2")
	return d
}

func TestMultiRCScopeAndAffinity(t *testing.T) {
	d := twoRCs(t)
	ans := d.collect()
	args := tradeArgs()

	hard := d.startGW("gw-hard", gwOpts{durable: true})
	depWaitGWRCs(t, hard, "rc-1", "rc-2")

	// Hard affinity: no RC of assembly a3 -> "No resources connected".
	d.send(d.newRequest("hard-a3", args, messages.Scope{Assembly: "a3"}, 5*time.Second))
	st, _ := depStatus(t, ans.wait(t, "hard-a3", 10*time.Second))
	if st.RC != messages.CodeNoResources || st.AI != gw.TextNoResources {
		t.Fatalf("hard affinity, assembly without RC: %+v", st)
	}
	// The assembly's own RC serves it, with its assembly's DAPs only.
	d.send(d.newRequest("hard-a2", args, messages.Scope{Assembly: "a2"}, 5*time.Second))
	st, tbl := depStatus(t, ans.wait(t, "hard-a2", 10*time.Second))
	if !st.IsOK() || !depTablesEqual(t, tbl, d.want(args, "us")) {
		t.Fatalf("assembly a2: %+v, %d rows", st, tbl.NumRows())
	}
	if n := promtest.Sum(t, d.proc("gw-hard").reg, "sg_gw_submissions_total", map[string]string{"rc": "rc-2"}); n != 1 {
		t.Fatalf("submissions to rc-2: %v, want 1", n)
	}
	// scope.tier without scope.assembly names nothing.
	d.send(d.newRequest("tier-alone", args, messages.Scope{Tier: "rdb"}, 5*time.Second))
	st, _ = depStatus(t, ans.wait(t, "tier-alone", 10*time.Second))
	if st.RC != messages.CodeBadRequest || !strings.Contains(st.AI, "scope.tier") {
		t.Fatalf("tier alone: %+v", st)
	}
	// scope.tier with the assembly: only that tier's DAPs.
	tierArgs := args
	tierArgs.StartTS = deployEnd.Add(-30 * time.Minute)
	d.send(d.newRequest("a2-rdb", tierArgs, messages.Scope{Assembly: "a2", Tier: "rdb"}, 5*time.Second))
	st, tbl = depStatus(t, ans.wait(t, "a2-rdb", 10*time.Second))
	if !st.IsOK() || !depTablesEqual(t, tbl, d.want(tierArgs, "us")) {
		t.Fatalf("assembly a2, tier rdb: %+v", st)
	}
	d.stop("gw-hard")

	// Soft affinity: a global RC takes it and routes to the assembly's DAPs.
	soft := d.startGW("gw-soft", gwOpts{affinity: gw.AffinitySoft, durable: true})
	depWaitGWRCs(t, soft, "rc-1", "rc-2")
	d.send(d.newRequest("soft-a3", args, messages.Scope{Assembly: "a3"}, 5*time.Second))
	st, tbl = depStatus(t, ans.wait(t, "soft-a3", 10*time.Second))
	if !st.IsOK() || !depTablesEqual(t, tbl, d.want(args, "asia")) {
		t.Fatalf("soft affinity, assembly a3: %+v, %d rows", st, tbl.NumRows())
	}
	if n := promtest.Sum(t, d.proc("gw-soft").reg, "sg_gw_submissions_total", map[string]string{"rc": "rc-1"}); n != 1 {
		t.Fatalf("submissions to the global rc-1: %v, want 1", n)
	}
	for _, id := range []string{"hard-a3", "hard-a2", "tier-alone", "a2-rdb", "soft-a3"} {
		if n := ans.count(id); n != 1 {
			t.Errorf("%s: %d answers", id, n)
		}
	}
}

func TestMultiRCRequestSpansPrimaryAndSecondary(t *testing.T) {
	d := twoRCs(t)
	ans := d.collect()
	g := d.startGW("gw-1", gwOpts{durable: true})
	depWaitGWRCs(t, g, "rc-1", "rc-2")

	// No scope: the global rc-1 is primary; the us DAPs are rc-2's, so rc-2
	// relays their portions as secondary and forwards their completions.
	args := tradeArgs()
	// rc-2 forwards its DAPs' completions after the answer may have gone (a
	// completion only frees the slot): the test waits for them on the bus,
	// where rc-1 gets them, before it reads rc-2's counter.
	usDAPs := map[string]bool{}
	for _, id := range d.dapIDs("us") {
		usDAPs[id] = true
	}
	forwarded, err := d.nc.SubscribeSync(d.s.RCCompletion("rc-1"))
	if err != nil {
		t.Fatal(err)
	}
	defer forwarded.Unsubscribe()
	if err := d.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	d.send(d.newRequest("span", args, messages.Scope{}, 10*time.Second))
	st, tbl := depStatus(t, ans.wait(t, "span", 15*time.Second))
	if !st.IsOK() {
		t.Fatalf("status %+v", st)
	}
	if !depTablesEqual(t, tbl, d.want(args)) {
		t.Fatalf("answer differs from the data: %d rows", tbl.NumRows())
	}
	rc1, rc2 := d.proc("rc-1").reg, d.proc("rc-2").reg
	us := float64(len(d.dapIDs("us")))
	seen, until := 0, time.Now().Add(10*time.Second)
	for seen < len(usDAPs) {
		m, err := forwarded.NextMsg(time.Until(until))
		if err != nil {
			t.Fatalf("rc-1 got %d of its secondary's %d completions within 10s: %v", seen, len(usDAPs), err)
		}
		var c messages.PortionCompletion
		if err := messages.Decode(m.Data, &c); err == nil && c.RequestID != "" && usDAPs[c.DAPID] {
			seen++
		}
	}
	if n := promtest.Sum(t, rc1, "sg_rc_peer_messages_total", map[string]string{"kind": "portion_sent"}); n != us {
		t.Errorf("rc-1 sent %v portions to its secondary, want %v", n, us)
	}
	if n := promtest.Sum(t, rc2, "sg_rc_peer_messages_total", map[string]string{"kind": "portion_relayed"}); n != us {
		t.Errorf("rc-2 relayed %v portions, want %v", n, us)
	}
	if n := promtest.Sum(t, rc2, "sg_rc_peer_messages_total", map[string]string{"kind": "completion_forwarded"}); n != us {
		t.Errorf("rc-2 forwarded %v completions, want %v", n, us)
	}
	if n := promtest.Sum(t, rc2, "sg_rc_dispatches_total", nil); n != us {
		t.Errorf("rc-2 dispatched %v portions to its DAPs, want %v", n, us)
	}
	if n := ans.count("span"); n != 1 {
		t.Errorf("%d answers", n)
	}
}

func TestMultiRCTimeoutListsEveryRC(t *testing.T) {
	d := twoRCs(t)
	ans := d.collect()
	g := d.startGW("gw-1", gwOpts{durable: true, margin: 2 * time.Second})
	depWaitGWRCs(t, g, "rc-1", "rc-2")
	us := d.dapIDs("us")
	sort.Strings(us)
	// Stuck past the deadline: the secondary's DAPs are still executing
	// when the primary asks.
	for _, id := range us {
		d.gates[id].holdStuck()
	}
	defer func() {
		for _, id := range us {
			d.gates[id].release()
		}
	}()
	d.send(d.newRequest("late", tradeArgs(), messages.Scope{}, time.Second))
	st, _ := depStatus(t, ans.wait(t, "late", 10*time.Second))
	want := fmt.Sprintf(`Request timed out, [rc=rc-1;status="pending aggregation";agg=agg-1] [rc=rc-2;status="executing";dap=[%s]]`, strings.Join(us, ","))
	if st.RC != messages.CodeTimeout || st.AC != messages.CodeErr || st.AI != want {
		t.Fatalf("timeout:\n got %s %s %q\nwant TIMEOUT ERR %q", st.RC, st.AC, st.AI, want)
	}
}

func TestMultiRCSilentSecondaryIsUnknown(t *testing.T) {
	d := newDeployment(t)
	d.startAgg("agg-1")
	d.startRC("rc-1", rcOpts{durable: true})
	// The us DAPs belong to rc-9, which takes the primary's portions and
	// never answers anything.
	silent, err := d.nc.Subscribe(d.s.RCInbox("rc-9"), func(*nats.Msg) {})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = silent.Unsubscribe() }()
	d.startFleet(func(region string) (string, string) {
		if region == "us" {
			return "rc-9", ""
		}
		return "rc-1", ""
	})
	d.waitFleet(9, "rc-1")
	ans := d.collect()
	g := d.startGW("gw-1", gwOpts{durable: true, margin: 2 * time.Second})
	depWaitGWRCs(t, g, "rc-1")
	d.send(d.newRequest("silent", tradeArgs(), messages.Scope{}, time.Second))
	st, _ := depStatus(t, ans.wait(t, "silent", 10*time.Second))
	want := `Request timed out, [rc=rc-1;status="pending aggregation";agg=agg-1] [rc=rc-9;status="unknown"]`
	if st.RC != messages.CodeTimeout || st.AI != want {
		t.Fatalf("timeout:\n got %s %q\nwant TIMEOUT %q", st.RC, st.AI, want)
	}
}

func TestMultiRCSecondaryRestartRetriesItsPortions(t *testing.T) {
	d := twoRCs(t)
	ans := d.collect()
	g := d.startGW("gw-1", gwOpts{durable: true})
	depWaitGWRCs(t, g, "rc-1", "rc-2")
	held := d.dapIDs("us")[0]
	d.gates[held].hold()

	args := tradeArgs()
	d.send(d.newRequest("sec", args, messages.Scope{}, 20*time.Second))
	d.waitEntered(held)
	// The secondary dies with its DAP's portion in flight and comes back:
	// the primary hears the new incarnation, completes the lost portions as
	// RETRY and places them again, through the new secondary.
	d.crash("rc-2")
	d.startRC("rc-2", rcOpts{assembly: "a2", durable: true})
	d.waitEntered(held)
	d.gates[held].release()

	st, tbl := depStatus(t, ans.wait(t, "sec", 15*time.Second))
	if !st.IsOK() || !depTablesEqual(t, tbl, d.want(args)) {
		t.Fatalf("after the secondary restarted: %+v, %d rows", st, tbl.NumRows())
	}
	if n := promtest.Sum(t, d.proc("rc-1").reg, "sg_rc_retries_total", nil); n < 1 {
		t.Errorf("primary retries %v, want at least 1", n)
	}
	if n := promtest.Sum(t, d.proc("gw-1").reg, "sg_gw_redrives_total", nil); n != 0 {
		t.Errorf("the GW re-drove %v times; the primary was alive and should have recovered alone", n)
	}
	quiet(t, d, ans, "sec")
}
