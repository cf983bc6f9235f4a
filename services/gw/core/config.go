package core

import (
	"time"

	"github.com/sg-project/sg/services/defaults"
)

// Config of a Core. Durations are nanoseconds; the shell fills every field
// (gw.Config holds the defaults).
type Config struct {
	Self        string // this GW's id
	Incarnation int64  // this GW's start time: its entries' GWStarted
	Start       int64  // when the GW started serving, unix ns (for StartupWait)

	TimeoutMargin int64  // after a deadline, how long to wait for the RC's own timeout
	Affinity      string // "hard" or "soft"
	StartupWait   int64  // how long an early request waits for a first RC
	// HoldUntilReady: until some RC has announced itself warm (the GW is
	// ready), a request waits for one until its deadline rather than
	// failing "No resources connected" after StartupWait.
	HoldUntilReady bool
	AnnounceEvery  int64 // expected RC announcement period
	DeadAfter      int64 // an RC silent this long is dead: its requests are driven again

	MaxInFlight          int
	MaxInFlightPerCaller int
	MaxAnswerBytes       int64
	// MaxHeldBytes bounds the answers' bytes the core holds, all requests
	// together: the chunks it reassembles (an answer above the max payload
	// for a caller that takes no chunks), and the chunks and frames of
	// answers passed on as they come that wait for `answered`. Past it the
	// answer that would pass it ends: one reassembled RATE_LIMITED, one
	// passed on broken (its caller gets the end message, never a cut
	// answer).
	MaxHeldBytes int64
	// MaxPayload is the NATS max payload: a chunked answer whose chunks fit
	// it with the caller's ids in their headers is passed on chunk by chunk
	// as it comes (0: never, every chunked answer is reassembled first).
	MaxPayload int64
	RetryAfter int // seconds, on a refusal over an in-flight limit

	// Logged: a request log is kept (every accepted request is written
	// before it is submitted, and `answered` before it is answered).
	Logged bool
	// CreateAfter: how long a logged request runs before its entry is
	// written. An answer (or a cancel) that comes first is sent with no log
	// write at all: nothing is in the log, so nobody else can answer it.
	// 0: the create goes out with the first drive. A GW that dies before
	// the create lands promised nothing (the caller's own timeout fires):
	// CreateAfter widens that window from the create's round trip to this.
	CreateAfter int64
	// LogRetry: after a failed log write, when to write again.
	LogRetry int64
	// LogSubject is the log subject of request id of GW gw.
	LogSubject func(gw, id string) string
	// AnswerSubject is where the drives of request id of GW gw answer.
	AnswerSubject func(gw, id string) string
}

// Scope affinity (seed: KXI_SCOPE_AFFINITY).
const (
	AffinityHard = "hard"
	AffinitySoft = "soft"
)

// announceMisses: an RC not heard from for this many periods gets no new
// requests.
const announceMisses = 3

func (c Config) withDefaults() Config {
	if c.Affinity == "" {
		c.Affinity = AffinityHard
	}
	if c.AnnounceEvery <= 0 {
		c.AnnounceEvery = int64(defaults.AnnounceEvery)
	}
	if c.DeadAfter <= 0 {
		c.DeadAfter = max(defaults.DeadAnnouncements*c.AnnounceEvery, int64(defaults.DeadAfterLeast))
	}
	if c.MaxInFlight <= 0 {
		c.MaxInFlight = defaults.GWMaxInFlight
	}
	if c.MaxInFlightPerCaller <= 0 {
		c.MaxInFlightPerCaller = c.MaxInFlight
	}
	if c.MaxAnswerBytes <= 0 {
		c.MaxAnswerBytes = defaults.MaxAnswerBytes
	}
	if c.MaxHeldBytes <= 0 {
		c.MaxHeldBytes = defaults.GWHeldAnswers * c.MaxAnswerBytes
	}
	if c.RetryAfter <= 0 {
		c.RetryAfter = int(defaults.RetryMin / time.Second)
	}
	if c.LogRetry <= 0 {
		c.LogRetry = int64(defaults.RequestLogRetry)
	}
	if c.LogSubject == nil {
		c.LogSubject = func(gw, id string) string { return "log.req." + gw + "." + id }
	}
	if c.AnswerSubject == nil {
		c.AnswerSubject = func(gw, id string) string { return "gw." + gw + ".answer." + id }
	}
	return c
}
