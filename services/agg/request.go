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

	exp     *messages.AggExpectation // Seq 1: API, Args, ReplyTo, ...; nil until it arrives (then &head)
	head    messages.AggExpectation  // exp's storage: one allocation less per request
	nextSeq uint32
	early   map[uint32]messages.AggExpectation // Seqs that came before their predecessor

	expect     []messages.PortionRef // in the RC's order: the first failed one is answered
	expected   map[messages.PortionRef]bool
	superseded map[messages.PortionRef]bool // nil until the first supersede (most requests have none)
	sealed     bool
	// expect0: expect's storage while the request has one portion (a
	// small request's), so that it is not an allocation of its own.
	expect0 [1]messages.PortionRef

	partials map[messages.PortionRef]messages.PartialResult
	// decodedWhole: the decodings of large partials in one piece begun as
	// they came (early.go), by ref: that of the OK partial partials holds
	// under the ref (an error partial that replaced it has none to use).
	decodedWhole map[messages.PortionRef]*decoding
	// windows: the portions whose partials come in windows (live.go), from
	// their first window on; an error partial of one goes to partials instead.
	windows map[messages.PortionRef]*portionWindows
	// live: the answer's stream has begun (live.go): the request stays here,
	// for the windows still to come, until the stream ends.
	live     *liveMerge
	failed   *messages.Status // the windows broke the protocol (live.go): the answer is this error
	liveKind int8             // streamsLive, once known: 1 yes, 2 no
	// args: the expectation's getData arguments, decoded once for
	// streamsLive, the fold and the answer, by whichever needs them first.
	args     getDataArgs
	bytes    int64
	tooLarge bool // the partials passed MaxRequestBytes: they were dropped, the answer is TOO_LARGE
	// refused: a partial would have passed the Agg's MaxHeldBytes: the partials were
	// dropped, the answer is RATE_LIMITED, come back after retryAfter seconds.
	refused    bool
	retryAfter int
	answering  bool // handed to an answer goroutine
	dropped    int  // partials dropped after being kept (superseded, outside the sealed set, too large)

	// fold: an aggregating request's partials folded as they come (fold.go),
	// nil for any other; foldKnown: decided, once something is first to be
	// folded (the expectation came and a partial is held), not before.
	fold      *aggFold
	foldKnown bool
	// fresh: refs expected since the last fold was handed out; refold: the
	// fold was reset, every ref counted is folded again (fold.go), on the
	// first reset only (refolded): later ones leave the survivors to the answer.
	fresh    []messages.PortionRef
	refold   bool
	refolded bool
}

