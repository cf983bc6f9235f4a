package rc

import "time"

// Warm-up. An RC that has just started does not yet know the fleet: without
// the DAP state stream it learns DAPs from their heartbeats, which come every
// DAP heartbeat period. Until its view is warm it holds requests rather than
// fail one for a table it has not yet seen ("No DAP serves table"). The view
// is warm when the state stream is replayed (Ready) and either one DAP
// heartbeat period has passed, or every DAP the replay named has been heard
// from live.

// maxEarly bounds the requests held during warm-up; more are handled at once.
const maxEarly = 10_000

// Warm is closed when the RC's fleet view is warm: it can serve.
func (r *RC) Warm() <-chan struct{} { return r.warmCh }

// startWarmUp runs once Ready: it notes the DAPs the replay named.
func (r *RC) startWarmUp(now time.Time) {
	r.warmUntil = now.Add(r.cfg.WarmUp)
	r.known = make(map[string]bool, len(r.daps))
	for id := range r.daps {
		r.known[id] = true
	}
	r.heard = map[string]bool{}
	r.checkWarm(now)
}

// onInput is the Run loop's entry for one message: during warm-up a
// submission is held; a DAP event counts as hearing from that DAP.
func (r *RC) onInput(in input) {
	if r.isWarm {
		r.handle(in)
		return
	}
	s := r.cfg.Subjects
	// A cancel is held too, behind the submission it cancels: order kept.
	if (in.subject == r.own.submit || in.subject == r.own.cancel) && len(r.early) < maxEarly {
		r.early = append(r.early, in)
		r.metrics.warmHeld.Inc()
		return
	}
	before := r.cfg.Now()
	r.handle(in)
	if dapID, _, ok := s.ParseDAPEvent(in.subject); ok {
		// Heard from: a valid event refreshed it (a malformed one does not count).
		if rec := r.daps[dapID]; rec != nil && !rec.lastSeen.Before(before) {
			r.heard[dapID] = true
		}
	}
	r.checkWarm(r.cfg.Now())
}

// checkWarm ends the warm-up when its condition holds, and hands the held
// requests to the core in their order of arrival.
func (r *RC) checkWarm(now time.Time) {
	if r.isWarm {
		return
	}
	allHeard := len(r.known) > 0
	for id := range r.known {
		if !r.heard[id] {
			allHeard = false
			break
		}
	}
	if !allHeard && now.Before(r.warmUntil) {
		return
	}
	r.isWarm = true
	close(r.warmCh)
	// GWs send only to a warm RC: tell them now, not at the next period.
	r.announce(false)
	r.log.Info().Int("daps", len(r.daps)).Int("held_requests", len(r.early)).Bool("all_known_heard", allHeard).
		Dur("after", now.Sub(r.started)).Msg("rc fleet view warm: serving")
	early := r.early
	r.early = nil
	for _, in := range early {
		r.handle(in)
	}
}
