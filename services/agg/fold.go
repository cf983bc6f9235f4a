package agg

import (
	"sync"

	"github.com/sg-project/sg/messages"
	"github.com/sg-project/sg/services/agg/merge"
	"github.com/sg-project/sg/subjects"
)

// Aggregates folded as they come (issue 10). An aggregating request's
// partials (getData with groupBy or agg, sql's GROUP BY) are decoded and
// folded into the request's running fold (aggFold, a merge.Merger) as each
// becomes counted: when it arrives for a ref already expected, or when the
// expectation of a partial already held arrives. A partial for a ref not
// (yet) expected, superseded or failed is never folded. The answer then
// folds only what was not folded yet (usually nothing, or the last partial)
// and takes the running fold's result: no fold of N partials on its path.
//
// The way back: until the answer, a RETRY may supersede a held partial (a
// label set's attempt restarts whole, OK portions included; a whole SQL
// retry; a lost DAP's portions), and a fold cannot give min, max, first or
// last back. Each partial's bytes stay held, as before, in request.partials
// (and counted in MaxRequestBytes and MaxHeldBytes); when a ref that was
// handed to the fold is dropped, the fold is reset (a new generation: folds
// begun before are let go when they end). On the request's first reset every
// partial still counted is handed to the fold again, from its bytes, within
// the bounds below (past them the answer folds them); on later ones only the
// partials that come or become expected after it are, and the answer folds
// the rest: an RC retrying label sets one expectation at a time would
// otherwise make a pass over every partial per retry. The fold is order-free to the bit
// (merge.TestAggregateFoldIsOrderFree), so a fold rebuilt, or finished at the
// answer, in any order, gives exactly the answer of one fold of the same
// partials at the answer.
//
// Exactly once: a ref is folded into a generation at most once (folded),
// only while it is expected and held; a generation's fold holds no ref
// outside the answered set, since only a supersede drops an expected ref and
// it resets the fold; the answer folds exactly the answered refs the fold
// does not hold, after closing it to late folds. Where anything is not so
// (a partial that does not decode or does not fit the request, a fold that
// holds a ref the answer does not), the answer merges every partial as
// before, in expectation order, so that its status is the same.
//
// Where the work runs: partials are decoded and folded after Agg.mu is let
// go, one at a time by one runner per request (the Merger is not safe for
// concurrent use, and one request's folds need not take every core): a
// runner for small partials (foldInlineBytes) is the goroutine that received
// them, counted in Agg.answers as an answer run inline is; for larger ones an
// answerer, as early.go's windows are, counted in Agg.answers and within
// maxEarlyDecodes (past it, the answer folds them). A partial handed while a
// runner runs is folded by it, except a large one while the runner is a
// receiving goroutine: that one is left to the answer. A fold's
// state is guarded by aggFold.mu, taken after Agg.mu where both are held.
//
// Memory: the running fold is bounded, not counted: a partial is folded as
// it comes only while every request's held bytes (its own included) stay
// within MaxHeldBytes/earlyExpansion, the bound early.go's decoded windows
// share; a fold takes at most a few times its partials' bytes (measured for
// 200,000 distinct groups of one int or symbol key: 5.0 times for sum, 4.6
// for count; less where groups repeat), well under 16, so the
// folds and the decoded windows together take at most MaxHeldBytes more than
// the bytes held. Past it partials wait for the answer, which folds them as
// before.

// foldInlineBytes: partials at most this large are folded by the goroutine
// that received them, as a small answer is answered by it
// (inlineAnswerBytes); larger ones on an answerer. Measured on 2 cores: a
// partial of 700 bytes (4 groups, every aggregation) decodes in about 20 µs,
// one of 3 KB (25 groups) in about 45 µs.
const foldInlineBytes = 4 << 10

// aggFold is one aggregating request's running fold.
type aggFold struct {
	args  messages.GetDataArgs // the request's, decoded once
	stats *counters            // the Agg's: folded, foldedAtAnswer

	mu      sync.Mutex
	gen     uint64                       // reset bumps it: folds begun before are let go
	claimed map[messages.PortionRef]bool // refs handed to this generation (pending, or folded)
	pending []foldItem                   // handed, not yet folded: the runner folds them in turn
	running bool                         // a runner is folding pending (one at a time: m is not safe for concurrent use)
	inline  bool                         // that runner is the goroutine that received a partial: it takes small ones only
	folded  map[messages.PortionRef]bool // refs in m
	m       *merge.Merger
	broken  bool // a partial did not decode or fit m: the answer merges every partial as before
	closed  bool // the answer took m, or the request is over: nothing more is folded
	// hook, for tests: called after each run with how many it folded.
	hook func(n int)
}

