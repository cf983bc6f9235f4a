package core

import (
	"container/heap"
	"fmt"
	"slices"

	"github.com/sg-project/sg/messages"
)

// Core is the GW's request state machine: synchronous, single-threaded, no
// I/O, no clock. One goroutine owns it (see doc.go).
type Core struct {
	cfg    Config
	now    int64
	rcs    rcs
	reqs   map[string]*request
	relays map[string]*relay // answer streams under way, by request id (relay.go)
	// relayTimers: the relays' deadlines, in NextDeadline like the
	// requests' timers, so that a relay ends at its deadline, not at the
	// next periodic Tick. An entry whose relay ended is dropped lazily
	// (compactTimers).
	relayTimers timerHeap
	relaySeq    uint64 // the last relay's seq, which tells its timer from an earlier relay's of the same id
	callers     map[string]int
	// heldBytes: the answers' bytes held for every request (request.
	// streamBytes and waitBytes summed), under MaxHeldBytes.
	heldBytes int64
	timers    timerHeap
	stopping  bool
	aborted   bool
	out       []Command
	stats     Stats
}

// Stats are counters and gauges for metrics.
type Stats struct {
	InFlight   int // requests held (accepted or adopted, not yet answered or released)
	Answered   uint64
	Refused    uint64
	Released   uint64
	Adopted    uint64
	Redrives   uint64
	LogRetries uint64
	// HeldFull: answers ended because their chunks or frames took the
	// core past MaxHeldBytes.
	HeldFull uint64
}

// New returns a core with no RCs and no requests.
func New(cfg Config) *Core {
	return &Core{cfg: cfg.withDefaults(), rcs: newRCs(), reqs: map[string]*request{}, callers: map[string]int{}}
}

// Step feeds one event and returns the commands to carry out, in order. The
// slice is valid until the next call.
func (c *Core) Step(ev Event) []Command {
	c.out = c.out[:0]
	if t := ev.at(); t > c.now {
		c.now = t
	}
	switch e := ev.(type) {
	case Arrived:
		c.arrive(e.Req)
	case Tick:
		c.rcs.discountStall(e.Late, c.now)
		if c.rcs.prune(c.now, c.cfg.DeadAfter) {
			c.advanceAll()
		}
	case RCAnnounced:
		if c.rcs.announce(e.RC, c.now, c.cfg.AnnounceEvery) {
			c.advanceAll()
		}
	case LogWritten:
		if r := c.reqs[e.ID]; r != nil && r.op != nil {
			c.written(r, e.Seq)
		}
	case LogConflict:
		if r := c.reqs[e.ID]; r != nil && r.op != nil {
			c.conflict(r, e.Current, e.Seq)
		}
	case LogFailed:
		if r := c.reqs[e.ID]; r != nil && r.op != nil {
			c.failed(r)
		}
	case SubmitFailed:
		if r := c.reqs[e.ID]; r != nil && r.drive == e.Drive && r.held == nil {
			// The RC never got it: nobody will answer that drive.
			r.rcID, r.rcStarted = "", 0
			c.advance(r)
		}
	case AnswerChunk:
		c.answerChunk(e)
	case RelayFailed:
		c.relayFailed(e)
	case Adopt:
		c.adopt(e)
	case Cancel:
		c.cancel(e)
	case Stop:
		c.stop()
	case Abort:
		c.stop()
		c.aborted = true
		for _, r := range c.sorted() {
			c.advance(r)
		}
		c.endRelays("the gateway is stopping")
	default:
		panic(fmt.Sprintf("gw/core: unknown event %T", ev))
	}
	c.expire()
	c.compactTimers()
	c.stats.InFlight = len(c.reqs)
	return c.out
}

// NextDeadline is the earliest time the core must be stepped (a Tick) even
// if nothing else happens: a request's timer or a relay's deadline.
func (c *Core) NextDeadline() (int64, bool) {
	t, ok := c.timers.top(c.timerLive)
	if rt, rok := c.relayTimers.top(c.relayTimerLive); rok && (!ok || rt.at < t.at) {
		t, ok = rt, true
	}
	return t.at, ok
}

// Idle reports that the core holds no request and relays no answer stream:
// after Stop and Abort, the shell may return once it is idle. A stream
// under way keeps a stopping GW for its grace (Stop), then ends with an
// error frame (Abort): its caller is told, not left waiting for frames.
func (c *Core) Idle() bool { return len(c.reqs) == 0 && len(c.relays) == 0 }

// Stats returns the counters.
func (c *Core) Stats() Stats { return c.stats }

// RCs returns the RCs that get new requests, sorted by id.
func (c *Core) RCs() []RCInfo { return c.rcs.list() }

