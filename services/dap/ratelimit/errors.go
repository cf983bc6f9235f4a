package ratelimit

import (
	"errors"
	"fmt"
	"time"
)

// Sentinel errors, wrapped with %w.
var (
	// ErrRateLimited is matched (errors.Is) by every *Error: the endpoint asked for a pause.
	ErrRateLimited = errors.New("rate limited")
	// ErrStopped: the actor's context ended before the call was answered.
	ErrStopped = errors.New("rate-limit actor stopped")
	// ErrTooManyEndpoints: a Registry already holds MaxEndpoints actors.
	ErrTooManyEndpoints = errors.New("too many rate-limited endpoints")
	// ErrBadKey: an endpoint key that is empty or longer than MaxKeyLen.
	ErrBadKey = errors.New("bad endpoint key")
)

// Error is the typed rate-limit error: a call to an endpoint failed because
// the endpoint asked for a pause of Delay (the seed's "rate limit exception"
// whose delayError is not null). A source returns it, or wraps it, so that the
// actor can pause every call to that endpoint together.
type Error struct {
	Endpoint string        // endpoint key, if the source knows it
	Delay    time.Duration // the pause asked; <= 0 means "not said" (the actor uses MinPause)
	Err      error         // the endpoint's own error, if any
}

func (e *Error) Error() string {
	s := fmt.Sprintf("rate limited: pause %s", e.Delay)
	if e.Endpoint != "" {
		s = fmt.Sprintf("endpoint %s: %s", e.Endpoint, s)
	}
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

// Unwrap returns the endpoint's own error.
func (e *Error) Unwrap() error { return e.Err }

// Is makes errors.Is(err, ErrRateLimited) true for every *Error.
func (e *Error) Is(target error) bool { return target == ErrRateLimited }

// Delay reports the pause a rate-limit error asks for: ok is false when err is
// not (and does not wrap) an *Error. It is the default Config.Classify.
func Delay(err error) (d time.Duration, ok bool) {
	var e *Error
	if errors.As(err, &e) {
		return e.Delay, true
	}
	return 0, false
}
