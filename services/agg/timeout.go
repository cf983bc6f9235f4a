package agg

import (
	"time"

	"github.com/sg-project/sg/messages"
)

// tellTimedOut tells the RC that this Agg's execution of the request timed
// out and that it did not answer (seed: "the DAP or Agg may respond to the
// RC and notify it of the timeout immediately"): the RC then answers the
// caller with its timeout message at once.
func (a *Agg) tellTimedOut(e *messages.AggExpectation, what string, now time.Time) {
	if e == nil || e.RCID == "" {
		return
	}
	late := time.Duration(now.UnixNano() - e.Deadline)
	st := messages.Errorf(messages.CodeTimeout, messages.CodeErr, "Agg %s: %s, %s after the deadline", a.cfg.ID, what, late.Round(time.Millisecond))
	a.dones.add(e.RCID, messages.AggDoneEntry{RequestID: e.RequestID, Status: st, TimedOut: true}, true)
}
