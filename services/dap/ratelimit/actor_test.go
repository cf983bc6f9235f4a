package ratelimit

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// With one slot, a refusal stops every call until the pause asked has passed,
// then the refused call runs again first, then the others; metrics count the pause.
func TestActorPausesAllCallsForTheTimeAsked(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	a := Start(ctx, "ads", Config{Slots: 1, Metrics: m})
	const pause = 150 * time.Millisecond
	var (
		mu       sync.Mutex
		starts   []time.Time
		refused  time.Time
		refusals int
	)
	endpoint := func(ctx context.Context, slot int) error {
		mu.Lock()
		defer mu.Unlock()
		starts = append(starts, time.Now())
		if refusals == 0 {
			refusals++
			refused = time.Now()
			return &Error{Endpoint: "ads", Delay: pause}
		}
		return nil
	}
	var wg sync.WaitGroup
	errs := make(chan error, 10)
	for range 10 {
		wg.Go(func() { errs <- a.Do(ctx, endpoint) })
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("a call failed: %v", err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(starts) != 11 {
		t.Fatalf("endpoint saw %d calls, want 10 and one try again", len(starts))
	}
	for i, s := range starts {
		if s.After(refused) && s.Sub(refused) < pause {
			t.Errorf("call %d started %s after the refusal, inside the %s pause", i, s.Sub(refused), pause)
		}
	}
	if got := value(m.pauses.WithLabelValues("ads")); got != 1 {
		t.Errorf("%s = %v, want 1", MetricPauses, got)
	}
	if got := value(m.paused.WithLabelValues("ads")); got < pause.Seconds() || got > pause.Seconds()+0.05 {
		t.Errorf("%s = %v, want %v", MetricPausedSeconds, got, pause.Seconds())
	}
	if got := value(m.escalations.WithLabelValues("ads")); got != 0 {
		t.Errorf("%s = %v, want 0", MetricEscalations, got)
	}
}

// Two calls in flight refused with different pauses: the largest wins, and
// the longer ask counts as an escalation.
func TestActorLargestPauseWins(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	m, _ := NewMetrics(nil)
	a := Start(ctx, "ads", Config{Slots: 2, Metrics: m})
	asks := []time.Duration{50 * time.Millisecond, 300 * time.Millisecond}
	var (
		mu      sync.Mutex
		n       int
		last    time.Time // when the last refusal returned
		retried []time.Time
	)
	both := make(chan struct{})
	var arrived atomic.Int32
	endpoint := func(ctx context.Context, slot int) error {
		mu.Lock()
		i := n
		n++
		mu.Unlock()
		if i < 2 {
			// Both first calls are in flight together before either is refused.
			if arrived.Add(1) == 2 {
				close(both)
			}
			select {
			case <-both:
			case <-ctx.Done():
				return ctx.Err()
			}
			mu.Lock()
			defer mu.Unlock()
			last = time.Now()
			return &Error{Delay: asks[i]}
		}
		mu.Lock()
		retried = append(retried, time.Now())
		mu.Unlock()
		return nil
	}
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			if err := a.Do(ctx, endpoint); err != nil {
				t.Errorf("call failed: %v", err)
			}
		})
	}
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	if len(retried) != 2 {
		t.Fatalf("%d calls tried again, want 2", len(retried))
	}
	// The 300 ms pause began at or after the first refusal returned, so no
	// retry may start earlier than 300 ms after the first refusal.
	for _, r := range retried {
		if d := r.Sub(last); d < asks[1]-asks[0] {
			t.Errorf("a retry started %s after the last refusal; the 300 ms pause was cut short", d)
		}
	}
	if got := value(m.pauses.WithLabelValues("ads")); got != 1 {
		t.Errorf("pauses = %v, want 1 (the second refusal extends the first pause)", got)
	}
	// Which refusal the actor hears first is a race: an escalation is counted
	// only when the 300 ms ask comes after the 50 ms one.
	if got := value(m.escalations.WithLabelValues("ads")); got > 1 {
		t.Errorf("escalations = %v, want 0 or 1", got)
	}
}

