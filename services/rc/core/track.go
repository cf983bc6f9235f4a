package core

import (
	"cmp"
	"slices"
)

// Early expectations (issue 10): the Agg is told which portions to expect the
// moment they are dispatched, and which no longer count the moment they are
// superseded, so that it can answer on the last partial instead of waiting for
// the RC to see every DAP completion and send the sealed set (DAP -> RC -> Agg:
// two one-way hops on every request's critical path).
//
// AggTrack carries one step's changes for one request, placed in the step's
// commands before the first Dispatch it concerns, so that the Agg (on the RC's
// one connection) usually learns of a portion before its partial can come.
// Sealed says nothing of the request is queued: the Agg may answer once every
// expected partial is there. A retry, a requeue after a lost DAP or a throttle
// supersedes portions and, while anything is queued again, unseals; the
// supersede and its replacement travel in one message, so the Agg never sees a
// complete set with a hole in it.
//
// Why this keeps the invariants: a partial the Agg accepts was computed by a DAP
// at the portion's locked reference vintage (the DAP answers RETRY otherwise),
// vintage retries touch only queued entries (never a sealed request), a RETRY or
// error outcome never delivers an OK partial, and the Agg answers each request
// once (its finished set). The RC keeps tracking completions: the timeout
// statuses ("aggregating", "pending aggregation") stay what the RC saw, and
// AggExpect is still emitted when every label set completed, for a shell whose
// Agg was not told early (the RC shell skips it when the tracked set was sealed).

// AggTrack tells the request's Agg of portions dispatched (Expect) and
// superseded (Supersede) in one step, and whether the set is now sealed.
type AggTrack struct {
	Request   string
	Agg       string
	Expect    []PortionRef
	Supersede []PortionRef
	Sealed    bool
}

func (*AggTrack) isCommand() {}

// trackState is a request's early-expectation changes within one step, an
// entry of Core.tracked. flushed: flushTrack has filled its command already.
type trackState struct {
	r         *request
	slot      int // index of its AggTrack in Core.out; -1 when none this step
	expect    []PortionRef
	supersede []PortionRef
	flushed   bool
}

func (c *Core) trackOf(r *request) *trackState {
	if r.trackStep != c.step {
		// A new entry; an entry's buffers went out in an earlier step's
		// AggTrack, valid until this step: reused.
		i := len(c.tracked)
		if i < cap(c.tracked) {
			c.tracked = c.tracked[:i+1]
			t := &c.tracked[i]
			*t = trackState{r: r, slot: -1, expect: t.expect[:0], supersede: t.supersede[:0]}
		} else {
			c.tracked = append(c.tracked, trackState{r: r, slot: -1})
		}
		r.trackStep, r.trackIdx = c.step, i
	}
	return &c.tracked[r.trackIdx]
}

// trackDispatch notes a new portion; its AggTrack goes before the Dispatch
// about to be emitted.
func (c *Core) trackDispatch(r *request, ps *portionState) {
	t := c.trackOf(r)
	if t.slot < 0 {
		t.slot = len(c.out)
		c.emit(c.tracks.new()) // filled by flushTracks
	}
	t.expect = append(t.expect, ps.ref())
}

// trackSupersede notes a portion that no longer counts.
func (c *Core) trackSupersede(r *request, ps *portionState) {
	t := c.trackOf(r)
	t.supersede = append(t.supersede, ps.ref())
}

// flushTracks fills the step's AggTrack commands. A request answered or
// failing in this step tells its Agg nothing more (CancelAgg or AggFail does).
func (c *Core) flushTracks() {
	if len(c.tracked) == 0 {
		return
	}
	drop := false
	for i := range c.tracked {
		t := &c.tracked[i]
		r := t.r
		t.r = nil // (the entry keeps its buffers, not the request)
		if t.flushed {
			continue
		}
		// Supersedes come in the order of what caused them (a lost DAP's running
		// portions, several restarts): the commands list them by id.
		if len(t.supersede) > 1 {
			slices.SortFunc(t.supersede, func(a, b PortionRef) int { return cmp.Compare(a.PortionID, b.PortionID) })
		}
		live := r.live() && !r.errored && !r.timingOut && (len(t.expect) > 0 || len(t.supersede) > 0)
		cmd := AggTrack{Request: r.ID, Agg: r.Agg, Expect: t.expect, Supersede: t.supersede, Sealed: r.queued == 0}
		switch {
		case t.slot >= 0 && live:
			*c.out[t.slot].(*AggTrack) = cmd
		case t.slot >= 0:
			c.out[t.slot] = nil
			drop = true
		case live:
			x := c.tracks.new()
			*x = cmd
			c.emit(x)
		}
	}
	c.tracked = c.tracked[:0]
	if drop {
		out := c.out[:0]
		for _, cmd := range c.out {
			if cmd != nil {
				out = append(out, cmd)
			}
		}
		c.out = out
	}
}

// flushTrack fills one request's pending AggTrack now: before it changes Agg,
// its changes so far belong to the old one. Its later changes in the step
// take a new entry (new buffers: these go out in this step's command).
func (c *Core) flushTrack(r *request) {
	if r.trackStep != c.step {
		return
	}
	t := &c.tracked[r.trackIdx]
	t.flushed = true
	r.trackStep = 0
	if t.slot >= 0 {
		*c.out[t.slot].(*AggTrack) = AggTrack{Request: r.ID, Agg: r.Agg, Expect: t.expect, Supersede: t.supersede, Sealed: false}
	}
}
