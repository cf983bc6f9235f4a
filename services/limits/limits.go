// Package limits names sg's admission limits, reads their values from the environment
// and estimates when a refused caller should come back.
//
// Over a limit the caller gets RATE_LIMITED (messages.CodeRateLimited) with a text that
// names the limit, the header Sg-Limit set to the limit's name and Sg-Retry-After to
// RetryAfter's estimate, in whole seconds. The defaults live in each service's
// config.go; the SG_ names are in the README's configuration table.
package limits

import (
	"fmt"
	"strconv"

	"github.com/sg-project/sg/services/retryafter"
)

// The limits, as named in Sg-Limit and in the refusal texts.
const (
	// RCQueued: portions queued at one RC (SG_RC_MAX_QUEUED).
	RCQueued = "rc_queued_portions"
	// CallerQueued: portions queued at one RC for one caller, as the GW names it in
	// Sg-Caller (SG_RC_MAX_QUEUED_PER_CALLER).
	CallerQueued = "caller_queued_portions"
	// DAPQueue: portions waiting for a slot at one DAP (SG_DAP_MAX_QUEUE).
	DAPQueue = "dap_queue"
	// AggRequestBytes: partial results one Agg holds for one request
	// (SG_AGG_MAX_REQUEST_BYTES); over it the answer is TOO_LARGE, since coming back
	// later cannot make the request smaller.
	AggRequestBytes = "agg_request_bytes"
	// AggHeldBytes: partial results one Agg holds for all requests together
	// (SG_AGG_MAX_BYTES).
	AggHeldBytes = "agg_held_bytes"
)

// RetryAfter is when a caller refused over a limit should come back, in whole seconds:
// backlog items ahead drained at rate items/s, by the seed's formula
// (retryafter.Queued: margin, ceiling, clamp to [p.Min, p.Max]; with a backlog and no
// rate, the backoff B(0)). The rate is the measured drain rate of the workers the
// caller waits for, or retryafter.NominalRate when nothing was measured: the same
// computation as an async job's Retry-After, so both say the same for the same facts.
func RetryAfter(backlog int, rate float64, p retryafter.Params) int {
	return retryafter.Queued(max(backlog, 0), rate, p)
}

// Int reads a limit from the environment: its value if name is set (a whole number of
// at least 1), else def. look is os.LookupEnv in production.
func Int(look func(string) (string, bool), name string, def int64) (int64, error) {
	s, ok := look(name)
	if !ok || s == "" {
		return def, nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 1 {
		return 0, fmt.Errorf("%s=%q: want a whole number >= 1", name, s)
	}
	return n, nil
}
