package core

import (
	"strings"
	"testing"
	"time"

	"github.com/sg-project/sg/services/defaults"
)

// TestNoRetryMeansNone: defaults.NoRetry (a user's SG_MAX_RETRY=0) fails a
// request at its first retry; it is never turned into the default of 3.
func TestNoRetryMeansNone(t *testing.T) {
	h := newHarness(t, Config{MaxRetry: defaults.NoRetry})
	h.register("rdb-eu", lbl("region", "eu"))
	d := dispatchedTo(t, h.request("q1", "trade", nil, t0, t0+hour, time.Minute), "rdb-eu")
	h.advance(time.Second)
	rep := only[Reply](t, h.complete(d, OutcomeRetry))
	if rep.Kind != ReplyMaxRetries || !strings.Contains(rep.Text, "(maximum 0") {
		t.Fatalf("reply %+v", rep)
	}
}
