package rc

import (
	"strings"
	"time"

	"github.com/sg-project/sg/messages"
	"github.com/sg-project/sg/services/defaults"
	"github.com/sg-project/sg/services/rc/core"
)

// Agg liveness, as for DAPs: an Agg beats every IntervalMS (its heartbeat
// says so); silent for three periods, restarted (a new StartedAt) or
// stopping, it is lost, and the core drives its requests again on another.
// Only the configured Aggs (Config.AggIDs) are ever given work: a heartbeat
// from any other id is ignored.

// defaultAggHeartbeat is the Agg runtime's default heartbeat period.
const defaultAggHeartbeat = defaults.DAPHeartbeat

type aggRecord struct {
	lastSeen  time.Time
	interval  time.Duration
	startedAt int64
	dead      bool
}

func (r *RC) onAggHeartbeat(aggID string, data []byte, now time.Time) {
	hb, err := messages.DecodeValid[messages.AggHeartbeat](data)
	if err != nil || hb.AggID != aggID {
		r.metrics.badMessages.Inc()
		r.lim.Warn(&r.log, "bad_agg_heartbeat").Err(err).Str("agg", aggID).Msg("bad Agg heartbeat")
		return
	}
	rec := r.aggs[aggID]
	if rec == nil {
		r.log.Debug().Str("agg", aggID).Msg("heartbeat of an Agg this RC is not configured with")
		return
	}
	at := now.UnixNano()
	switch {
	case hb.Stopping:
		rec.startedAt = hb.StartedAt
		r.aggLost(aggID, rec, "stopped", at)
		return
	case rec.startedAt != 0 && hb.StartedAt != rec.startedAt && !rec.dead:
		// What it held died with its previous life.
		r.aggLost(aggID, rec, "restarted", at)
	}
	rec.startedAt, rec.lastSeen = hb.StartedAt, now
	if hb.IntervalMS > 0 {
		rec.interval = time.Duration(hb.IntervalMS) * time.Millisecond
		r.heardInterval(rec.interval)
	}
	if rec.dead {
		rec.dead = false
		r.log.Info().Str("agg", aggID).Msg("Agg alive")
		r.step(core.AggUp{At: at, Agg: aggID})
	}
}

func (r *RC) aggLost(aggID string, rec *aggRecord, why string, at int64) {
	if rec.dead {
		return
	}
	rec.dead = true
	r.metrics.aggsLost.Inc()
	r.log.Warn().Str("agg", aggID).Str("why", why).Msg("Agg lost")
	r.step(core.AggLost{At: at, Agg: aggID})
}

// checkAggs declares lost the Aggs silent for three heartbeat periods.
func (r *RC) checkAggs(now time.Time) {
	for _, id := range r.cfg.AggIDs {
		rec := r.aggs[id]
		if rec != nil && !rec.dead && now.Sub(rec.lastSeen) > 3*rec.interval {
			r.aggLost(id, rec, "missed heartbeats", now.UnixNano())
		}
	}
}

// aggOf returns the Agg id of an Agg heartbeat subject ("" otherwise).
func (r *RC) aggOf(subject string) string {
	rest, ok := strings.CutPrefix(subject, r.own.aggEventPrefix)
	if !ok {
		return ""
	}
	id, ok := strings.CutSuffix(rest, ".heartbeat")
	if !ok || strings.Contains(id, ".") {
		return ""
	}
	return id
}
