package core

import (
	"fmt"
	"time"

	"github.com/sg-project/sg/messages"
)

// The timeout behaviours beyond the primary's own block: the incomplete
// message when secondaries stay silent, the Agg's own timeout, and a request
// that reaches the RC already past its deadline.

// TimeoutIncomplete: the primary gave up waiting for secondaries' status
// blocks; the shell logs the seed's debug line "Exhausted number of retries
// waiting for other RCs to report timeout (max=N), composing incomplete
// timeout message".
type TimeoutIncomplete struct {
	Request    string
	Max        int      // Config.MultiRCMaxWait
	Unreported []string // secondaries left "unknown"
}

func (TimeoutIncomplete) isCommand() {}

// TimeoutIncompleteText is the seed's log line for max.
func TimeoutIncompleteText(max int) string {
	return fmt.Sprintf("Exhausted number of retries waiting for other RCs to report timeout (max=%d), composing incomplete timeout message", max)
}

// AggTimedOut: the Agg's own execution of the request timed out (seed: "the
// DAP or Agg may respond to the RC and notify it of the timeout
// immediately"); it has not answered, so the RC times the request out now,
// even if its own clock has not reached the deadline yet.
type AggTimedOut struct {
	At      int64
	Request string
	Agg     string
}

func (e AggTimedOut) at() int64 { return e.At }

func (c *Core) aggTimedOut(e AggTimedOut) {
	r, ok := c.requests[e.Request]
	if !ok || r.timingOut || (e.Agg != "" && e.Agg != r.Agg) {
		return // answered, already timing out, or a superseded Agg's
	}
	c.timeout(r)
}

// arrivedLate answers a request that reached the RC at or after its
// deadline: the status says so and by how much, never "unknown" (which from
// a primary the seed calls a bug).
func (c *Core) arrivedLate(r *request) {
	c.stats.Timeouts++
	c.stats.ArrivedLate++
	b := blockFacts{rc: c.cfg.Addr, status: messages.StatusReceivedTooLate, late: time.Duration(c.now - r.Deadline)}
	c.reply(r, ReplyTimeout, "Request timed out, "+renderBlock(b))
}
