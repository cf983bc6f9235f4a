package core

import (
	"fmt"
	"math"
	"strings"
	"testing"
	"time"
)

// lose steps a DAPLost for the DAP now.
func (h *harness) lose(id string) []Command {
	h.t.Helper()
	return h.step(DAPLost{At: h.now, DAP: id})
}

// expectedLabels are the label sets of the portions an AggExpect names, in
// the order of dispatches seen.
func expectedLabels(t *testing.T, x AggExpect, seen map[PortionID]Dispatch) []string {
	t.Helper()
	var out []string
	for _, ref := range x.Portions {
		d, ok := seen[ref.PortionID]
		if !ok {
			t.Fatalf("AggExpect names portion %d, never dispatched", ref.PortionID)
		}
		out = append(out, d.Portion.Labels.String())
	}
	return out
}

// A region's only DAP is lost (silence, a restart): a request over every
// region is planned over it too. Its portion waits while the other region's
// runs, goes to the DAP when it registers again, and the Agg is told to
// expect both: one answer with both regions, never one without us.
func TestLostLabelSetWaitsForItsDAP(t *testing.T) {
	for _, table := range []string{"trade", "ref"} {
		t.Run(table, func(t *testing.T) {
			h := newHarness(t, Config{})
			h.register("eu-1", lbl("region", "eu"))
			h.register("us-1", lbl("region", "us"))
			h.advance(time.Second)
			h.lose("us-1")

			h.advance(time.Second)
			out := h.request("q1", table, nil, t0, t0+hour, time.Minute)
			none[Reply](t, out)
			eu := dispatchedTo(t, out, "eu-1")
			if n := len(dispatches(out)); n != 1 {
				t.Fatalf("want eu dispatched alone, got %s", describe(out))
			}
			if st, _ := h.c.Stats(); st.QueueLength != 1 {
				t.Fatalf("want us queued, queue length %d", st.QueueLength)
			}
			h.advance(time.Second)
			none[AggExpect](t, h.complete(eu, OutcomeOK))

			// The DAP is back (its restart done): the waiting portion goes to it.
			h.advance(time.Second)
			out = h.register("us-1", lbl("region", "us"))
			us := dispatchedTo(t, out, "us-1")
			if us.Portion.Labels.String() != "{region:us}" || us.Portion.Request != "q1" {
				t.Fatalf("got %s", describe(out))
			}
			h.advance(time.Second)
			out = h.complete(us, OutcomeOK)
			x := only[AggExpect](t, out)
			none[Reply](t, out)
			got := expectedLabels(t, x, map[PortionID]Dispatch{eu.Portion.ID: eu, us.Portion.ID: us})
			if strings.Join(got, " ") != "{region:eu} {region:us}" {
				t.Fatalf("the Agg expects %v, want both regions", got)
			}
			none[Reply](t, h.step(AggDone{At: h.now, Request: "q1"}))
			if st, _ := h.c.Stats(); st.QueueLength != 0 || len(h.c.requests) != 0 {
				t.Fatalf("core holds %d requests, %d queued", len(h.c.requests), st.QueueLength)
			}
		})
	}
}

// The lost label set was the only one, or the table is unsharded: the
// request waits instead of NO_RESOURCES ("No DAP has label set", "No DAP
// serves table").
func TestLostOnlyLabelSetWaits(t *testing.T) {
	for _, table := range []string{"trade", "ref", "cfg"} {
		t.Run(table, func(t *testing.T) {
			h := newHarness(t, Config{})
			h.register("us-1", lbl("region", "us"))
			h.lose("us-1")
			h.advance(time.Second)
			sel := Selector{"region": {"us"}}
			if table == "cfg" {
				sel = nil
			}
			out := h.request("q1", table, sel, t0, t0+hour, time.Minute)
			none[Reply](t, out)
			none[*Dispatch](t, out)
			h.advance(time.Second)
			d := dispatchedTo(t, h.register("us-2", lbl("region", "us")), "us-2")
			only[AggExpect](t, h.complete(d, OutcomeOK))
		})
	}
}

// The lost label set never comes back: the request times out at its
// deadline with the seed's reason and an empty dap list for it, not an OK
// answer without it.
func TestLostLabelSetTimesOut(t *testing.T) {
	h := newHarness(t, Config{})
	h.register("eu-1", lbl("region", "eu"))
	h.register("us-1", lbl("region", "us"))
	h.lose("us-1")
	h.advance(time.Second)
	out := h.request("q1", "trade", nil, t0, t0+hour, time.Minute)
	eu := dispatchedTo(t, out, "eu-1")
	h.advance(time.Second)
	none[AggExpect](t, h.complete(eu, OutcomeOK))
	wantText(t, h.timeoutText(), `Request timed out, [rc=rc-1;status="allocating";queue="[labels={region:us};`+rangeHour+`;reason=\"No DAP covers labels/time range\";dap=[]]"]`)

	// Unsharded and sharded tables: their blocks without a time range.
	h.advance(time.Second)
	h.lose("eu-1")
	h.request("q2", "cfg", nil, t0, t0+hour, time.Minute)
	wantText(t, h.timeoutText(), `Request timed out, [rc=rc-1;status="allocating";queue="[reason=\"No DAP covers labels/time range\";dap=[]]"]`)
	h.request("q3", "ref", Selector{"region": {"us"}}, t0, t0+hour, time.Minute)
	wantText(t, h.timeoutText(), `Request timed out, [rc=rc-1;status="allocating";queue="[labels={region:us};reason=\"No DAP covers labels/time range\";dap=[]]"]`)
}

