package messages

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

func TestThrottleHeaders(t *testing.T) {
	h := nats.Header{}
	SetThrottle(h, "ads.example.com", 1500*time.Millisecond)
	if h.Get(HdrRetryAfter) != "2" || h.Get(HdrRetryAfterMS) != "1500" {
		t.Fatalf("headers %v", h)
	}
	key, d, ok, err := ReadThrottle(h, time.Hour)
	if err != nil || !ok || key != "ads.example.com" || d != 1500*time.Millisecond {
		t.Fatalf("ReadThrottle = %q %v %v %v", key, d, ok, err)
	}
	// Seconds only; capped; absent; hostile.
	h = nats.Header{HdrRetryAfter: {"3"}}
	if _, d, ok, _ := ReadThrottle(h, time.Hour); !ok || d != 3*time.Second {
		t.Fatalf("seconds only: %v %v", d, ok)
	}
	h = nats.Header{HdrRetryAfterMS: {"18446744073709551615"}}
	if _, d, ok, _ := ReadThrottle(h, time.Minute); !ok || d != time.Minute {
		t.Fatalf("huge: %v %v", d, ok)
	}
	h = nats.Header{HdrRetryAfter: {"18446744073709551615"}}
	if _, d, ok, _ := ReadThrottle(h, time.Minute); !ok || d != time.Minute {
		t.Fatalf("huge seconds: %v %v", d, ok)
	}
	if _, _, ok, err := ReadThrottle(nats.Header{}, time.Minute); ok || err != nil {
		t.Fatalf("absent: %v %v", ok, err)
	}
	if _, _, _, err := ReadThrottle(nats.Header{HdrRetryAfterMS: {"-1"}}, time.Minute); !errors.Is(err, ErrBadHeader) {
		t.Fatalf("negative: %v", err)
	}
	if _, _, _, err := ReadThrottle(nats.Header{HdrRateLimitKey: {strings.Repeat("k", 201)}}, time.Minute); !errors.Is(err, ErrBadHeader) {
		t.Fatalf("long key: %v", err)
	}
}
