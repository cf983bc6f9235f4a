package core

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// harness drives a core as a story: each call is one event at the current
// test time; commands are kept for assertions.
type harness struct {
	t   *testing.T
	c   *Core
	now int64
}

var t0 = time.Date(2022, 12, 5, 0, 0, 0, 0, time.UTC).UnixNano()

func newHarness(t *testing.T, cfg Config) *harness {
	t.Helper()
	if cfg.Self == "" {
		cfg.Self = "rc-1"
	}
	return &harness{t: t, c: New(cfg), now: t0}
}

func (h *harness) advance(d time.Duration) { h.now += int64(d) }

func (h *harness) step(ev Event) []Command {
	h.t.Helper()
	return detach(h.c.Step(ev))
}

// detach copies a step's commands, with the ones the core reuses (*Dispatch,
// *AggTrack, see Command), so that a story can keep them past the next step.
func detach(out []Command) []Command {
	cp := make([]Command, len(out))
	for i, cmd := range out {
		switch x := cmd.(type) {
		case *Dispatch:
			d := *x
			cmd = &d
		case *AggTrack:
			t := *x
			t.Expect = append([]PortionRef(nil), x.Expect...)
			t.Supersede = append([]PortionRef(nil), x.Supersede...)
			cmd = &t
		}
		cp[i] = cmd
	}
	return cp
}

type dapOpt func(*DAPInfo)

func vintage(v uint64) dapOpt               { return func(d *DAPInfo) { d.Vintage = v } }
func unavailable() dapOpt                   { return func(d *DAPInfo) { d.Available = false } }
func purview(s, e int64) dapOpt             { return func(d *DAPInfo) { d.Purview = TimeRange{Start: s, End: e} } }
func concurrency(n int) dapOpt              { return func(d *DAPInfo) { d.Concurrency = n } }
func ownedBy(rc string) dapOpt              { return func(d *DAPInfo) { d.RC = rc } }
func tier(t Tier) dapOpt                    { return func(d *DAPInfo) { d.Tier = t } }
func tables(ts map[string]TableKind) dapOpt { return func(d *DAPInfo) { d.Tables = ts } }

func dapInfo(id string, labels Labels, opts ...dapOpt) DAPInfo {
	d := DAPInfo{
		ID: id, Addr: id + ":5080", Labels: labels, Tier: TierRDB,
		Purview: TimeRange{Start: MinTS, End: MaxTS}, Available: true, Concurrency: 1,
		Tables: map[string]TableKind{"trade": TimePartitioned, "ref": Sharded, "cfg": Unsharded},
	}
	for _, o := range opts {
		o(&d)
	}
	return d
}

func (h *harness) register(id string, labels Labels, opts ...dapOpt) []Command {
	h.t.Helper()
	return h.step(DAPRegistered{At: h.now, DAP: dapInfo(id, labels, opts...)})
}

func (h *harness) status(info DAPInfo) []Command {
	h.t.Helper()
	return h.step(DAPStatusChanged{At: h.now, DAP: info})
}

func (h *harness) vintageTo(id string, v uint64) []Command {
	h.t.Helper()
	return h.step(DAPVintageChanged{At: h.now, DAP: id, Vintage: v})
}

func (h *harness) request(id, table string, sel Selector, s, e int64, timeout time.Duration) []Command {
	h.t.Helper()
	return h.step(RequestArrived{At: h.now, Request: Request{
		ID: id, API: "getData", Table: table, Labels: sel, Range: TimeRange{Start: s, End: e},
		Deadline: h.now + int64(timeout), Agg: "agg-1",
	}})
}

func (h *harness) complete(d Dispatch, o Outcome) []Command {
	h.t.Helper()
	return h.step(PortionCompleted{At: h.now, Request: d.Portion.Request, Portion: d.Portion.ID, DAP: d.DAP, Outcome: o, Message: "mismatch"})
}

func (h *harness) tick() []Command {
	h.t.Helper()
	return h.step(Tick{At: h.now})
}

func dispatches(cmds []Command) []Dispatch {
	var out []Dispatch
	for _, c := range cmds {
		if d, ok := c.(*Dispatch); ok {
			out = append(out, *d)
		}
	}
	return out
}

func only[T Command](t *testing.T, cmds []Command) T {
	t.Helper()
	var found []T
	for _, c := range cmds {
		if x, ok := c.(T); ok {
			found = append(found, x)
		}
	}
	if len(found) != 1 {
		var zero T
		t.Fatalf("want exactly one %T in %s, got %d", zero, describe(cmds), len(found))
	}
	return found[0]
}

func none[T Command](t *testing.T, cmds []Command) {
	t.Helper()
	for _, c := range cmds {
		if _, ok := c.(T); ok {
			t.Fatalf("want no %T, got %s", c, describe(cmds))
		}
	}
}

func describe(cmds []Command) string {
	var parts []string
	for _, c := range cmds {
		switch x := c.(type) {
		case *Dispatch:
			parts = append(parts, fmt.Sprintf("Dispatch(%s %s [%s,%s) a%d v%d via=%q)", x.DAP, x.Portion.Labels, formatTS(x.Portion.Range.Start), formatTS(x.Portion.Range.End), x.Portion.Attempt, x.Portion.Vintage, x.ViaRC))
		default:
			parts = append(parts, fmt.Sprintf("%T%+v", c, c))
		}
	}
	return "[" + strings.Join(parts, " ") + "]"
}

// dispatchedTo returns the single dispatch to the DAP, failing otherwise.
func dispatchedTo(t *testing.T, cmds []Command, dapID string) Dispatch {
	t.Helper()
	var found []Dispatch
	for _, d := range dispatches(cmds) {
		if d.DAP == dapID {
			found = append(found, d)
		}
	}
	if len(found) != 1 {
		t.Fatalf("want one dispatch to %s, got %s", dapID, describe(cmds))
	}
	return found[0]
}

func lbl(kv ...string) Labels {
	l := Labels{}
	for i := 0; i+1 < len(kv); i += 2 {
		l[kv[i]] = kv[i+1]
	}
	return l
}
