package dap

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/sg-project/sg/messages"
)

// errShutdown is the cause of a portion's context when the DAP stops (Run's ctx ends).
var errShutdown = errors.New("DAP shutting down")

// slot is one unit of the DAP's concurrency: the long-lived goroutine of
// dispatchLoop that runs portions one after the other. What a portion needs
// to be stopped (the timer of its deadline, its entry among the running, the
// channel its early answer is waited on, the watch on shutdown) is the
// slot's, made once and reused from portion to portion; only the portion's
// context is new (issue 10: two contexts, a timer, an AfterFunc, a channel
// and closures per portion were a quarter of the DAP's allocations on a
// small request).
type slot struct {
	d      *DAP
	parent context.Context          // Run's: its end is shutdown
	values context.Context          // parent's values without its cancellation (portionCtx.Value)
	p      messages.PortionDispatch // the portion running (runPortion)
	run    running                  // its entry in DAP.running while it runs
	timer  *time.Timer              // its deadline: calls expire
	// answered takes one signal when answerEarly is done with a portion
	// stopped before its Source returned; the slot waits for it before
	// taking the next portion (p is answerEarly's until then).
	answered chan struct{}
	unwatch  func() bool // ends the watch on parent

	mu      sync.Mutex
	cur     *portionCtx // the running portion's, nil between portions
	start   time.Time   // when cur began
	claimed bool        // the Source returned first: runPortion answers
	early   bool        // stopped first: answerEarly answers
	shut    bool        // parent ended
}

// newSlot returns a slot that runs portions until parent ends; close it when done.
func (d *DAP) newSlot(parent context.Context) *slot {
	s := &slot{d: d, parent: parent, values: context.WithoutCancel(parent), answered: make(chan struct{}, 1)}
	s.run.stop = s.cancel
	s.timer = time.AfterFunc(time.Hour, s.expire)
	s.timer.Stop()
	s.unwatch = context.AfterFunc(parent, s.shutdown)
	return s
}

func (s *slot) close() {
	s.unwatch()
	s.timer.Stop()
}

// begin starts the portion in s.p, until deadline: registered for the RC's
// cancel, its deadline armed. The context it returns ends at the deadline,
// on the cancel or on shutdown, and when end is called.
func (s *slot) begin(deadline, start time.Time) *portionCtx {
	c := &portionCtx{values: s.values, deadline: deadline}
	s.mu.Lock()
	s.cur, s.start, s.claimed, s.early = c, start, false, false
	shut := s.shut
	s.mu.Unlock()
	if shut {
		s.stopEarly(c, errShutdown)
	}
	s.run.requestID, s.run.portionID = s.p.RequestID, s.p.PortionID
	s.d.track(&s.p, &s.run) // a cancel that came between the queue and here stops it now
	s.timer.Reset(time.Until(deadline))
	return c
}

// claim is called when the Source returned: it reports whether runPortion
// answers the portion, false when a stop came first (answerEarly answers,
// and the slot must wait on answered).
func (s *slot) claim() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.early {
		return false
	}
	s.claimed = true
	return true
}

// end ends the portion begun: no cancel or deadline reaches it any more,
// and its context is done (a Source that kept it sees it ended).
func (s *slot) end() {
	s.timer.Stop() // a fire already under way finds cur gone or another portion's deadline ahead
	s.d.untrack(&s.run)
	s.mu.Lock()
	c := s.cur
	s.cur = nil
	s.mu.Unlock()
	c.stop(context.Canceled, nil)
}

// stop ends c, if it is still the running portion's, with cause; it reports
// whether that came before the Source returned, in which case the caller
// must call answerEarly.
func (s *slot) stop(c *portionCtx, cause error) (early bool) {
	err := context.Canceled
	if cause == context.DeadlineExceeded {
		err = context.DeadlineExceeded
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cur != c || !c.stop(err, cause) {
		return false // ended, or stopped already
	}
	s.early = !s.claimed
	return s.early
}

// stopEarly is stop that answers on the caller's goroutine.
func (s *slot) stopEarly(c *portionCtx, cause error) {
	if s.stop(c, cause) {
		s.answerEarly(c)
	}
}

// cancel is the running entry's stop: the RC cancelled the portion. It is
// called with DAP.mu held (onCancel), so it answers on a goroutine of its own.
func (s *slot) cancel(cause error) {
	s.mu.Lock()
	c := s.cur
	s.mu.Unlock()
	if c != nil && s.stop(c, cause) {
		go s.answerEarly(c)
	}
}

// expire is the timer's: the running portion passed its deadline. A fire
// armed for an earlier portion leaves a portion whose deadline is ahead alone.
func (s *slot) expire() {
	s.mu.Lock()
	c := s.cur
	s.mu.Unlock()
	if c != nil && !time.Now().Before(c.deadline) {
		s.stopEarly(c, context.DeadlineExceeded) // cause and error alike
	}
}

// shutdown is the watch on parent: the running portion stops, unanswered.
func (s *slot) shutdown() {
	s.mu.Lock()
	s.shut = true
	c := s.cur
	s.mu.Unlock()
	if c != nil {
		s.stopEarly(c, errShutdown)
	}
}

// answerEarly answers a portion stopped before its Source returned, at once:
// the RC need not wait for a Source that is slow to stop (the slot is given
// back only once it has returned). On shutdown it answers nothing: DAPLost
// tells the RC.
func (s *slot) answerEarly(c *portionCtx) {
	defer func() { s.answered <- struct{}{} }()
	s.mu.Lock()
	start := s.start
	s.mu.Unlock()
	switch {
	case s.parent.Err() != nil || c.cause == errShutdown:
	case c.cause == errCancelled:
		s.d.answerCancelled(&s.p, time.Since(start))
	default:
		s.d.timedOut(&s.p, time.Since(start))
	}
}

// portionCtx is the context a portion runs under (its Source, its windows):
// done at its deadline, on the RC's cancel, on shutdown, or when the portion
// ends. Cheaper than the context package's for the DAP's case, where it is
// not derived from: one allocation, its Done channel made only if asked for.
// Its values are its parent's; context.Cause of it is its Err (its own cause
// says whether the RC cancelled it).
type portionCtx struct {
	values   context.Context
	deadline time.Time

	mu    sync.Mutex
	done  chan struct{} // made by the first Done
	err   error
	cause error
}

var closedDone = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

func (c *portionCtx) Deadline() (time.Time, bool) { return c.deadline, true }

func (c *portionCtx) Done() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done == nil {
		if c.err != nil {
			return closedDone
		}
		c.done = make(chan struct{})
	}
	return c.done
}

func (c *portionCtx) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

func (c *portionCtx) Value(key any) any { return c.values.Value(key) }

// cancelled reports whether the RC's cancel stopped c.
func (c *portionCtx) cancelled() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cause == errCancelled
}

// stop ends c with err and cause unless it ended already; it reports whether it did.
func (c *portionCtx) stop(err, cause error) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return false
	}
	c.err, c.cause = err, cause
	if c.done != nil {
		close(c.done)
	}
	return true
}
