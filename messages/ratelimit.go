package messages

import (
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
)

// Headers of a THROTTLED portion: a DAP whose remote endpoint asked for a
// pause answers the portion with rc RATE_LIMITED and these, beside
// HdrRetryAfter (whole seconds, rounded up, for readers that know only it).
const (
	HdrRateLimitKey    = "Sg-Rate-Limit-Key" // endpoint key: every DAP that calls it pauses together
	HdrRetryAfterMS    = "Sg-Retry-After-Ms" // the pause asked, milliseconds (precise form of HdrRetryAfter)
	MaxRateLimitKeyLen = 200                 // bytes of an endpoint key
)

// SetThrottle writes the pause and the endpoint key of a THROTTLED answer.
func SetThrottle(h nats.Header, key string, delay time.Duration) {
	delay = max(delay, 0)
	SetString(h, HdrRateLimitKey, key)
	SetInt(h, HdrRetryAfterMS, delay.Milliseconds())
	SetInt(h, HdrRetryAfter, int64((delay+time.Second-1)/time.Second))
}

// ReadThrottle reads the pause and the endpoint key of a THROTTLED answer:
// Sg-Retry-After-Ms, else Sg-Retry-After; ok is false when neither is there.
// The pause is capped at maxDelay and the key's length is bounded (both come
// from the network).
func ReadThrottle(h nats.Header, maxDelay time.Duration) (key string, delay time.Duration, ok bool, err error) {
	key = h.Get(HdrRateLimitKey)
	if len(key) > MaxRateLimitKeyLen {
		return "", 0, false, &HeaderError{Key: HdrRateLimitKey, Value: key, Err: ErrBadHeader,
			Detail: fmt.Sprintf("longer than %d bytes", MaxRateLimitKeyLen)}
	}
	if ms, found, err := LookupUint(h, HdrRetryAfterMS); err != nil {
		return key, 0, false, err
	} else if found {
		return key, min(time.Duration(min(ms, uint64(maxDelay/time.Millisecond)))*time.Millisecond, maxDelay), true, nil
	}
	if s, found, err := LookupUint(h, HdrRetryAfter); err != nil {
		return key, 0, false, err
	} else if found {
		return key, min(time.Duration(min(s, uint64(maxDelay/time.Second)+1))*time.Second, maxDelay), true, nil
	}
	return key, 0, false, nil
}
