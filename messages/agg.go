package messages

import "time"

// Agg events for RCs: the heartbeat by which an RC knows an Agg is alive.
// An RC gives requests only to Aggs it hears from, and drives the requests
// of an Agg that falls silent, restarts or stops again on another.

// AggVersion is the version of the Agg event messages.
const AggVersion = 1

// MaxHeartbeat bounds the period a DAP or an Agg may announce (their
// configurations too): a larger one would keep a dead one alive in the RCs'
// view for hours, and past 2^63 ns it no longer fits a time.Duration.
const MaxHeartbeat = time.Hour

// maxHeartbeatMS is MaxHeartbeat as a heartbeat's IntervalMS.
const maxHeartbeatMS = int64(MaxHeartbeat / time.Millisecond)

// AggHeartbeat is sent by an Agg on subjects.AggHeartbeat(id) when it starts,
// every IntervalMS, and once more with Stopping when it stops. An RC that
// misses several declares the Agg lost; a new StartedAt means the Agg
// restarted and lost what it held.
type AggHeartbeat struct {
	V          uint8  `msgpack:"v"`
	AggID      string `msgpack:"agg"`
	Seq        uint64 `msgpack:"seq"`     // +1 per heartbeat; a restart starts again at 1
	SentAt     int64  `msgpack:"at"`      // unix nanoseconds, for lag metrics only
	StartedAt  int64  `msgpack:"started"` // unix nanoseconds: a new value means a restart
	IntervalMS int64  `msgpack:"ivms"`    // period until the next heartbeat, so watchers need no config
	Pending    int    `msgpack:"pending"` // requests held now
	HeldBytes  int64  `msgpack:"bytes"`   // bytes of partial results held now
	Stopping   bool   `msgpack:"stop,omitempty"`
}

// Validate checks the heartbeat.
func (m *AggHeartbeat) Validate() error {
	const typ = "Agg heartbeat"
	if err := checkVersion(typ, m.V, AggVersion); err != nil {
		return err
	}
	if err := validateID(typ, "Agg id", m.AggID); err != nil {
		return err
	}
	if m.IntervalMS < 0 || m.IntervalMS > maxHeartbeatMS {
		return invalid(typ, "interval %d ms: want 0..%d", m.IntervalMS, maxHeartbeatMS)
	}
	if m.Pending < 0 || m.HeldBytes < 0 {
		return invalid(typ, "negative load (pending %d, bytes %d)", m.Pending, m.HeldBytes)
	}
	return nil
}
