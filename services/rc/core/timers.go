package core

import "container/heap"

// Timers are the times at which the core must act without an outside event.
// Entries are not removed when they become moot (a request answered, a
// pause changed); timerValid drops them lazily.
type timerKind int

// At equal times, deadlines are handled before the rest.
const (
	timerDeadline    timerKind = iota // a request's deadline (primary)
	timerWaitEnd                      // end of the wait for secondaries' status
	timerRelayed                      // a relayed request's deadline (secondary)
	timerRelayForget                  // forget a relayed request
	timerPauseEnd                     // a DAP's pause ends
)

type timerEntry struct {
	at   int64
	kind timerKind
	id   string
}

type timerHeap []timerEntry

func (h timerHeap) Len() int { return len(h) }
func (h timerHeap) Less(i, j int) bool {
	a, b := h[i], h[j]
	if a.at != b.at {
		return a.at < b.at
	}
	if a.kind != b.kind {
		return a.kind < b.kind
	}
	return a.id < b.id
}
func (h timerHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *timerHeap) Push(x any)   { *h = append(*h, x.(timerEntry)) }
func (h *timerHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

func (c *Core) schedule(t timerEntry) { heap.Push(&c.timers, t) }

func (c *Core) timerValid(t timerEntry) bool {
	switch t.kind {
	case timerDeadline:
		r := c.requests[t.id]
		return r != nil && !r.timingOut && r.Deadline == t.at
	case timerWaitEnd:
		r := c.requests[t.id]
		return r != nil && r.timingOut && r.waitUntil == t.at
	case timerRelayed:
		rr := c.relayed[t.id]
		return rr != nil && !rr.reported && rr.deadline == t.at
	case timerRelayForget:
		rr := c.relayed[t.id]
		return rr != nil && rr.forgetAt == t.at
	case timerPauseEnd:
		d := c.fleet.byID[t.id]
		return d != nil && d.pausedUntil == t.at
	}
	return false
}

// expire acts on every timer that has come due.
func (c *Core) expire() {
	for c.timers.Len() > 0 && c.timers[0].at <= c.now {
		t := heap.Pop(&c.timers).(timerEntry)
		if !c.timerValid(t) {
			continue
		}
		switch t.kind {
		case timerDeadline:
			c.timeout(c.requests[t.id])
		case timerWaitEnd:
			c.finishTimeout(c.requests[t.id])
		case timerRelayed:
			c.relayDeadline(c.relayed[t.id])
		case timerRelayForget:
			delete(c.relayed, t.id)
		case timerPauseEnd:
			c.dequeue(c.fleet.byID[t.id])
		}
	}
}
