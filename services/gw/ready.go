package gw

// Readiness. A GW takes requests as soon as its endpoints are registered
// (Ready), but it can serve only once it knows an RC whose fleet view is
// warm (the RC says so in its announcement, services/rc/warm.go). Until
// then it holds requests, each until its deadline, within MaxInFlight (see
// Config.StartupWait), and says it is not ready wherever operators look:
// $SRV.STATS (every endpoint's data), Readiness (the HTTP API's /v1/health
// in the same process, `sg run`, `sg gw`) and its log.

import "strconv"

// Readiness is whether the GW can serve now, and why not.
type Readiness struct {
	Ready   bool   `json:"ready"`
	RCs     int    `json:"rcs"`      // RCs that get new requests, warm or not
	WarmRCs int    `json:"warm_rcs"` // of those, warm and not draining: they serve
	Reason  string `json:"reason,omitempty"`
}

const reasonNoRC = "no RC known"

// readinessOf judges the RCs the core sends new requests to.
func readinessOf(list []RCInfo) Readiness {
	r := Readiness{RCs: len(list)}
	for _, rc := range list {
		if !rc.Warming && !rc.Draining {
			r.WarmRCs++
		}
	}
	switch {
	case r.WarmRCs > 0:
		r.Ready = true
	case r.RCs == 0:
		r.Reason = reasonNoRC
	default:
		r.Reason = strconv.Itoa(r.RCs) + " RC(s) known, none warm yet (warming or draining)"
	}
	return r
}

// Readiness reports whether the GW can serve now.
func (g *GW) Readiness() Readiness {
	g.rcMu.Lock()
	defer g.rcMu.Unlock()
	return g.readiness
}

// Serving is closed once the GW first knows a warm RC: it can serve. It
// stays closed if the RCs go later (Readiness says so).
func (g *GW) Serving() <-chan struct{} { return g.serving }

// setReadiness records r; the caller holds rcMu.
func (g *GW) setReadiness(r Readiness) {
	was := g.readiness
	g.readiness = r
	switch {
	case r.Ready && !was.Ready:
		select {
		case <-g.serving:
		default:
			close(g.serving)
		}
		g.log.Info().Int("warm_rcs", r.WarmRCs).Int("rcs", r.RCs).Msg("gw ready: an RC that can serve is known")
	case !r.Ready && was.Ready:
		g.log.Warn().Int("rcs", r.RCs).Str("reason", r.Reason).Msg("gw not ready: no RC can serve; holding requests until one can or they time out")
	}
}
