package ratelimit

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"
)

// Actor governs every call to one endpoint: callers put their calls into its
// fan-in queue, and its one dispatcher hands each to a free slot of the pool,
// unless the endpoint asked for a pause; then nothing is dispatched until the
// pause ends, and the call that was refused is tried again after it.
//
// All of an actor's state (free slots, the pause, the calls to try again) is
// owned by the dispatcher goroutine; callers and slots talk to it over
// channels, so there is no lock and no caller sleeps on its own.
type Actor struct {
	key      string
	cfg      Config
	queue    chan *call   // fan-in: callers -> dispatcher
	finished chan outcome // slots -> dispatcher; capacity Slots, so a slot never blocks
	stopped  chan struct{}

	// What Open reads without asking the dispatcher: the end of the current
	// pause (unix ns, written only by the dispatcher) and the calls inside Do.
	pausedUntilNS atomic.Int64
	inDo          atomic.Int64
}

// call is one caller's request (the seed's ApiRequest).
type call struct {
	ctx      context.Context
	fn       func(ctx context.Context, slot int) error
	done     chan error // capacity 1: the dispatcher answers once and never blocks
	attempts int
}

type outcome struct {
	c    *call
	slot int
	err  error
	at   time.Time // when fn returned: a pause asked is counted from here
}

// Start starts the actor of endpoint key; its dispatcher stops when ctx ends.
// Calls still queued then fail with ErrStopped; calls in flight see their
// context cancelled and are answered when they return.
func Start(ctx context.Context, key string, cfg Config) *Actor {
	cfg = cfg.withDefaults()
	a := &Actor{
		key:      key,
		cfg:      cfg,
		queue:    make(chan *call, cfg.QueueLen),
		finished: make(chan outcome, cfg.Slots),
		stopped:  make(chan struct{}),
	}
	go a.run(ctx)
	return a
}

// Key is the actor's endpoint key.
func (a *Actor) Key() string { return a.key }

// Slots is the size of the actor's pool: fn's slot argument is in [0, Slots).
func (a *Actor) Slots() int { return a.cfg.Slots }

// Done is closed when the dispatcher has stopped.
func (a *Actor) Done() <-chan struct{} { return a.stopped }

// Do queues fn and waits for its answer. fn runs on one slot of the pool
// (slot: which one, so a source can keep one connection per slot) with ctx,
// cancelled also when the actor stops. A rate-limit error from fn pauses the
// endpoint and fn is tried again after the pause, up to MaxAttempts; any other
// error, or nil, is returned as is. When ctx ends first, Do returns at once
// with ctx's error (the call is dropped if it has not started).
func (a *Actor) Do(ctx context.Context, fn func(ctx context.Context, slot int) error) error {
	a.inDo.Add(1)
	defer a.inDo.Add(-1)
	if err := ctx.Err(); err != nil {
		return a.ctxErr(ctx, "before the call")
	}
	c := &call{ctx: ctx, fn: fn, done: make(chan error, 1)}
	select {
	case a.queue <- c:
	case <-ctx.Done():
		return a.ctxErr(ctx, "waiting for the queue")
	case <-a.stopped:
		return fmt.Errorf("ratelimit: endpoint %s: %w", a.key, ErrStopped)
	}
	select {
	case err := <-c.done:
		return err
	case <-ctx.Done():
		return a.ctxErr(ctx, "waiting for the answer")
	case <-a.stopped:
		// The dispatcher answers every call it holds before it stops.
		select {
		case err := <-c.done:
			return err
		default:
			return fmt.Errorf("ratelimit: endpoint %s: %w", a.key, ErrStopped)
		}
	}
}

// Open reports that a call made now would be dispatched at once: the
// endpoint is not paused and no call is queued, waiting or running through
// Do. A caller that keeps its own bound on concurrency may then make its call
// directly, without the dispatcher's hops, and hand it to Do only when the
// endpoint answers with a rate limit (the dispatcher then pauses everyone).
// It is a hint: a pause that starts just after it returned true is seen by
// the next call.
func (a *Actor) Open() bool {
	return a.inDo.Load() == 0 && time.Now().UnixNano() >= a.pausedUntilNS.Load()
}

func (a *Actor) ctxErr(ctx context.Context, while string) error {
	return fmt.Errorf("ratelimit: endpoint %s: %s: %w", a.key, while, context.Cause(ctx))
}

// Call is Do for a function with a result.
func Call[T any](ctx context.Context, a *Actor, fn func(ctx context.Context, slot int) (T, error)) (T, error) {
	var v T
	err := a.Do(ctx, func(ctx context.Context, slot int) error {
		r, err := fn(ctx, slot)
		v = r
		return err
	})
	if err != nil {
		var zero T
		return zero, err
	}
	return v, nil
}

