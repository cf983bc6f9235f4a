package rc

import (
	"time"

	"github.com/nats-io/nats.go"
	"github.com/sg-project/sg/messages"
	"github.com/sg-project/sg/services/rc/core"
)

const (
	// throttleDefault is the pause when a THROTTLED completion does not say.
	throttleDefault = time.Second
	// throttleMax caps the pause a DAP asks for (it comes from the network).
	throttleMax = time.Hour
)

// throttled turns a THROTTLED completion (rc RATE_LIMITED: the DAP's remote
// endpoint asked for a pause, the portion did not run) into a
// core.DAPThrottled, timed from now; false for any other completion.
func (r *RC) throttled(c messages.PortionCompletion, h nats.Header, now time.Time) bool {
	if c.Outcome != messages.OutcomeError || c.Code != messages.CodeRateLimited {
		return false
	}
	log := r.reqLog(c.RequestID)
	key, delay, ok, err := messages.ReadThrottle(h, throttleMax)
	if err != nil {
		r.metrics.badMessages.Inc()
		r.lim.Warn(log, "bad_throttle_headers").Err(err).Str("dap", c.DAPID).Msg("THROTTLED completion with bad headers: pausing the DAP alone, for the default pause")
		key, ok = "", false
	}
	if !ok || delay <= 0 {
		delay = throttleDefault
	}
	until := now.Add(delay)
	// Any publisher can send THROTTLED completions, and a real throttle
	// storm answers many portions alike: logged within the limit.
	r.lim.Warn(log, "portion_throttled").Str("dap", c.DAPID).Uint64("portion", uint64(c.PortionID)).Str("endpoint", key).Time("until", until).
		Msg("portion throttled: pausing dispatch to the DAPs of the endpoint; the portion is requeued")
	if p := r.pending[c.RequestID]; p != nil && p.via != nil {
		delete(p.via, c.PortionID)
	}
	r.step(core.DAPThrottled{At: now.UnixNano(), Request: c.RequestID, Portion: c.PortionID, DAP: c.DAPID, Endpoint: key, Until: until.UnixNano()})
	return true
}
