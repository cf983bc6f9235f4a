package agg

import (
	"slices"
	"time"

	"github.com/sg-project/sg/messages"
)

// maxEarlySeqs bounds the expectations held while an earlier Seq is missing.
const maxEarlySeqs = 1024

// request is what the Agg holds for one request until it answers. It is only touched
// under Agg.mu.
type request struct {
	id      string
	created time.Time

	exp     *messages.AggExpectation // Seq 1: API, Args, ReplyTo, ...; nil until it arrives
	nextSeq uint32
	early   map[uint32]messages.AggExpectation // Seqs that came before their predecessor

	expect     []messages.PortionRef // in the RC's order: the first failed one is answered
	expected   map[messages.PortionRef]bool
	superseded map[messages.PortionRef]bool
	sealed     bool

	partials map[messages.PortionRef]messages.PartialResult
	bytes    int64
	tooLarge bool // the partials passed MaxRequestBytes: they were dropped, the answer is TOO_LARGE
	// refused: a partial would have passed the Agg's MaxHeldBytes: the partials were
	// dropped, the answer is RATE_LIMITED, come back after retryAfter seconds.
	refused    bool
	retryAfter int
	answering  bool // handed to an answer goroutine
	dropped    int  // partials dropped after being kept (superseded, outside the sealed set, too large)
}

func newRequest(id string, now time.Time) *request {
	return &request{id: id, created: now, nextSeq: 1, expected: map[messages.PortionRef]bool{},
		superseded: map[messages.PortionRef]bool{}, partials: map[messages.PortionRef]messages.PartialResult{}}
}

// expectation applies e in Seq order: duplicates are ignored, early ones wait for their
// predecessors.
func (r *request) expectation(e messages.AggExpectation) {
	switch {
	case e.Seq < r.nextSeq:
		return
	case e.Seq > r.nextSeq:
		if len(r.early) < maxEarlySeqs {
			if r.early == nil {
				r.early = map[uint32]messages.AggExpectation{}
			}
			r.early[e.Seq] = e
		}
		return
	}
	r.apply(e)
	for {
		next, ok := r.early[r.nextSeq]
		if !ok {
			return
		}
		delete(r.early, r.nextSeq)
		r.apply(next)
	}
}

func (r *request) apply(e messages.AggExpectation) {
	r.nextSeq++
	if r.exp == nil {
		head := e
		head.Expect, head.Supersede = nil, nil
		r.exp = &head
	}
	// Retry of a label set: the earlier attempts' partials no longer count, now or later.
	for _, ref := range e.Supersede {
		r.superseded[ref] = true
		delete(r.expected, ref)
		r.drop(ref)
	}
	r.expect = slices.DeleteFunc(r.expect, func(ref messages.PortionRef) bool { return r.superseded[ref] })
	for _, ref := range e.Expect {
		if !r.superseded[ref] && !r.expected[ref] {
			r.expected[ref] = true
			r.expect = append(r.expect, ref)
		}
	}
	// Each expectation carries the set's state: the RC tells its Agg of portions as it
	// dispatches them, and a retry or requeue unseals the set until it is whole again.
	// A partial outside the set is held, not dropped: its expectation may still be on
	// its way (another subscription); it never counts unless it is expected.
	r.sealed = e.Sealed
}

func (r *request) drop(ref messages.PortionRef) {
	if p, ok := r.partials[ref]; ok {
		r.bytes -= int64(len(p.Payload))
		delete(r.partials, ref)
		r.dropped++
	}
}

// wants reports whether a partial for ref may still count.
func (r *request) wants(ref messages.PortionRef) bool {
	if r.tooLarge || r.refused || r.superseded[ref] {
		return false
	}
	if _, dup := r.partials[ref]; dup {
		return false
	}
	return true
}

// add keeps p, or marks the request too large when p would pass limit (then every
// partial is dropped: the answer is TOO_LARGE whatever else arrives).
func (r *request) add(p messages.PartialResult, limit int64) {
	n := int64(len(p.Payload))
	if r.bytes+n > limit {
		r.dropped++ // p itself
		r.setTooLarge()
		return
	}
	r.partials[p.Ref()] = p
	r.bytes += n
}

// setTooLarge drops every partial: the answer is TOO_LARGE whatever else arrives.
func (r *request) setTooLarge() {
	r.tooLarge = true
	r.dropped += len(r.partials)
	clear(r.partials)
	r.bytes = 0
}

// refuse drops every partial: the answer is RATE_LIMITED whatever else arrives.
func (r *request) refuse(retryAfter int) {
	r.refused, r.retryAfter = true, retryAfter
	r.dropped += len(r.partials)
	clear(r.partials)
	r.bytes = 0
}

// takeDropped returns and resets the count of dropped partials, for the Agg's stats.
func (r *request) takeDropped() uint64 {
	n := r.dropped
	r.dropped = 0
	return uint64(n)
}

// ready reports whether the request can be answered now: every expected partial is
// present, or one of them failed. A failed portion fails the request whatever the
// others return (the RC does not retry errors), so its error need not wait for them.
func (r *request) ready() bool {
	if r.exp == nil {
		return false
	}
	if r.tooLarge || r.refused {
		return true
	}
	complete := r.sealed
	for _, ref := range r.expect {
		p, ok := r.partials[ref]
		if ok && !p.Status.IsOK() {
			return true
		}
		complete = complete && ok
	}
	return complete
}

// job is what answering needs, taken out of the request so it runs outside the lock.
type job struct {
	exp      messages.AggExpectation
	partials []messages.PartialResult // in expectation order
	tooLarge bool
	// refused and retryAfter: see request.
	refused    bool
	retryAfter int
}

func (r *request) job() job {
	j := job{exp: *r.exp, tooLarge: r.tooLarge, refused: r.refused, retryAfter: r.retryAfter}
	for _, ref := range r.expect {
		if p, ok := r.partials[ref]; ok {
			j.partials = append(j.partials, p)
		}
	}
	return j
}
