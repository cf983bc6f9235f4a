package agg

import (
	"sync"
	"time"

	"github.com/sg-project/sg/messages"
)

// Done notices (messages.AggDone): the RC forgets a request once the Agg says
// it answered it. The answer has gone out first, so nothing waits on the
// notice but the RC's bookkeeping: a notice waits up to Config.DoneDelay for
// others to the same RC and they go in one message (at most
// messages.MaxAggDoneBatch entries; a full batch goes at once). With 50
// callers that is one message for many requests instead of one each. A
// timed-out notice (the RC answers the caller then) goes at once, with what
// waits for its RC.
//
// Run owns the timer: add wakes it for the first notice of an empty set (or
// an urgent one), and it sends everything when the delay has passed, and
// before the Agg's last heartbeat, so that an RC does not drive again a
// request this Agg answered because it stopped (answers still being sent at
// the stop tell theirs after it). A notice near its request's deadline goes
// at once: the RC would answer TIMEOUT before a held one came.
type doneNotices struct {
	a    *Agg
	wake chan struct{} // capacity 1: Run arms the timer, or sends at once (urgent)

	mu     sync.Mutex
	byRC   map[string][]heldDone
	urgent bool
}

// heldDone is one notice and when it began to wait.
type heldDone struct {
	e     messages.AggDoneEntry
	since time.Time
}

func newDoneNotices(a *Agg) *doneNotices {
	return &doneNotices{a: a, wake: make(chan struct{}, 1), byRC: map[string][]heldDone{}}
}

// add holds a notice for rcID; urgent ones wake Run to send at once.
func (d *doneNotices) add(rcID string, e messages.AggDoneEntry, urgent bool) {
	now := time.Now()
	d.mu.Lock()
	first := len(d.byRC) == 0
	held := append(d.byRC[rcID], heldDone{e: e, since: now})
	var full []heldDone
	if len(held) >= messages.MaxAggDoneBatch {
		full = held
		delete(d.byRC, rcID)
	} else {
		d.byRC[rcID] = held
	}
	d.urgent = d.urgent || urgent
	wake := first || urgent
	d.mu.Unlock()
	d.a.noteChanged()
	if full != nil {
		d.send(rcID, full, now)
	}
	if wake {
		select {
		case d.wake <- struct{}{}:
		default:
		}
	}
}

// takeUrgent reports (and clears) that a notice must go at once.
func (d *doneNotices) takeUrgent() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	u := d.urgent
	d.urgent = false
	return u
}

// flush sends every notice held.
func (d *doneNotices) flush() {
	d.mu.Lock()
	byRC := d.byRC
	if len(byRC) == 0 {
		d.mu.Unlock()
		return
	}
	d.byRC = map[string][]heldDone{}
	d.urgent = false
	d.mu.Unlock()
	now := time.Now()
	for rc, held := range byRC {
		d.send(rc, held, now)
	}
}

// send publishes one notice for rcID with the entries held.
func (d *doneNotices) send(rcID string, held []heldDone, now time.Time) {
	m := messages.AggDone{V: messages.AggDoneVersion, AggID: d.a.cfg.ID, Done: make([]messages.AggDoneEntry, len(held))}
	for i, h := range held {
		m.Done[i] = h.e
		m.Done[i].Held = int64(now.Sub(h.since))
	}
	err := messages.WithEncoded(&m, func(b []byte) error { // nats.go copies what it publishes
		return d.a.cfg.NC.Publish(d.a.cfg.Subjects.RCAggDone(rcID), b)
	})
	if err != nil {
		d.a.log.Error().Err(err).Str("rc", rcID).Int("requests", len(held)).Msg("AggDone not sent")
	}
}

// tellDone tells the request's RC that its answer went out.
func (a *Agg) tellDone(e *messages.AggExpectation, st messages.Status) {
	if e.RCID == "" {
		return
	}
	// The RC reads only an answered request's return code: its ai (a DAP's
	// may take up to 64 KiB) would let a batch pass the max payload and be
	// lost whole.
	st.AI = ""
	// The RC answers TIMEOUT at the deadline unless the notice has come: one
	// held past the deadline would make that a second answer.
	urgent := time.Until(time.Unix(0, e.Deadline)) < 2*a.cfg.DoneDelay
	a.dones.add(e.RCID, messages.AggDoneEntry{RequestID: e.RequestID, Status: st}, urgent)
}
