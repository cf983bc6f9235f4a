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

// Bounds of RetryAfter, in seconds.
const (
	MinRetryAfter = 1
	MaxRetryAfter = 60
)

// RetryAfter estimates, in whole seconds, when a caller refused over a limit should come
// back: the time for `slots` workers to drain `backlog` items at about one item per
// worker per second, within [MinRetryAfter, MaxRetryAfter]. It is the one place this is
// decided; a measured drain rate (seed: dynamic Retry-After) replaces the guess later.
func RetryAfter(backlog, slots int) int {
	if slots < 1 {
		slots = 1
	}
	s := (max(backlog, 0) + slots - 1) / slots
	return min(max(s, MinRetryAfter), MaxRetryAfter)
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
