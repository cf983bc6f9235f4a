package live

import (
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// registerMetrics exposes the group's counters, labelled with its label set, until the
// returned function unregisters them (Run calls it on return, so a restarted group
// registers again).
func (g *Group) registerMetrics(reg prometheus.Registerer) (func(), error) {
	if reg == nil {
		return func() {}, nil
	}
	labels := prometheus.Labels{"labels": g.key}
	var cs []prometheus.Collector
	add := func(name, help string, v *atomic.Uint64) {
		cs = append(cs, prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help, ConstLabels: labels},
			func() float64 { return float64(v.Load()) }))
	}
	st := &g.stats
	add("sg_live_messages_total", "Live stream messages applied.", &st.Messages)
	add("sg_live_duplicates_total", "Live stream messages delivered again and recognised by their sequence.", &st.Duplicates)
	add("sg_live_rejected_total", "Live stream messages rejected (undecodable, unknown table, wrong schema or label set).", &st.Malformed)
	add("sg_live_rows_total", "Rows held by the rdb or idb from the live stream.", &st.Rows)
	add("sg_live_late_rows_total", "Rows rejected because their day was closed.", &st.LateRows)
	add("sg_live_late_rows_idb_total", "Rows that arrived after their interval closed, taken by the idb.", &st.LateInIDB)
	add("sg_live_replayed_total", "Live stream messages replayed at start.", &st.Replayed)
	add("sg_live_end_of_interval_total", "Ends of interval (rdb -> idb).", &st.EOIs)
	add("sg_live_end_of_day_total", "Ends of day (idb -> hdb Parquet).", &st.EODs)
	add("sg_live_reference_updates_total", "Reference data updates (each sets the reference vintage).", &st.ReferenceUpdates)
	var done []prometheus.Collector
	unregister := func() {
		for _, c := range done {
			reg.Unregister(c)
		}
	}
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			var are prometheus.AlreadyRegisteredError
			unregister()
			if errors.As(err, &are) {
				return nil, fmt.Errorf("live: metrics of %s are registered twice (two groups of one label set?): %w", g.key, err)
			}
			return nil, fmt.Errorf("live: metrics: %w", err)
		}
		done = append(done, c)
	}
	return unregister, nil
}
