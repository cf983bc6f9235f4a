package core

import (
	"fmt"
	"time"
)

// Downstream rate limits (issue 12, seed: actor pattern). A DAP whose source
// was told by a remote endpoint to slow down does not run the portion: it
// answers THROTTLED with the pause asked and the endpoint's key. The core
// then pauses dispatch to that DAP, and to every DAP known to call the same
// endpoint, until the pause ends; it requeues the portion at its age, not as
// a retry (the DAP never ran it), and keeps dispatching to the other DAPs,
// so a replica that calls another endpoint takes the work.

// reasonPausedFmt is the reason a paused DAP is not given a queued portion,
// in timeout messages; the time is formatted as the message's timestamps.
const reasonPausedFmt = "Paused by downstream rate limit until %s"

const (
	// maxThrottle bounds one pause: Until comes from a DAP.
	maxThrottle = int64(time.Hour)
	// maxEndpoints bounds the endpoint keys the core remembers; past it a
	// throttle pauses only the DAP that reported it.
	maxEndpoints = 4096
)

// DAPThrottled: a DAP answered a portion THROTTLED: the remote endpoint its
// source calls (Endpoint, a rate-limit key shared by every DAP that calls
// it) asked for a pause until Until. The portion did not run.
type DAPThrottled struct {
	At       int64
	Request  string
	Portion  PortionID
	DAP      string
	Endpoint string // "": the pause is the DAP's alone
	Until    int64
}

func (e DAPThrottled) at() int64 { return e.At }

// throttleState is the core's memory of endpoints: the DAPs known to call
// each endpoint key (learned from DAPThrottled events).
type throttleState struct {
	users map[string]map[string]struct{}
}

func pausedReason(until int64) string { return fmt.Sprintf(reasonPausedFmt, formatTS(until)) }

// throttled handles DAPThrottled.
func (c *Core) throttled(e DAPThrottled) {
	r, ps, dapID := c.reported(e.Request, e.Portion, e.DAP)
	if d := c.fleet.byID[dapID]; d != nil {
		c.freeSlot(d, e.Portion)
		d.lastCompletionAt = c.now
	}
	until := min(e.Until, c.now+maxThrottle)
	groups := c.pauseEndpoint(dapID, e.Endpoint, until)

	if rr := c.relayed[e.Request]; rr != nil && rr.has(e.Portion) {
		// Secondary: the primary places its portions; it gets a RETRY, as
		// for a lost DAP, naming the pause.
		c.relayCompleted(rr, PortionCompleted{At: c.now, Request: e.Request, Portion: e.Portion, DAP: dapID,
			Outcome: OutcomeRetry, Message: "DAP " + dapID + ": " + pausedReason(until)})
		c.expire()
		c.dequeueGroups(groups)
		return
	}
	if ps == nil || ps.finished || ps.superseded {
		if ps != nil {
			ps.finished = true
		}
		c.stats.Stale++
		c.expire()
		c.dequeueGroups(groups)
		return
	}
	ps.finished, ps.superseded = true, true
	c.trackSupersede(r, ps)
	ls := ps.ls
	r.setRunning(ls, ls.running-1)
	if !r.errored && !r.timingOut && !r.aggregating {
		// Requeued at the request's age, as leftovers are: not a retry.
		c.enqueue(r, ls, ps.Range)
	}
	// A deadline now past times out here, and the message names the pause.
	c.expire()
	if r.live() {
		c.placeRequest(r)
	}
	c.dequeueGroups(groups)
}

// pauseEndpoint pauses the DAP, and every DAP known to call the endpoint,
// until `until` (a longer pause already in force stays), and returns their
// groups, whose other DAPs may now take the queued work.
func (c *Core) pauseEndpoint(dapID, endpoint string, until int64) []groupKey {
	ids := []string{dapID}
	if endpoint != "" {
		if c.throttle.users == nil {
			c.throttle.users = map[string]map[string]struct{}{}
		}
		users := c.throttle.users[endpoint]
		if users == nil && len(c.throttle.users) < maxEndpoints {
			users = map[string]struct{}{}
			c.throttle.users[endpoint] = users
		}
		if users != nil {
			if c.fleet.byID[dapID] != nil {
				users[dapID] = struct{}{}
			}
			for id := range users {
				if c.fleet.byID[id] == nil {
					delete(users, id) // lost since
					continue
				}
				if id != dapID {
					ids = append(ids, id)
				}
			}
			if len(users) == 0 {
				delete(c.throttle.users, endpoint)
			}
		}
	}
	var groups []groupKey
	for _, id := range ids {
		d := c.fleet.byID[id]
		if d == nil {
			continue
		}
		for _, t := range d.tables {
			groups = append(groups, c.fleet.groupOf(d, t))
		}
		if until <= d.pausedUntil || until <= c.now {
			continue
		}
		d.pausedUntil = until
		d.changedAt = c.now
		c.schedule(timerEntry{at: until, kind: timerPauseEnd, id: d.ID})
	}
	return groups
}