func newRequest(id string, now time.Time) *request {
	r := &request{id: id, created: now, nextSeq: 1, expected: map[messages.PortionRef]bool{},
		partials: map[messages.PortionRef]messages.PartialResult{}}
	r.expect = r.expect0[:0]
	return r
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
		r.head = e
		r.head.Expect, r.head.Supersede = nil, nil
		r.exp = &r.head
	}
	// Retry of a label set: the earlier attempts' partials no longer count, now or later.
	for _, ref := range e.Supersede {
		if r.live.has(ref) {
			// Frames may have gone out: the answer cannot be taken back (live.go).
			r.live.fail(messages.Errorf(messages.CodeErr, messages.CodeErr,
				"portion %s was superseded after the answer's stream began: the answer is cut, ask again", ref))
		}
		if r.superseded == nil {
			r.superseded = map[messages.PortionRef]bool{}
		}
		r.superseded[ref] = true
		delete(r.expected, ref)
		if r.fold != nil && r.fold.drop(ref) {
			r.refold = true // its fold cannot give it back: folded again without it
		}
		r.drop(ref)
	}
	if len(e.Supersede) > 0 {
		r.expect = slices.DeleteFunc(r.expect, func(ref messages.PortionRef) bool { return r.superseded[ref] })
	}
	for _, ref := range e.Expect {
		if !r.superseded[ref] && !r.expected[ref] {
			r.expected[ref] = true
			r.expect = append(r.expect, ref)
			if r.fold != nil {
				r.fresh = append(r.fresh, ref)
			}
			if r.live != nil {
				r.live.fail(messages.Errorf(messages.CodeErr, messages.CodeErr,
					"portion %s was added after the answer's stream began: the answer is cut, ask again", ref))
			}
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
	if w := r.windows[ref]; w != nil {
		r.bytes -= w.bytes
		r.dropped += len(w.queue)
		delete(r.windows, ref)
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
	return r.failed == nil
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
	r.dropAll()
	r.live.fail(messages.Errorf(messages.CodeTooLarge, messages.CodeErr, "partial results above the Agg's limit"))
}

// refuse drops every partial: the answer is RATE_LIMITED whatever else arrives.
func (r *request) refuse(retryAfter int) {
	r.refused, r.retryAfter = true, retryAfter
	r.dropAll()
	r.live.fail(messages.Errorf(messages.CodeRateLimited, messages.CodeErr, "the Agg holds too many partial results"))
}

// setFailed drops every partial: the answer is st whatever else arrives.
func (r *request) setFailed(st messages.Status) {
	if r.failed == nil {
		r.failed = &st
	}
	r.dropAll()
	r.live.fail(st)
}

// dropAll drops every partial and window held.
func (r *request) dropAll() {
	if r.fold != nil {
		r.fold.close() // the answer is an error
	}
	r.dropped += len(r.partials)
	clear(r.partials)
	clear(r.decodedWhole)
	for _, w := range r.windows {
		r.dropped += len(w.queue)
		w.queue, w.decoded, w.bytes = nil, nil, 0
	}
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
	if r.tooLarge || r.refused || r.failed != nil {
		return true
	}
	complete := r.sealed
	for _, ref := range r.expect {
		p, ok := r.partials[ref]
		if ok && !p.Status.IsOK() {
			return true
		}
		if w := r.windows[ref]; !ok && w != nil {
			// A portion in windows: whole once its last has come; for a live
			// merge, its first is enough (live.go).
			ok = w.ended || (r.streamsLive() && len(w.queue) > 0)
		}
		complete = complete && ok
	}
	return complete
}

// getDataArgs is an expectation's getData (or sql) arguments, decoded once.
type getDataArgs struct {
	known bool
	args  messages.GetDataArgs
	err   error
}

// of decodes e's arguments the first time it is called, and gives the
// same result after.
func (g *getDataArgs) of(e *messages.AggExpectation) (messages.GetDataArgs, error) {
	if !g.known {
		g.known = true
		g.args, g.err = e.Arguments().GetData()
	}
	return g.args, g.err
}

// job is what answering needs, taken out of the request so it runs outside the lock.
type job struct {
	exp      messages.AggExpectation
	args     getDataArgs              // exp's, as far as the request decoded them
	partials []messages.PartialResult // in expectation order
	tooLarge bool
	// refused and retryAfter: see request.
	refused    bool
	retryAfter int
	failed     *messages.Status
	unused     int // partials and windows held outside the answered set
	// runs: how many partials of each portion follow one another in partials
	// (its windows, in order; 1 for a partial in one piece). nil: one each.
	runs []int
	// decoded: the partials whose decoding began as they came (early.go),
	// by index in partials; nil entries, or nil: decoded with the answer.
	decoded []*decoding
	// fold: the partials folded as they came (fold.go), nil: none.
	fold *aggFold
	// gate: the start gate of its answer stream, when the GW paces it
	// (start.go), registered as it is taken so that a cancel from then on
	// finds it; nil: none.
	gate *startGate
}

// job takes the answer's partials out: the windows of a portion in windows
// each count as a partial (each is a row partial in the portion's order; the
// merge is a k-way merge of them all).
func (r *request) job() job {
	j := job{exp: *r.exp, args: r.args, tooLarge: r.tooLarge, refused: r.refused, retryAfter: r.retryAfter, failed: r.failed, fold: r.fold}
	held := len(r.partials)
	for _, w := range r.windows {
		held += len(w.queue)
	}
	for _, ref := range r.expect {
		if p, ok := r.partials[ref]; ok {
			if d := r.decodedWhole[ref]; d != nil && p.Status.IsOK() {
				j.decoded = padDecodings(j.decoded, len(j.partials))
				j.decoded = append(j.decoded, d)
			}
			j.partials = append(j.partials, p)
		} else if w := r.windows[ref]; w != nil {
			if len(w.decoded) > 0 {
				j.decoded = padDecodings(j.decoded, len(j.partials))
				j.decoded = append(j.decoded, w.decoded...)
			}
			j.partials = append(j.partials, w.queue...)
			if j.runs == nil {
				j.runs = make([]int, 0, len(r.expect))
				for range len(j.partials) - len(w.queue) {
					j.runs = append(j.runs, 1)
				}
			}
			j.runs = append(j.runs, len(w.queue))
			continue
		}
		if j.runs != nil {
			j.runs = append(j.runs, 1)
		}
	}
	j.unused = held - len(j.partials)
	return j
}
