// Package ratelimit honours an endpoint's rate limits with one actor per
// endpoint key, after the seed "Actor pattern controlling connection pool ...
// to honor API rate limit exceptions".
//
// When an endpoint says "slow down for N seconds", every caller of that
// endpoint must pause together: callers that retry each on their own keep the
// others hammering the endpoint inside the pause, and an endpoint such as the
// seed's ad platform escalates its penalty (15 s towards 15 minutes) for each
// request it sees inside a pause. So every call to an endpoint goes through
// its Actor:
//
//  1. The caller puts its call into the actor's fan-in queue (Actor.Do, or
//     Call for a typed result) and waits for the answer, or for its context.
//  2. The actor's one dispatcher goroutine takes the next call only when the
//     endpoint is not paused and a slot of its bounded pool is free, and runs
//     it on that slot (the slot number lets a source keep one connection per
//     slot, as the seed's connection pool).
//  3. When a call fails with a rate-limit error (an *Error carrying the asked
//     delay, or whatever Config.Classify recognises), the actor pauses all
//     calls to the endpoint for the time asked; the largest asked so far wins.
//     The refused call is tried again first when the pause ends (up to
//     MaxAttempts). Any other error goes back to the caller untouched.
//  4. Other endpoints, with actors of their own, carry on meanwhile.
//
// No caller sleeps on its own: waiting is done by the one dispatcher, with one
// timer. A caller whose context ends leaves the queue at once.
//
// With Config.FailFast (and MaxAttempts 1), a call inside a pause is answered
// at once with an *Error carrying what is left of the pause: a DAP uses this
// to answer its portion THROTTLED, so that the RC can place it elsewhere
// rather than the DAP holding it (services/dap/throttle.go).
//
// A Registry holds one actor per endpoint key (bounded), all stopped by one
// context. Metrics (per endpoint key): sg_ratelimit_pauses_total,
// sg_ratelimit_paused_seconds_total, sg_ratelimit_escalations_total (an
// answer asking a longer pause than the one before).
//
// Throttle is a test endpoint that behaves like the seed's ad platform, with
// its time scaled down; throttle_test.go holds the proof that the actor keeps
// to the allowed rate with no escalation, where per-caller retry does not.
package ratelimit