// newFold returns the running fold of an aggregating getData or sql request,
// nil for any other (or arguments that do not decode: the answer says so).
// da holds the request's decoded arguments.
func newFold(e *messages.AggExpectation, da *getDataArgs, stats *counters, hook func(int)) *aggFold {
	if e.API != subjects.APIGetData && e.API != subjects.APISQL {
		return nil
	}
	args, err := da.of(e)
	if err != nil || !args.Aggregating() {
		return nil
	}
	return &aggFold{args: args, stats: stats, hook: hook, claimed: map[messages.PortionRef]bool{},
		folded: map[messages.PortionRef]bool{}, m: merge.NewMerger(args)}
}

// foldItem is one partial handed to the fold.
type foldItem struct {
	ref     messages.PortionRef
	payload []byte
}

// drop takes ref back: when it was handed to the fold, the fold is reset
// and reports true (fold every partial still counted again). Agg.mu held.
func (f *aggFold) drop(ref messages.PortionRef) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed || !f.claimed[ref] {
		return false
	}
	if len(f.folded) > 0 {
		f.stats.foldResets.Add(1)
	}
	f.gen++
	clear(f.claimed)
	clear(f.folded)
	f.pending = nil
	f.m, f.broken = merge.NewMerger(f.args), false
	return true
}

// close lets every fold go: the request is over (dropped, or answered
// without the fold: an error).
func (f *aggFold) close() {
	f.mu.Lock()
	f.closed, f.pending = true, nil
	f.mu.Unlock()
}

// run folds the pending partials in turn, until none is left. f.running
// was set by whoever started it.
func (f *aggFold) run() {
	n := 0
	for {
		f.mu.Lock()
		if len(f.pending) == 0 || f.closed || f.broken {
			f.pending, f.running = nil, false
			f.mu.Unlock()
			break
		}
		it, gen := f.pending[0], f.gen
		f.pending = f.pending[1:]
		f.mu.Unlock()
		p, err := merge.DecodePartial(it.payload)
		f.mu.Lock()
		switch {
		case f.closed || f.gen != gen || f.folded[it.ref]:
			// Let go: the answer took the fold, or a supersede reset it.
		case err != nil:
			f.broken = true // the answer says why, as before
		case f.m.Add(p) != nil:
			f.broken = true
		default:
			f.folded[it.ref] = true
			n++
		}
		f.mu.Unlock()
	}
	f.stats.folded.Add(uint64(n))
	if f.hook != nil {
		f.hook(n)
	}
}

// finish closes the fold and returns it with ps folded in: ps are the
// answer's partials, each folded now unless it was as it came. ok false:
// the answer merges ps as before (see the type's doc).
func (f *aggFold) finish(ps []messages.PartialResult) (m *merge.Merger, ok bool) {
	f.mu.Lock()
	m, folded, ok := f.m, f.folded, !f.broken && !f.closed
	f.closed, f.pending = true, nil
	f.mu.Unlock()
	if !ok {
		return nil, false
	}
	var rest []messages.PartialResult
	for _, p := range ps {
		if !folded[p.Ref()] {
			rest = append(rest, p)
		}
	}
	if len(ps)-len(rest) != len(folded) {
		return nil, false // it holds a ref the answer does not: never answered
	}
	parts, errs := decodePartials(rest, nil)
	for i := range parts {
		if (errs != nil && errs[i] != nil) || m.Add(parts[i]) != nil {
			return nil, false
		}
	}
	f.stats.foldedAtAnswer.Add(uint64(len(rest)))
	return m, true
}

