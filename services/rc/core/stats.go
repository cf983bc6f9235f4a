package core

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
	Replies                   [ReplyCancelled + 1]int
	Stale                     int
	Duplicates                int
	DAPsLost                  int
	Relayed                   int
	ComposeErrors             int
	IncompleteTimeoutMessages int
	Events                    int
}

// Stats returns the counters, with requests by status filled in.
func (c *Core) Stats() (Stats, map[Status]int) {
	by := map[Status]int{}
	for _, r := range c.requests {
		by[r.status()]++
	}
	return c.stats, by
}
