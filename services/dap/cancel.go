package dap

import (
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/sg-project/sg/messages"
	"github.com/sg-project/sg/subjects"
)

// errCancelled is the cause of a portion's context when its RC cancels the request.
var errCancelled = errors.New("request cancelled by the RC")

// Bounds of the memory of cancelled requests (see cancels).
const (
	cancelMemory    = time.Minute
	maxCancelMemory = 4096
)

// cancels remembers the requests cancelled lately, so that a portion that arrives after
// its request's cancel (dispatch and cancel travel on different subscriptions) is
// answered at once instead of run. Bounded in time and size: a forgotten id only costs
// a portion run for nothing. Guarded by DAP.mu.
type cancels struct {
	until map[cancelKey]time.Time
	order []cancelKey // in the order they were added, for eviction
}

// cancelKey names a cancelled request (portion "") or one portion of it: a
// struct, not the two ids joined, so that the look-ups every portion makes
// (when it arrives, when it starts, when it runs) allocate nothing.
type cancelKey struct {
	request string
	portion messages.PortionID
}

func (c *cancels) add(id cancelKey, now time.Time) {
	if c.until == nil {
		c.until = map[cancelKey]time.Time{}
	}
	if _, ok := c.until[id]; !ok {
		c.order = append(c.order, id)
	}
	c.until[id] = now.Add(cancelMemory)
	for len(c.order) > 0 && (len(c.order) > maxCancelMemory || now.After(c.until[c.order[0]])) {
		delete(c.until, c.order[0])
		c.order = c.order[1:]
	}
}

func (c *cancels) has(id cancelKey, now time.Time) bool {
	t, ok := c.until[id]
	return ok && now.Before(t)
}

// running is one portion executing now, with the function that stops it
// (its slot's: slot.cancel).
type running struct {
	requestID string
	portionID messages.PortionID
	stop      func(cause error)
}

// onCancel: the RC tells us to stop a request's portions (no body; the id in
// Sg-Request-Id), or one portion of it (its id in Sg-Portion-Id: it worked for an Agg
// that died, and the request goes on). Running ones are stopped through their context
// (the Source looks at it between batches of rows, and the slot is given back as soon
// as it returns); queued ones are taken out of the queue and answered at once.
func (d *DAP) onCancel(m *nats.Msg) {
	id := m.Header.Get(messages.HdrRequestID)
	err := subjects.Validate("request id", id)
	var portion messages.PortionID
	if err == nil {
		portion, err = messages.ReadPortionID(m.Header)
	}
	if err != nil {
		d.countMalformed()
		d.lim.Warn(&d.log, "malformed_cancel").Err(err).Msg("malformed cancel")
		return
	}
	key := cancelKey{request: id, portion: portion}
	match := func(requestID string, portionID messages.PortionID) bool {
		return requestID == id && (portion == 0 || portionID == portion)
	}
	now := time.Now()
	d.mu.Lock()
	d.cancelled.add(key, now)
	n := 0
	for r := range d.running {
		if match(r.requestID, r.portionID) {
			r.stop(errCancelled)
			n++
		}
	}
	d.mu.Unlock()
	queued := d.queue.remove(func(p *messages.PortionDispatch) bool { return match(p.RequestID, p.PortionID) })
	d.log.Info().Str("request_id", id).Uint64("portion", uint64(portion)).Int("running", n).Int("queued", len(queued)).Msg("cancelled by the RC")
	for i := range queued {
		d.answerCancelled(&queued[i], 0)
	}
}

// isCancelled reports whether the RC cancelled the portion, or its whole request, lately.
func (d *DAP) isCancelled(p *messages.PortionDispatch) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.isCancelledLocked(p, time.Now())
}

func (d *DAP) isCancelledLocked(p *messages.PortionDispatch, now time.Time) bool {
	return d.cancelled.has(cancelKey{request: p.RequestID}, now) || d.cancelled.has(cancelKey{p.RequestID, p.PortionID}, now)
}

// track registers a running portion (r, its slot's entry) so that a cancel
// can stop it; untrack unregisters it.
func (d *DAP) track(p *messages.PortionDispatch, r *running) {
	d.mu.Lock()
	d.running[r] = struct{}{}
	cancelled := d.isCancelledLocked(p, time.Now())
	d.mu.Unlock()
	if cancelled {
		r.stop(errCancelled) // the cancel came between the queue and here
	}
}

func (d *DAP) untrack(r *running) {
	d.mu.Lock()
	delete(d.running, r)
	d.mu.Unlock()
}

// answerCancelled answers a portion stopped by a cancel: an error partial to the Agg (which
// drops it: the RC told it the request is over) and the completion to the RC, which
// frees the slot in its books.
func (d *DAP) answerCancelled(p *messages.PortionDispatch, elapsed time.Duration) {
	d.stats.cancelled.Add(1)
	d.portionLog(p).Info().Dur("elapsed", elapsed).Msg("portion cancelled")
	st := messages.Status{RC: messages.CodeErr, AC: messages.CodeErr,
		AI: fmt.Sprintf("DAP %s: portion %s cancelled: %v", d.cfg.ID, p.Ref(), errCancelled)}
	d.fail(p, st, elapsed)
}
