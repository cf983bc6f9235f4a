package core

import (
	"slices"

	"github.com/sg-project/sg/messages"
)

// Status of a request at this RC, as the seed's timeout message names it:
// messages.RequestStatus, its one home.
type Status = messages.RequestStatus

// The statuses of a request this RC coordinates as primary (Stats, Position).
const (
	// StatusAllocating: one or more portions are queued.
	StatusAllocating = messages.StatusAllocating
	// StatusExecuting: fully allocated, DAPs of this RC still running.
	StatusExecuting = messages.StatusExecuting
	// StatusPendingAggregation: this RC's DAPs are done, a secondary's are not.
	StatusPendingAggregation = messages.StatusPendingAggregation
	// StatusAggregating: every portion completed; the Agg was told to merge.
	StatusAggregating = messages.StatusAggregating
	// StatusInactive: a DAP failed; the Agg answers with its error.
	StatusInactive = messages.StatusInactive
	// StatusTimingOut: the deadline passed; waiting for secondaries' status.
	StatusTimingOut = messages.StatusTimingOut
)

// request is the state of one request this RC coordinates as primary.
type request struct {
	Request
	kind TableKind
	// trackStep is the step in which the request has an entry in
	// Core.tracked, at trackIdx: its changes to tell the Agg (track.go).
	// (Beside kind, which a decision reads: the entries are in the core's
	// storage, as a request's own were a cold cache line written on every
	// decision.)
	trackStep uint64
	trackIdx  int
	arrived   int64
	// firstQueuedDay and purviewEpoch are what SQL retries compare against.
	firstQueuedDay int64
	purviewEpoch   uint64
	retries        int
	sets           []*labelSet // sorted by label key
	// portions in id order: ids come from one counter, so appending keeps
	// the order, and a lookup is a binary search (portion) over ids,
	// their ids side by side (no portion state read on the way).
	portions []*portionState
	ids      []PortionID
	// setBuf is the storage of sets (labelSets).
	setBuf      []labelSet
	errored     bool
	aggregating bool
	// queued counts items, running portions of current attempts, over all
	// label sets.
	queued  int
	running int
	// caller is the caller's count of queued items (Core.callerQueue).
	caller *callerCount
	// ended: answered and forgotten (Core.end); nothing more is done for it.
	ended bool
	// secondaries are the peer RCs that run portions of this request, in
	// order of first use; peerBlocks their status blocks once reported.
	secondaries []string
	peerBlocks  map[string]string
	// timing out: the primary's own block, composed at the deadline, and the
	// ticks left to wait for secondaries.
	timingOut bool
	ownBlock  string
	waitUntil int64
	// tooLate lists DAPs whose completion for this request came at or after
	// the deadline; tooLateOK whether one of them succeeded (its partial is
	// at the Agg).
	tooLate   []string
	tooLateOK bool
}

// labelSet is a request's state for one label set (one group).
type labelSet struct {
	group groupKey
	qg    *queueGroup // the group's queue, once it has queued something
	// sub is the subqueue its items go to, while it has id subID (subFor).
	sub    *subqueue
	subID  uint64
	labels Labels
	// attempt counts retries of this label set; portions of older attempts
	// are superseded.
	attempt uint32
	// The reference vintage locked at the label set's first dispatch.
	locked  bool
	vintage uint64
	items   []*item
	// dropped: addresses of DAPs lost while running a portion of the set,
	// in order (ReasonRequiredDropped; recorded for SQL requests).
	dropped []string
	// running and done portions of the current attempt.
	running int
	done    []*portionState
	// itemsBuf and doneBuf hold items and done for the usual label set
	// (a portion per tier), without an allocation each.
	itemsBuf [3]*item
	doneBuf  [3]*portionState
}

// labelSets is n empty label sets for the request, in the storage of an
// earlier request when it has room (newRequest), else allocated at once.
func (r *request) labelSets(n int) []labelSet {
	var sets []labelSet
	if cap(r.setBuf) >= n {
		sets = r.setBuf[:n] // zeroed by newRequest
	} else {
		sets = make([]labelSet, n)
		r.setBuf = sets
	}
	for i := range sets {
		sets[i].items = sets[i].itemsBuf[:0]
		sets[i].done = sets[i].doneBuf[:0]
	}
	return sets
}

// portionState is a dispatched portion. What a completion reads comes
// first, with the portion's id, so that it shares a cache line.
type portionState struct {
	r  *request
	ls *labelSet
	// d is the DAP it was sent to, while that DAP is in the fleet (gone
	// says when not).
	d   *dap
	dap string
	// finished: the DAP reported back (or was lost); superseded: a retry
	// replaced the portion's attempt.
	finished   bool
	superseded bool
	// What the core reads of the Portion it sent (the Dispatch carries the
	// rest): its id, range and attempt.
	ID      PortionID
	Range   TimeRange
	Attempt uint32
	via     string
}

// ref names the portion's attempt, as the Agg is told of it.
func (ps *portionState) ref() PortionRef { return PortionRef{PortionID: ps.ID, Attempt: ps.Attempt} }

// portion is the request's portion with the id, nil if it has none.
func (r *request) portion(id PortionID) *portionState {
	i, ok := slices.BinarySearch(r.ids, id)
	if !ok {
		return nil
	}
	return r.portions[i]
}

func (r *request) status() Status {
	switch {
	case r.timingOut:
		return StatusTimingOut
	case r.errored:
		return StatusInactive
	case r.aggregating:
		return StatusAggregating
	case r.queued > 0:
		return StatusAllocating
	}
	return StatusExecuting
}

func (r *request) addSecondary(rc string) {
	for _, s := range r.secondaries {
		if s == rc {
			return
		}
	}
	r.secondaries = append(r.secondaries, rc)
}

// live: the core still coordinates the request (it arrived and has not
// ended).
func (r *request) live() bool { return !r.ended }

// complete: nothing of the current attempts is queued or running.
func (r *request) complete() bool { return r.queued == 0 && r.running == 0 }

// setRunning keeps the request's total of running portions with the label
// set's, so that complete is not a walk over every label set.
func (r *request) setRunning(ls *labelSet, n int) {
	r.running += n - ls.running
	ls.running = n
}