// run is the dispatcher, the seed's actor loop: take the next call, wait out
// a pause, wait for a free slot, dispatch. Here the order is turned around
// (wait for the pause to end and a slot to be free, then take a call) so a
// call is only taken off the queue when it can run, and a caller whose context
// ends while it waits simply leaves.
func (a *Actor) run(ctx context.Context) {
	defer close(a.stopped)
	free := make([]int, 0, a.cfg.Slots) // free slot numbers, a stack
	for i := a.cfg.Slots - 1; i >= 0; i-- {
		free = append(free, i)
	}
	var (
		retry       []*call   // refused by a rate limit: tried again first, oldest first
		pausedUntil time.Time // no dispatch before it
		pauseStart  time.Time // zero when not paused
		largest     time.Duration
		timer       = time.NewTimer(time.Hour)
	)
	timer.Stop()
	defer timer.Stop()

	dispatch := func(c *call) {
		slot := free[len(free)-1]
		free = free[:len(free)-1]
		c.attempts++
		go func() { // owned by the actor: bounded by Slots, ends when fn returns
			cctx, cancel := context.WithCancel(c.ctx)
			stop := context.AfterFunc(ctx, cancel)
			err := c.fn(cctx, slot)
			at := time.Now()
			stop()
			cancel()
			a.finished <- outcome{c: c, slot: slot, err: err, at: at}
		}()
	}

	// finish takes a slot's outcome: a rate-limit error pauses the endpoint
	// for the time asked, the largest asked so far winning (seed: "max to
	// protect against race conditions"), and queues the call again. The
	// pause is counted from when the call returned (o.at), not from when the
	// dispatcher got to the outcome: on a loaded machine that came tens of
	// milliseconds later, and every pause was that much longer than asked,
	// its time lost to the endpoint's allowed rate. It still never ends
	// before the endpoint's, which began before the call returned.
	finish := func(o outcome) {
		now := o.at
		free = append(free, o.slot)
		d, limited := a.cfg.Classify(o.err)
		if !limited {
			if o.err == nil {
				largest = 0 // the endpoint took a call: the next refusal starts a new episode
			}
			o.c.done <- o.err
			return
		}
		if d <= 0 {
			d = a.cfg.MinPause
		}
		d = min(d, a.cfg.MaxPause)
		if largest > 0 && d > largest {
			a.cfg.Metrics.escalation(a.key)
			a.cfg.Log.Warn().Str("endpoint", a.key).Dur("asked", d).Dur("before", largest).Msg("endpoint escalated its rate-limit pause")
		}
		largest = max(largest, d)
		if until := now.Add(d); until.After(pausedUntil) {
			if pauseStart.IsZero() {
				pauseStart = now
				a.cfg.Metrics.pauseStarted(a.key)
				a.cfg.Metrics.pausedFor(a.key, d)
				a.cfg.Log.Warn().Str("endpoint", a.key).Dur("pause", d).Time("until", until).Msg("rate limited: pausing all calls to the endpoint")
			} else {
				a.cfg.Metrics.pausedFor(a.key, until.Sub(pausedUntil))
				a.cfg.Log.Info().Str("endpoint", a.key).Dur("pause", d).Time("until", until).Msg("rate limited: pause extended")
			}
			pausedUntil = until
			a.pausedUntilNS.Store(until.UnixNano())
		}
		if o.c.attempts >= a.cfg.MaxAttempts {
			o.c.done <- fmt.Errorf("ratelimit: endpoint %s: gave up after %d attempts: %w", a.key, o.c.attempts, o.err)
			return
		}
		retry = append(retry, o.c)
	}

	for {
		// Outcomes first: a refusal must stop dispatch before another call goes out.
		select {
		case o := <-a.finished:
			finish(o)
			continue
		default:
		}
		now := time.Now()
		paused := now.Before(pausedUntil)
		if !paused && !pauseStart.IsZero() {
			a.cfg.Log.Info().Str("endpoint", a.key).Dur("paused", now.Sub(pauseStart)).Msg("rate-limit pause over: resuming calls to the endpoint")
			pauseStart = time.Time{}
		}
		canRun := !paused && len(free) > 0
		if canRun && len(retry) > 0 {
			c := retry[0]
			retry[0] = nil
			retry = retry[1:]
			if err := c.ctx.Err(); err != nil {
				c.done <- a.ctxErr(c.ctx, "waiting for a slot")
				continue
			}
			dispatch(c)
			continue
		}
		var in chan *call
		if canRun || (paused && a.cfg.FailFast) {
			in = a.queue
		}
		var wake <-chan time.Time
		if paused {
			timer.Reset(pausedUntil.Sub(now))
			wake = timer.C
		}
		select {
		case c := <-in:
			if c.ctx.Err() != nil {
				c.done <- a.ctxErr(c.ctx, "waiting for a slot") // its caller has left already
				continue
			}
			if paused { // FailFast
				c.done <- fmt.Errorf("ratelimit: endpoint %s: paused: %w", a.key, &Error{Endpoint: a.key, Delay: max(time.Until(pausedUntil), time.Millisecond)})
				continue
			}
			dispatch(c)
		case o := <-a.finished:
			finish(o)
		case <-wake:
		case <-ctx.Done():
			a.shutdown(free, retry)
			return
		}
		if paused {
			timer.Stop()
		}
	}
}

// shutdown answers every call the actor holds: in flight (their contexts are
// cancelled by now), to be tried again, and queued.
func (a *Actor) shutdown(free []int, retry []*call) {
	stopped := fmt.Errorf("ratelimit: endpoint %s: %w", a.key, ErrStopped)
	for n := a.cfg.Slots - len(free); n > 0; n-- {
		o := <-a.finished
		o.c.done <- o.err
	}
	for _, c := range retry {
		c.done <- stopped
	}
	for {
		select {
		case c := <-a.queue:
			c.done <- stopped
		default:
			return
		}
	}
}
