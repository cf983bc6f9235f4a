package dap

import (
	"context"
	"testing"

	"github.com/sg-project/sg/messages"
	"github.com/sg-project/sg/subjects"
	"github.com/vmihailenco/msgpack/v5"
)

// Apply swaps purview, version and source together and publishes one status event; a
// dispatch at the old version, or one whose range lies outside the new purview at a
// version that matches (an RC that learned the version before the purview), is answered
// RETRY with the DAP's purview in the completion; one inside runs on the new source.
func TestApplyAndPurviewChecks(t *testing.T) {
	nc := startNATS(t, 0)
	which := func(name string) Source {
		return funcSource(func(context.Context, string, messages.Args) ([]byte, error) { return msgpack.Marshal(name) })
	}
	cfg := testConfig(nc, which("old"))
	cfg.Purview = messages.TimeRange{Start: 100, End: messages.TSMax}
	d := started(t, cfg)
	status := subscribe(t, nc, subjects.Default().DAPStatus(d.ID()))
	completions := subscribe(t, nc, subjects.Default().RCCompletion("rc1"))
	partials := subscribe(t, nc, subjects.Default().AggPartial("agg1"))

	rng := messages.TimeRange{Start: 200, End: messages.TSMax}
	st := d.Apply(Change{Purview: &rng, BumpPurviewVersion: true, Source: which("new")})
	if st.PurviewVersion != 2 || st.Purview != rng {
		t.Fatalf("state %+v", st)
	}
	if u := nextAs[messages.DAPStatusUpdate](t, status); u.PurviewVersion != 2 || u.Purview != rng || !u.Available {
		t.Fatalf("status %+v", u)
	}

	old := dispatch(1, true)
	old.Range = messages.TimeRange{Start: 100, End: messages.TSMax}
	send(t, nc, d.ID(), old)
	if c := nextAs[messages.PortionCompletion](t, completions); c.Outcome != messages.OutcomeRetry || c.PurviewVersion != 2 || c.Purview == nil || *c.Purview != rng {
		t.Fatalf("old version: completion %+v", c)
	}
	stale := dispatch(2, true)
	stale.PurviewVersion, stale.Range = 2, messages.TimeRange{Start: 100, End: 200}
	send(t, nc, d.ID(), stale)
	if c := nextAs[messages.PortionCompletion](t, completions); c.Outcome != messages.OutcomeRetry {
		t.Fatalf("range outside the purview: completion %+v", c)
	}
	good := dispatch(3, true)
	good.PurviewVersion, good.Range = 2, messages.TimeRange{Start: 250, End: 300}
	send(t, nc, d.ID(), good)
	if c := nextAs[messages.PortionCompletion](t, completions); c.Outcome != messages.OutcomeOK {
		t.Fatalf("inside: completion %+v", c)
	}
	pr := nextAs[messages.PartialResult](t, partials)
	var got string
	if err := msgpack.Unmarshal(pr.Payload, &got); err != nil || got != "new" {
		t.Fatalf("ran on %q (%v), want the new source", got, err)
	}
}