// Holds reports whether the core holds request id (for tests and sweeps).
func (c *Core) Holds(id string) bool { return c.reqs[id] != nil }

func (c *Core) emit(cmd Command) { c.out = append(c.out, cmd) }

// expire advances every request whose timer is due, and ends the relays
// past their deadline (relay.go).
func (c *Core) expire() {
	for c.timers.Len() > 0 && c.timers[0].at <= c.now {
		if t := heap.Pop(&c.timers).(timer); c.timerLive(t) {
			r := c.reqs[t.id]
			r.gen++ // even: no timer armed
			c.advance(r)
		}
	}
	c.expireRelays()
}

// advanceAll looks at every request again (an RC came, went or restarted).
func (c *Core) advanceAll() {
	for _, r := range c.sorted() {
		if r.phase == phWait || r.phase == phDrive {
			c.advance(r)
		}
	}
}

// sorted returns the requests in a fixed order (by id), so that a replay of
// the same events gives the same commands.
func (c *Core) sorted() []*request {
	ids := make([]string, 0, len(c.reqs))
	for id := range c.reqs {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	out := make([]*request, len(ids))
	for i, id := range ids {
		out[i] = c.reqs[id]
	}
	return out
}

func (c *Core) arm(r *request, at int64) {
	if r.armedAt == at && r.gen&1 == 1 {
		return // that timer is still valid
	}
	r.gen += 1 + r.gen&1 // odd: a timer is armed (a new generation)
	r.armedAt = at
	heap.Push(&c.timers, timer{at: at, id: r.ID, gen: r.gen})
}

func (c *Core) stop() {
	if c.stopping {
		return
	}
	c.stopping = true
	// Not logged yet, nothing was promised: refuse, "retry on another".
	for _, r := range c.sorted() {
		if r.phase == phWait && r.held == nil {
			r.held = &answer{status: unavailable(TextShuttingDown)}
			c.advance(r)
		}
		if r.phase == phDefer {
			c.advance(r) // submitted: its entry is written now, for a peer to adopt what is left open
		}
	}
}

func unavailable(text string) messages.Status {
	return messages.Status{RC: messages.CodeUnavailable, AC: messages.CodeErr, AI: text}
}

// --- timers ---

// timerLive: t is the timer armed now for its request (an answered
// request's, or one re-armed since, is stale).
func (c *Core) timerLive(t timer) bool {
	r := c.reqs[t.id]
	return r != nil && r.gen == t.gen
}

// relayTimerLive: t is the deadline of a relay under way (not of one that
// ended, nor of an earlier relay of the same id: seq differs).
func (c *Core) relayTimerLive(t timer) bool {
	rl := c.relays[t.id]
	return rl != nil && rl.seq == t.gen
}

// compactTimers drops the stale timers of a heap once they outnumber the
// live ones, as the RC's ageHeap does. Stale ones leave only when they reach
// the top, so under one live timer a heap would keep every request answered
// (or relay ended) before its deadline: rate x (timeout + margin) of them.
// Each request and relay has at most one live timer.
func (c *Core) compactTimers() {
	if len(c.timers) > 2*len(c.reqs)+64 {
		c.timers.compact(c.timerLive)
	}
	if len(c.relayTimers) > 2*len(c.relays)+64 {
		c.relayTimers.compact(c.relayTimerLive)
	}
}

type timer struct {
	at  int64
	id  string
	gen uint64
}

type timerHeap []timer

func (h timerHeap) Len() int { return len(h) }
func (h timerHeap) Less(i, j int) bool {
	if h[i].at != h[j].at {
		return h[i].at < h[j].at
	}
	return h[i].id < h[j].id
}
func (h timerHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *timerHeap) Push(x any)   { *h = append(*h, x.(timer)) }
func (h *timerHeap) Pop() any {
	old := *h
	t := old[len(old)-1]
	old[len(old)-1] = timer{} // its id
	*h = old[:len(old)-1]
	return t
}

// top drops the stale timers off the top of the heap and returns the
// earliest live one (false when none is left).
func (h *timerHeap) top(live func(timer) bool) (timer, bool) {
	for h.Len() > 0 {
		if t := (*h)[0]; live(t) {
			return t, true
		}
		heap.Pop(h)
	}
	return timer{}, false
}

// compact keeps the live timers only, in heap order again.
func (h *timerHeap) compact(live func(timer) bool) {
	kept := (*h)[:0]
	for _, t := range *h {
		if live(t) {
			kept = append(kept, t)
		}
	}
	clear((*h)[len(kept):])
	*h = kept
	heap.Init(h)
}