// While one endpoint is paused, another carries on; a caller's context ends
// its wait at once; stopping the registry answers the calls still queued.
func TestRegistryOtherEndpointsCarryOnAndContextsCancel(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	// One slot: the second call cannot start before the first's refusal has paused the endpoint.
	r := NewRegistry(ctx, Config{Slots: 1}, 2)
	entered := make(chan struct{})
	refuse := func(ctx context.Context, slot int) error { close(entered); return &Error{Delay: time.Hour} }
	ok := func(ctx context.Context, slot int) error { return nil }

	// Pause "slow" for an hour: its caller waits, its retry is held.
	first := make(chan error, 1)
	go func() { first <- r.Do(context.Background(), "slow", refuse) }()
	select {
	case <-entered:
	case <-time.After(5 * time.Second):
		t.Fatal("first call never ran")
	}

	// A caller with a short deadline leaves the paused endpoint's queue.
	waitCtx, waitCancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer waitCancel()
	began := time.Now()
	err := r.Do(waitCtx, "slow", ok)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("caller of a paused endpoint: err = %v, want its deadline", err)
	}
	if d := time.Since(began); d > 5*time.Second {
		t.Fatalf("caller waited %s past its 100 ms deadline", d)
	}

	// Another endpoint is not paused.
	for range 20 {
		if err := r.Do(context.Background(), "fast", ok); err != nil {
			t.Fatalf("other endpoint: %v", err)
		}
	}
	if _, err := r.Actor("third"); !errors.Is(err, ErrTooManyEndpoints) {
		t.Errorf("third endpoint with a limit of 2: err = %v, want ErrTooManyEndpoints", err)
	}
	if _, err := r.Actor(""); !errors.Is(err, ErrBadKey) {
		t.Errorf("empty key: err = %v, want ErrBadKey", err)
	}

	cancel()
	select {
	case err := <-first:
		if !errors.Is(err, ErrStopped) {
			t.Errorf("call held for a retry when the actor stopped: err = %v, want ErrStopped", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("held call not answered after the actor stopped")
	}
	for _, k := range []string{"slow", "fast"} {
		a, _ := r.Actor(k)
		select {
		case <-a.Done():
		case <-time.After(5 * time.Second):
			t.Fatalf("actor %s did not stop", k)
		}
	}
}

// A call refused every time is given up after MaxAttempts with the
// rate-limit error; any other error passes straight through, untried again.
func TestActorGivesUpAndPassesOtherErrors(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a := Start(ctx, "ads", Config{Slots: 1, MaxAttempts: 3, MinPause: time.Millisecond})
	var tries atomic.Int32
	err := a.Do(ctx, func(ctx context.Context, slot int) error {
		tries.Add(1)
		return &Error{} // no delay said: MinPause
	})
	if !errors.Is(err, ErrRateLimited) || tries.Load() != 3 {
		t.Fatalf("err = %v after %d tries, want ErrRateLimited after 3", err, tries.Load())
	}
	boom := errors.New("boom")
	tries.Store(0)
	v, err := Call(ctx, a, func(ctx context.Context, slot int) (int, error) {
		tries.Add(1)
		return 7, boom
	})
	if !errors.Is(err, boom) || v != 0 || tries.Load() != 1 {
		t.Fatalf("Call = %d, %v after %d tries; want 0, boom after 1", v, err, tries.Load())
	}
	v, err = Call(ctx, a, func(ctx context.Context, slot int) (int, error) { return 7, nil })
	if err != nil || v != 7 {
		t.Fatalf("Call = %d, %v; want 7, nil", v, err)
	}
}

// value reads a counter.
func value(c prometheus.Counter) float64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		panic(err)
	}
	return m.GetCounter().GetValue()
}

// FailFast: while paused, calls are answered at once with what is left of
// the pause, and nothing reaches the endpoint; after the pause calls run.
func TestActorFailFast(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a := Start(ctx, "ads", Config{Slots: 1, MaxAttempts: 1, FailFast: true})
	const pause = 200 * time.Millisecond
	var calls atomic.Int32
	refusedAt := time.Now()
	err := a.Do(ctx, func(ctx context.Context, slot int) error {
		calls.Add(1)
		return &Error{Endpoint: "ads", Delay: pause}
	})
	if d, ok := Delay(err); !ok || d != pause {
		t.Fatalf("refused call: %v, want its rate-limit error back at once (MaxAttempts 1)", err)
	}
	for range 5 {
		err := a.Do(ctx, func(ctx context.Context, slot int) error { calls.Add(1); return nil })
		d, ok := Delay(err)
		if time.Since(refusedAt) >= pause {
			break // the machine was slow: the pause is over
		}
		if !ok || d <= 0 || d > pause {
			t.Fatalf("call inside the pause: %v, want a rate-limit error with what is left of %s", err, pause)
		}
	}
	if n := calls.Load(); n != 1 && time.Since(refusedAt) < pause {
		t.Fatalf("endpoint saw %d calls inside the pause, want only the refused one", n)
	}
	// After the pause, calls run again (wait for it on the actor, not a sleep).
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := a.Do(ctx, func(ctx context.Context, slot int) error { return nil })
		if err == nil {
			break
		}
		d, ok := Delay(err)
		if !ok || time.Now().After(deadline) {
			t.Fatalf("after the pause: %v", err)
		}
		tm := time.NewTimer(d)
		<-tm.C
	}
}

