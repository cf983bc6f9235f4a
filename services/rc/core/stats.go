package core

import "sort"

// Stats are the counters and gauges the shell exports as metrics.
type Stats struct {
	// QueueLength is the number of queued items (kxi_rc_queue_length).
	QueueLength int
	Arrived     int
	Ended       int
	Dispatched  int
	// Decisions counts dequeue decisions (an item chosen for a DAP).
	Decisions int
	Retries   int
	Timeouts  int
	// Replies counts the RC's own answers by kind.
	Replies    [ReplyInternal + 1]int
	Stale      int
	Duplicates int
	DAPsLost   int
	Relayed    int
	// Cancels counts CancelDAP and CancelPeer commands (DAPs and
	// secondaries told to stop an ended request's portions).
	Cancels int
	// AggsLost counts Aggs declared lost; Redriven the requests moved to
	// another Agg because of it.
	AggsLost int
	Redriven int
	// Refused counts requests refused over a queue limit at admission.
	Refused int
	// RefusalsAccepted counts the DAPs' and Aggs' refusals that ended their
	// request; RefusalsForwarded those of relayed portions passed to their
	// primary RC; RefusalsDropped the forged or stale ones, which changed
	// nothing.
	RefusalsAccepted          int
	RefusalsForwarded         int
	RefusalsDropped           int
	ComposeErrors             int
	IncompleteTimeoutMessages int
	// ArrivedLate: requests that reached the RC at or after their deadline.
	ArrivedLate int
	Events      int
	// RememberedLabelSets is the (table, label set) pairs whose DAPs all left
	// within the retention: requests that select them wait for a DAP
	// (Config.LabelSetRetention). A gauge, filled in by Stats.
	RememberedLabelSets int
}

// Stats returns the counters, with requests by status filled in.
func (c *Core) Stats() (Stats, map[Status]int) {
	by := map[Status]int{}
	for _, r := range c.requests {
		by[r.status()]++
	}
	st := c.stats
	st.RememberedLabelSets = c.fleet.pastN
	return st, by
}

// LabelKeys returns the label keys of the fleet's label sets: those of the
// DAPs registered now and those of the label sets remembered after their
// DAPs left (past.go), so that a SQL condition on a label whose DAPs are all
// away still plans as a label selector, as split plans the label set.
func (c *Core) LabelKeys() map[string]bool {
	keys := map[string]bool{}
	for _, d := range c.fleet.byID {
		for k := range d.Labels {
			keys[k] = true
		}
	}
	for _, pt := range c.fleet.past {
		for _, ps := range pt.sets {
			for k := range ps.labels {
				keys[k] = true
			}
		}
	}
	return keys
}

// DAPs returns the fleet as this core sees it, sorted by id (getMeta).
func (c *Core) DAPs() []DAPInfo {
	out := make([]DAPInfo, 0, len(c.fleet.byID))
	for _, d := range c.fleet.byID {
		info := d.DAPInfo
		info.Labels = d.Labels.Clone()
		out = append(out, info)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// Running is how many portions this core knows a DAP to be running.
func (c *Core) Running(dapID string) int {
	if d := c.fleet.byID[dapID]; d != nil {
		return len(d.running)
	}
	return 0
}
