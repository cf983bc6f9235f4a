package core

import (
	"container/heap"

	"github.com/sg-project/sg/messages"
)

// Core is the RC's scheduler: a synchronous state machine. It is not safe for
// concurrent use; one goroutine owns it (see doc.go).
type Core struct {
	cfg   Config
	fleet fleet
	aggs  aggSet

	requests map[string]*request
	timers   timerHeap

	groups map[groupKey]*queueGroup
	// tableSets: per table, its label sets as split reads them (arrive.go).
	tableSets map[string]*tableSets
	// tableSetsEpoch: the fleet epoch tableSets was last swept at.
	tableSetsEpoch uint64
	// queuedBy counts queue items per caller (the per-caller limit); a
	// request holds its caller's entry while it lives (callerQueue).
	queuedBy map[string]*callerCount

	// relayed holds requests this RC runs as a secondary for a peer primary.
	relayed map[string]*relayedRequest

	nextPortion PortionID
	nextSeq     uint64
	now         int64
	out         []Command
	dispatches  arena[Dispatch] // the step's *Dispatch commands
	tracks      arena[AggTrack] // the step's *AggTrack commands
	refs        []PortionRef    // the step's AggExpect portion lists
	// tracked holds this step's AggTrack changes, one entry per request
	// (track.go); entries past its length keep their buffers for the next
	// steps. step numbers the steps (request.trackStep).
	tracked     []trackState
	step        uint64
	scratch     frontier
	runningByID runningIndex    // the portions the DAPs execute, by id (running.go)
	cands       []candidateHead // oldestFor's scratch
	placeOrder  []*dap          // placeRequest's scratch
	freeItems   []*item         // unqueued items, reused by enqueue
	items       itemTable       // every item, by number (queue.go)
	nextSubID   uint64          // the last subqueue id given (subqueue.id)
	freeSubs    []*subqueue     // emptied subqueues, reused with their buffers
	// portionSlab hands out portion states a chunk at a time: a decision
	// does not allocate one (a chunk lives while any of its requests does).
	portionSlab slab[portionState]
	// ended holds the requests that ended in this step; at the next step
	// nothing refers to them, and their portion states go to freePortions
	// for new decisions (a steady load allocates none).
	ended        []*request
	freePortions []*portionState
	freeReqs     []*request // ended requests kept for newRequest
	stats        Stats
	throttle     throttleState // downstream rate limits (throttle.go)
	// pastExec keeps the execution time measured for a DAP that left the
	// fleet (dap.execMean), for when it comes back.
	pastExec map[string]float64
}

// queueGroup holds the subqueues of one group: unlocked items and items per
// locked vintage.
type queueGroup struct {
	key      groupKey
	unlocked *subqueue
	locked   map[uint64]*subqueue
	// purviews: the distinct purviews of the group's DAPs, one heap each in
	// every subqueue (queue.go).
	purviews []messages.TimeRange
	// top is the group's highest vintage as of fleet vintage epoch topEpoch
	// (topKnown), a copy of fleet.maxVintage without hashing the group key
	// on every decision.
	top      uint64
	topEpoch uint64
	topKnown bool
	// dropped: deleted from Core.groups (dropGroupIfIdle); whatever still
	// holds it looks its key up again.
	dropped bool
	// daps is fleet.group(key) as of fleet epoch dapsEpoch (groupDAPs).
	daps      []*dap
	dapsEpoch uint64
	dapsKnown bool
	// served is fleet.serves(key) as of fleet epoch servedEpoch
	// (servedKnown): dropIfEmpty asks it whenever a subqueue empties.
	served      bool
	servedEpoch uint64
	servedKnown bool
}

// callerCount is a caller's queued items, and the live requests that count
// in it (the entry goes when both are none).
type callerCount struct {
	queued int
	refs   int
}

// callerQueue is the request's caller's entry in queuedBy, taken on first
// use and held until the request ends, so that enqueue and unqueue need no
// map lookup.
func (c *Core) callerQueue(r *request) *callerCount {
	if r.caller == nil {
		cc := c.queuedBy[r.Caller]
		if cc == nil {
			cc = &callerCount{}
			c.queuedBy[r.Caller] = cc
		}
		cc.refs++
		r.caller = cc
	}
	return r.caller
}

// releaseCaller lets go of the request's caller entry (the request ended
// with nothing queued).
func (c *Core) releaseCaller(r *request) {
	cc := r.caller
	if cc == nil {
		return
	}
	r.caller = nil
	if cc.refs--; cc.refs <= 0 && cc.queued <= 0 {
		delete(c.queuedBy, r.Caller)
	}
}

// queuedFor is how many items the caller has queued.
func (c *Core) queuedFor(caller string) int {
	if cc := c.queuedBy[caller]; cc != nil {
		return cc.queued
	}
	return 0
}

// New returns an empty core.
func New(cfg Config) *Core {
	cfg = cfg.withDefaults()
	c := &Core{
		cfg:      cfg,
		fleet:    newFleet(int64(cfg.LabelSetRetention)), // (negative: none)
		aggs:     newAggSet(cfg.Aggs),
		requests: map[string]*request{},
		groups:   map[groupKey]*queueGroup{},
		queuedBy: map[string]*callerCount{},
		relayed:  map[string]*relayedRequest{},
		now:      MinTS,
	}
	c.nextPortion = c.cfg.FirstPortion
	return c
}