// Open is true only when a call made now would go out at once: not while a
// call is inside Do, not during a pause, and again once the pause is over.
func TestActorOpen(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a := Start(ctx, "ads", Config{Slots: 1})
	if !a.Open() {
		t.Fatal("a new actor is not open")
	}
	const pause = 100 * time.Millisecond
	inside := make(chan struct{})
	release := make(chan struct{})
	refused := false
	done := make(chan error, 1)
	go func() {
		done <- a.Do(ctx, func(context.Context, int) error {
			if !refused {
				refused = true
				close(inside)
				<-release
				return &Error{Endpoint: "ads", Delay: pause}
			}
			return nil
		})
	}()
	<-inside
	if a.Open() {
		t.Error("open while a call runs through Do")
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatalf("call: %v", err)
	}
	// The call returned after the pause it asked for: Open again, and the
	// pause it left behind is over.
	if !a.Open() {
		t.Errorf("not open after the paused call returned (paused until %v)", time.Unix(0, a.pausedUntilNS.Load()))
	}
	if a.pausedUntilNS.Load() == 0 {
		t.Error("the pause was not published to Open")
	}
}

// A pause is counted from when the refused call returned, not from when the
// dispatcher got to its outcome: here the dispatcher is held (in Classify of
// another call's error) from before the refusal returns until well after, and
// the pause still ends the time asked after the refusal returned. Counted
// from the dispatcher's turn, it would end that much later than asked.
func TestActorPauseCountsFromTheRefusal(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const (
		pause = 100 * time.Millisecond
		held  = 50 * time.Millisecond // the dispatcher is late by at least this
	)
	errOther := errors.New("some other error")
	entered, release := make(chan struct{}), make(chan struct{})
	a := Start(ctx, "ads", Config{Slots: 2, Classify: func(err error) (time.Duration, bool) {
		if errors.Is(err, errOther) {
			close(entered)
			<-release // the dispatcher is busy elsewhere
		}
		return Delay(err)
	}})
	started := make(chan struct{}, 2)
	goB, goA := make(chan struct{}), make(chan struct{})
	var returned atomic.Int64 // when A's refusal returned (unix ns)
	var attempts atomic.Int32
	errs := make(chan error, 2)
	go func() {
		errs <- a.Do(ctx, func(context.Context, int) error {
			started <- struct{}{}
			<-goB
			return errOther
		})
	}()
	go func() {
		errs <- a.Do(ctx, func(context.Context, int) error {
			if attempts.Add(1) > 1 {
				return nil // tried again after the pause
			}
			started <- struct{}{}
			<-goA
			returned.Store(time.Now().UnixNano())
			return &Error{Endpoint: "ads", Delay: pause}
		})
	}()
	wait := func(ch <-chan struct{}, what string) {
		t.Helper()
		select {
		case <-ch:
		case <-time.After(10 * time.Second):
			t.Fatalf("timed out waiting for %s", what)
		}
	}
	wait(started, "the first call to start")
	wait(started, "the second call to start")
	close(goB)
	wait(entered, "the dispatcher to take the other error")
	close(goA)
	// A's outcome (with the time it returned) waits in the dispatcher's inbox.
	deadline := time.Now().Add(10 * time.Second)
	for len(a.finished) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("timed out waiting for the refusal's outcome")
		}
		runtime.Gosched()
	}
	time.Sleep(held) // the dispatcher is late: the test's point, not a wait for an event
	dispatcherAt := time.Now().UnixNano()
	close(release)
	for range 2 {
		select {
		case err := <-errs:
			if err != nil && !errors.Is(err, errOther) {
				t.Fatalf("a call failed: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("timed out waiting for the calls' answers")
		}
	}
	if n := attempts.Load(); n != 2 {
		t.Fatalf("the refused call ran %d times, want 2", n)
	}
	until := a.pausedUntilNS.Load()
	if from := until - int64(pause); from < returned.Load() || from >= dispatcherAt {
		t.Fatalf("the pause was counted from %v after the refusal returned (the dispatcher got to it %v after), want from its return",
			time.Duration(from-returned.Load()), time.Duration(dispatcherAt-returned.Load()))
	}
}