// A label set is remembered for Config.LabelSetRetention after its last DAP
// left, and then no longer planned: a decommissioned region stops holding
// requests to their deadline.
func TestLostLabelSetForgottenAfterRetention(t *testing.T) {
	h := newHarness(t, Config{LabelSetRetention: time.Minute})
	h.register("eu-1", lbl("region", "eu"))
	h.register("us-1", lbl("region", "us"))
	h.register("us-2", lbl("region", "us"), tier(TierHDB))
	h.lose("us-1")
	h.advance(10 * time.Second)
	h.lose("us-2") // the retention counts from the last DAP's leaving

	h.advance(time.Minute - time.Nanosecond)
	out := h.request("q1", "trade", nil, t0, t0+hour, time.Minute)
	dispatchedTo(t, out, "eu-1")
	// {region:us} of each table the us DAPs served.
	if st, _ := h.c.Stats(); st.QueueLength != 1 || st.RememberedLabelSets != len(h.c.fleet.past) || st.RememberedLabelSets == 0 {
		t.Fatalf("us within its retention: want it queued and remembered, queue length %d, remembered %d", st.QueueLength, st.RememberedLabelSets)
	}

	h.advance(time.Nanosecond)
	h.tick()
	if st, _ := h.c.Stats(); h.c.fleet.pastN != 0 || len(h.c.fleet.past) != 0 || st.RememberedLabelSets != 0 {
		t.Fatalf("past its retention: %d label sets remembered (Stats: %d)", h.c.fleet.pastN, st.RememberedLabelSets)
	}
	// q1 was planned with us and keeps waiting for it; a new request is
	// planned over eu alone, and one that names us is refused at once.
	out = h.step(RequestArrived{At: h.now, Request: Request{ID: "q2", Table: "trade", Range: TimeRange{Start: t0, End: t0 + hour}, Deadline: h.now + int64(time.Minute), Agg: "agg-1"}})
	none[*Dispatch](t, out) // eu-1 is busy with q1
	if r := h.c.requests["q2"]; r == nil || len(r.sets) != 1 || r.sets[0].labels.String() != "{region:eu}" {
		t.Fatalf("q2 planned over %v, want eu alone", h.c.requests["q2"])
	}
	rep := only[Reply](t, h.request("q3", "trade", Selector{"region": {"us"}}, t0, t0+hour, time.Minute))
	if rep.Kind != ReplyNoResources || rep.Text != `No DAP has label set {region:us} for table "trade"` {
		t.Fatalf("reply %+v", rep)
	}
	// A table no DAP has served within the retention is unknown again.
	h.lose("eu-1")
	h.advance(time.Minute)
	h.tick() // (q1 and q2 time out)
	rep = only[Reply](t, h.request("q4", "trade", nil, t0, t0+hour, time.Minute))
	if rep.Kind != ReplyNoResources || rep.Text != `No DAP serves table "trade"` {
		t.Fatalf("reply %+v", rep)
	}
}

// A negative retention remembers nothing: a request is planned over the
// label sets of the DAPs registered now.
func TestLabelSetRetentionOff(t *testing.T) {
	h := newHarness(t, Config{LabelSetRetention: -1})
	h.register("eu-1", lbl("region", "eu"))
	h.register("us-1", lbl("region", "us"))
	h.lose("us-1")
	out := h.request("q1", "trade", nil, t0, t0+hour, time.Minute)
	dispatchedTo(t, out, "eu-1")
	if st, _ := h.c.Stats(); st.QueueLength != 0 || h.c.fleet.pastN != 0 {
		t.Fatalf("queue length %d, %d label sets remembered", st.QueueLength, h.c.fleet.pastN)
	}
}

