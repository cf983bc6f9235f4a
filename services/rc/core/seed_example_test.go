package core

import (
	"strings"
	"testing"
	"time"
)

// The seed's worked example (Reference vintage change), dap-1-1 ... dap-4-1.
//
// The seed's numbers in its last paragraph are typos: dap-1-2 "is still at
// reference vintage 20" must read 10 (it was registered at 10), and
// dap-1-1's "(21)" must read 11 (it just moved to 11); the request's vintage
// for foo=bar1 is the 10 locked by dap-2-1. We keep the seed's rules: no
// retry while a DAP of the label set that covers the queued range is still
// at the lock, and no dispatch to a DAP whose vintage is not the lock.
func TestSeedVintageExample(t *testing.T) {
	h := newHarness(t, Config{})
	D := t0 // 2022.12.05D
	h.register("dap-1-1", lbl("foo", "bar1"), unavailable(), purview(MinTS, D), vintage(10))
	h.register("dap-1-2", lbl("foo", "bar1"), unavailable(), purview(MinTS, D), vintage(10))
	h.register("dap-2-1", lbl("foo", "bar1"), purview(D, MaxTS), vintage(10))
	h.register("dap-3-1", lbl("foo", "bar2"), purview(MinTS, D), vintage(20))
	h.register("dap-4-1", lbl("foo", "bar2"), unavailable(), purview(D, MaxTS), vintage(20))

	out := h.request("q1", "trade", Selector{"foo": {"bar1", "bar2"}}, MinTS, MaxTS, time.Minute)
	// "The RC sends portion foo=bar1 for [2022.12.05D;0Wp) to dap-2-1,
	// locking refVintage=10 for foo=bar1."
	d21 := dispatchedTo(t, out, "dap-2-1")
	if d21.Portion.Range.Start != D || d21.Portion.Range.End != MaxTS || d21.Portion.Vintage != 10 || d21.Portion.Labels["foo"] != "bar1" {
		t.Fatalf("dap-2-1 got %s", describe(out))
	}
	// "Likewise, the RC sends portion foo=bar2 for [-0Wp;2022.12.05D) to
	// dap-3-1, locking refVintage=20 for foo=bar2."
	d31 := dispatchedTo(t, out, "dap-3-1")
	if d31.Portion.Range.Start != MinTS || d31.Portion.Range.End != D || d31.Portion.Vintage != 20 {
		t.Fatalf("dap-3-1 got %s", describe(out))
	}
	if len(dispatches(out)) != 2 {
		t.Fatalf("want 2 dispatches, got %s", describe(out))
	}
	// "The remaining portions of the request are queued."
	if st, _ := h.c.Stats(); st.QueueLength != 2 {
		t.Fatalf("queue length %d, want 2", st.QueueLength)
	}

	// "dap-4-1 ... its reference vintage is now 21. The RC retries the
	// request for label foo=bar2, since it can no longer satisfy
	// [2022.12.05D;0Wp) at reference vintage 20."
	h.advance(time.Second)
	out = h.vintageTo("dap-4-1", 21)
	rn := only[RetryNoted](t, out)
	if rn.Labels["foo"] != "bar2" || rn.Whole || rn.Attempt != 1 {
		t.Fatalf("retry %+v", rn)
	}
	// dap-3-1 still runs attempt 0, dap-4-1 is unavailable: nothing to send.
	none[*Dispatch](t, out)

	// "dap-1-1 ... its reference vintage is now 11. The RC does nothing
	// since dap-1-2 is still at reference vintage 10."
	h.advance(time.Second)
	out = h.vintageTo("dap-1-1", 11)
	none[RetryNoted](t, out)
	none[*Dispatch](t, out)
	// "the RC will not send this request to dap-1-1, since its reference
	// vintage (11) no longer matches the request's reference vintage for
	// this label (10)": even once it is available.
	h.advance(time.Second)
	out = h.status(dapInfo("dap-1-1", lbl("foo", "bar1"), purview(MinTS, D), vintage(11)))
	none[*Dispatch](t, out)
	// dap-1-2, at the locked 10, gets the queued foo=bar1 portion.
	out = h.status(dapInfo("dap-1-2", lbl("foo", "bar1"), purview(MinTS, D), vintage(10)))
	d12 := dispatchedTo(t, out, "dap-1-2")
	if d12.Portion.Vintage != 10 || d12.Portion.Range.Start != MinTS || d12.Portion.Range.End != D {
		t.Fatalf("dap-1-2 got %s", describe(out))
	}

	// At the deadline, the message tells the story of foo=bar2: dap-3-1 is
	// busy with attempt 0 and also behind the label set's newest vintage
	// (reasons comma-joined), dap-4-1 is unavailable.
	h.now = t0 + int64(time.Minute)
	rep := only[Reply](t, h.tick())
	if rep.Kind != ReplyTimeout {
		t.Fatalf("reply %+v", rep)
	}
	for _, want := range []string{
		`Request timed out, [rc=rc-1;status="allocating";queue="`,
		`[labels={foo:bar2};startTS=-inf;endTS=+inf;reason=\"Busy executing a previous version of this request (auto-retry), DAP reference vintage 20 does not match global reference vintage 21\";dap=[dap-3-1:5080]]`,
		`[labels={foo:bar2};startTS=-inf;endTS=+inf;reason=\"Unavailable for unspecified reasons\";dap=[dap-4-1:5080]]`,
	} {
		if !strings.Contains(rep.Text, want) {
			t.Errorf("timeout text lacks %s\n got: %s", want, rep.Text)
		}
	}
}