// foldLocked hands the partials of refs that r holds and counts (expected,
// OK) to r's fold, and returns what folds them when it is to run on this
// goroutine once Agg.mu is let go (nil: nothing to run here). A fold's
// partials are folded one at a time by one runner: if none runs, one is
// started, here for small partials, else on an answerer. Past the bounds
// (held bytes; maxEarlyDecodes at once, for a new runner of large
// partials) nothing is handed: the answer folds them, as before. Agg.mu
// held.
func (a *Agg) foldLocked(r *request, refs []messages.PortionRef) func() {
	f := r.fold
	if f == nil || len(refs) == 0 || r.answering || a.closing || a.held > a.cfg.MaxHeldBytes/earlyExpansion {
		return nil
	}
	f.mu.Lock()
	counted := func(ref messages.PortionRef) (messages.PartialResult, bool) {
		p, ok := r.partials[ref]
		return p, ok && p.Status.IsOK() && r.expected[ref] && !f.claimed[ref]
	}
	size := 0
	for _, ref := range refs {
		if p, ok := counted(ref); ok {
			size += len(p.Payload)
		}
	}
	start := !f.running
	inline := size <= foldInlineBytes
	// A runner on a receiving goroutine is handed no large partial: its
	// decode would hold up every request's partials, past maxEarlyDecodes.
	// The answer folds it.
	if f.closed || f.broken || size == 0 || (start && !inline && a.earlyDecodes.Load() >= maxEarlyDecodes) ||
		(!start && f.inline && !inline) {
		f.mu.Unlock()
		return nil
	}
	for _, ref := range refs {
		if p, ok := counted(ref); ok {
			f.claimed[ref] = true
			f.pending = append(f.pending, foldItem{ref, p.Payload})
		}
	}
	if start {
		f.running, f.inline = true, inline
	}
	f.mu.Unlock()
	switch {
	case !start:
		return nil // the runner folds them
	case inline:
		a.answers.Add(1) // Run waits for it, as for an answer run inline
		return func() {
			defer a.answers.Done()
			f.run()
		}
	}
	a.answers.Add(1)
	a.earlyDecodes.Add(1)
	a.answerers.run(func() {
		defer a.answers.Done()
		defer a.earlyDecodes.Add(-1)
		f.run()
	})
	return nil
}

// foldOfLocked is r's fold, made (once: its arguments decoded) when
// something is first to be folded, so that a request answered on its first
// partial (a small one, of one portion) decodes nothing more; nil: r is not
// aggregating, or its expectation has not come. Agg.mu held.
func (a *Agg) foldOfLocked(r *request) *aggFold {
	if !r.foldKnown && r.exp != nil {
		r.foldKnown = true
		var hook func(int)
		if h := a.foldHook.Load(); h != nil {
			hook = *h
		}
		r.fold = newFold(r.exp, &r.args, &a.stats, hook)
	}
	return r.fold
}

// openFoldLocked makes r's fold for its first fold, which takes every
// partial counted: false when there is nothing to fold (no partial held, or
// r handed to its answer, which decodes the arguments itself) or r's fold
// was decided before (none: r is not aggregating). Agg.mu held.
func (a *Agg) openFoldLocked(r *request) bool {
	return !r.answering && !r.foldKnown && len(r.partials) > 0 && a.foldOfLocked(r) != nil
}

// foldArrivedLocked hands r's fold the partial of ref, expected, which has
// just come and not completed r; the fold's first: every partial counted.
// Agg.mu held.
func (a *Agg) foldArrivedLocked(r *request, ref messages.PortionRef) func() {
	if r.fold == nil {
		if !a.openFoldLocked(r) {
			return nil
		}
		return a.foldLocked(r, r.expect)
	}
	return a.foldLocked(r, []messages.PortionRef{ref})
}

// foldExpectedLocked hands r's fold the partials an expectation made
// counted: those of the refs newly expected, or all again when a supersede
// reset the fold for the first time (or when the fold is made: partials came
// before their expectation). r.fresh and r.refold are spent even when a
// bound (held bytes, maxEarlyDecodes) let nothing be handed: the partials
// not handed are folded by the answer, whose result is the same. Agg.mu held.
func (a *Agg) foldExpectedLocked(r *request) func() {
	refs := r.fresh
	switch {
	case r.fold == nil:
		if !a.openFoldLocked(r) {
			return nil
		}
		refs = r.expect
	case r.refold && !r.refolded:
		// Once per request: an RC retrying label sets one expectation at a
		// time resets the fold as often, and each pass would decode and fold
		// every survivor again. After the first, the answer folds them.
		refs, r.refolded = r.expect, true
	}
	run := a.foldLocked(r, refs)
	r.fresh, r.refold = r.fresh[:0], false
	return run
}