// A scoped request remembers per scope: the label set's hdb DAP is lost and
// its rdb DAP lives; a request scoped to the hdb tier waits for an hdb DAP.
// One of that scope registering takes the entry back.
func TestLostScopeOfLiveLabelSetWaits(t *testing.T) {
	h := newHarness(t, Config{})
	h.register("us-rdb", lbl("region", "us"), tier(TierRDB))
	h.register("us-hdb", lbl("region", "us"), tier(TierHDB))
	h.lose("us-hdb")
	out := h.step(RequestArrived{At: h.now, Request: Request{ID: "q1", Table: "trade", Tier: TierHDB,
		Range: TimeRange{Start: t0, End: t0 + hour}, Deadline: h.now + int64(time.Minute), Agg: "agg-1"}})
	none[Reply](t, out)
	none[*Dispatch](t, out)
	h.advance(time.Second)
	d := dispatchedTo(t, h.register("us-hdb-2", lbl("region", "us"), tier(TierHDB)), "us-hdb-2")
	if d.Portion.Request != "q1" {
		t.Fatalf("got %+v", d)
	}
	if h.c.fleet.pastN != 0 {
		t.Fatalf("a DAP of the lost scope is back: %d label sets still remembered", h.c.fleet.pastN)
	}
	// A scope no DAP of the label set ever had is still refused.
	rep := only[Reply](t, h.step(RequestArrived{At: h.now, Request: Request{ID: "q2", Table: "trade", Tier: TierIDB,
		Range: TimeRange{Start: t0, End: t0 + hour}, Deadline: h.now + int64(time.Minute), Agg: "agg-1"}}))
	if rep.Kind != ReplyNoResources {
		t.Fatalf("reply %+v", rep)
	}
}

// An RC restart: the shell replays the DAP state stream, a DAP's
// registration and then its loss at the times they were stored. A loss
// within the retention is remembered from its own time; an older one is
// forgotten at once.
func TestReplayedLossRemembersFromItsTime(t *testing.T) {
	h := newHarness(t, Config{LabelSetRetention: 10 * time.Minute})
	stored := h.now
	h.step(DAPRegistered{At: stored, DAP: dapInfo("eu-1", lbl("region", "eu"))})
	h.step(DAPRegistered{At: stored, DAP: dapInfo("us-1", lbl("region", "us"))})
	h.step(DAPRegistered{At: stored, DAP: dapInfo("asia-1", lbl("region", "asia"))})
	h.step(DAPLost{At: stored + int64(time.Minute), DAP: "asia-1"})
	h.step(DAPLost{At: stored + int64(8*time.Minute), DAP: "us-1"})
	h.now = stored + int64(12*time.Minute) // the restarted RC's first request
	h.request("q1", "trade", nil, t0, t0+hour, time.Minute)
	var got []string
	for _, ls := range h.c.requests["q1"].sets {
		got = append(got, ls.labels.String())
	}
	if strings.Join(got, " ") != "{region:eu} {region:us}" {
		t.Fatalf("planned over %v, want eu (registered) and us (lost 4 min ago), not asia (11 min ago)", got)
	}
}

// DAPs that come and go under ever new label sets are remembered up to a
// bound, the oldest forgotten first.
func TestPastLabelSetsBounded(t *testing.T) {
	h := newHarness(t, Config{})
	for i := range maxPastSets + 5 {
		id := fmt.Sprintf("d%d", i)
		h.step(DAPRegistered{At: h.now, DAP: dapInfo(id, lbl("region", id), tables(map[string]TableKind{"trade": TimePartitioned}))})
		h.lose(id)
		h.advance(time.Millisecond)
	}
	if h.c.fleet.pastN != maxPastSets {
		t.Fatalf("%d label sets remembered, want the bound %d", h.c.fleet.pastN, maxPastSets)
	}
	pt := h.c.fleet.past["trade"]
	if _, ok := pt.find(keyOf(lbl("region", "d4"))); ok {
		t.Fatal("d4's label set, among the oldest, is still remembered")
	}
	if _, ok := pt.find(keyOf(lbl("region", "d5"))); !ok {
		t.Fatal("d5's label set is forgotten, the oldest kept")
	}
}

// A retention of centuries (the longest Go duration) does not wrap around
// into "already due".
func TestLabelSetRetentionLongest(t *testing.T) {
	h := newHarness(t, Config{LabelSetRetention: time.Duration(math.MaxInt64)})
	h.register("us-1", lbl("region", "us"))
	h.lose("us-1")
	h.advance(24 * time.Hour)
	out := h.request("q1", "trade", nil, t0, t0+hour, time.Minute)
	none[Reply](t, out)
	if st, _ := h.c.Stats(); st.QueueLength != 1 || h.c.fleet.pastN != 3 { // (trade, ref, cfg)
		t.Fatalf("queue length %d, %d label sets remembered", st.QueueLength, h.c.fleet.pastN)
	}
}

// The label keys a SQL statement is planned with include those of label sets
// whose DAPs all left: a condition on region stays a label selector.
func TestLabelKeysIncludeRememberedLabelSets(t *testing.T) {
	h := newHarness(t, Config{})
	h.register("eu-1", lbl("venue", "x"))
	h.register("us-1", lbl("region", "us"))
	h.lose("us-1")
	if keys := h.c.LabelKeys(); !keys["region"] || !keys["venue"] || len(keys) != 2 {
		t.Fatalf("label keys %v, want region (remembered) and venue (live)", keys)
	}
	h = newHarness(t, Config{LabelSetRetention: -1})
	h.register("us-1", lbl("region", "us"))
	h.lose("us-1")
	if keys := h.c.LabelKeys(); len(keys) != 0 {
		t.Fatalf("label keys %v with no retention, want none", keys)
	}
}