// Step feeds one event and returns the commands to carry out, in order. The
// returned slice is valid until the next call.
//
// Order within a step: the event's facts are applied first (a DAP's new
// state, a completion recorded), then requests whose deadline has passed are
// timed out (so a response that arrives at the deadline is reported as too
// late, not processed), then the event's scheduling work runs.
func (c *Core) Step(ev Event) []Command {
	clear(c.out)
	c.out = c.out[:0]
	c.dispatches.reset()
	c.tracks.reset()
	clear(c.refs)
	c.refs = c.refs[:0]
	c.recycle()
	c.step++
	if t := eventTime(ev); t > c.now {
		c.now = t
	}
	c.fleet.forget(c.now) // label sets remembered past their retention (past.go)
	switch e := ev.(type) {
	case DAPRegistered:
		d := c.applyDAP(e.DAP, false)
		c.expire()
		c.afterDAPChange(d)
	case DAPStatusChanged:
		d := c.applyDAP(e.DAP, true)
		c.expire()
		c.afterDAPChange(d)
	case DAPVintageChanged:
		d, ok := c.fleet.byID[e.DAP]
		if !ok {
			c.expire()
			break
		}
		c.fleet.setVintage(d, e.Vintage)
		d.changedAt = c.now
		c.expire()
		c.afterDAPChange(d)
	case DAPLost:
		c.dapLost(e.DAP)
	case RequestArrived:
		c.expire()
		c.arrive(e.Request)
	case PortionCompleted:
		c.completed(e)
	case AggDone:
		if r, ok := c.requests[e.Request]; ok {
			c.end(r)
		}
		c.expire()
	case AggTimedOut:
		c.expire()
		c.aggTimedOut(e) // timeout_more.go
	case RequestCancelled:
		// Deadlines first: a cancel that comes at or after the deadline (the
		// GW gives up then too) must not replace the seed's timeout message.
		c.expire()
		c.cancel(e)
	case Tick:
		c.expire()
	case AggUp:
		c.expire()
		c.aggs.up(e.Agg)
	case AggLost:
		c.expire()
		c.aggLost(e.Agg)
	case PeerDispatch:
		c.expire()
		c.peerDispatch(e)
	case PeerStatusQuery:
		c.expire()
		c.peerStatusQuery(e)
	case PeerStatusReport:
		c.expire()
		c.peerStatusReport(e)
	case DAPThrottled:
		c.throttled(e)
	case Refused:
		c.refused(e) // refused.go
	case DAPPaused:
		c.expire()
		if d, ok := c.fleet.byID[e.DAP]; ok {
			d.pausedUntil = e.Until
			if e.Until > c.now {
				c.schedule(timerEntry{at: e.Until, kind: timerPauseEnd, id: d.ID})
			}
			c.afterDAPChange(d)
		}
	default:
		// (No %T: formatting ev would move every event to the heap.)
		panic("core: unknown event")
	}
	c.flushTracks()
	if c.tableSetsEpoch != c.fleet.epoch {
		c.sweepTableSets()
	}
	c.stats.Events++
	return c.out
}

// recycle keeps the portion states of the requests that ended in the last
// step for new portions: nothing held them past that step (an ended request
// is in no map, queue or timer of the core; commands carry copies).
func (c *Core) recycle() {
	for i, r := range c.ended {
		for j, ps := range r.portions {
			*ps = portionState{}
			c.freePortions = append(c.freePortions, ps)
			r.portions[j] = nil
		}
		r.portions = r.portions[:0]
		if len(c.freeReqs) < maxFreeRequests {
			c.freeReqs = append(c.freeReqs, r)
		}
		c.ended[i] = nil
	}
	c.ended = c.ended[:0]
}

// maxFreeRequests bounds the ended requests kept for reuse.
const maxFreeRequests = 64

// newRequest is an empty request, reusing an ended one's storage (its label
// sets, portion and label set lists) when there is one: a request then
// allocates little more than its strings.
func (c *Core) newRequest() *request {
	n := len(c.freeReqs)
	if n == 0 {
		return &request{}
	}
	r := c.freeReqs[n-1]
	c.freeReqs[n-1] = nil
	c.freeReqs = c.freeReqs[:n-1]
	sets, setBuf, portions, ids := r.sets, r.setBuf, r.portions, r.ids
	clear(sets[:cap(sets)])
	clear(setBuf[:cap(setBuf)])
	clear(portions[:cap(portions)])
	*r = request{sets: sets[:0], setBuf: setBuf[:0], portions: portions[:0], ids: ids[:0]}
	return r
}

// NextDeadline is the earliest time at which the core must be stepped even
// if nothing else happens: a request's deadline, the end of the multi-RC
// timeout wait, a secondary's deadline, the end of a DAP pause. The caller
// arms a timer for it and feeds a Tick then, so that timeouts are answered
// on time rather than at the next periodic tick.
func (c *Core) NextDeadline() (int64, bool) {
	for c.timers.Len() > 0 {
		top := c.timers[0]
		if c.timerValid(top) {
			return top.at, true
		}
		heap.Pop(&c.timers)
	}
	return 0, false
}

func (c *Core) emit(cmd Command) { c.out = append(c.out, cmd) }
