package messages

import "fmt"

// LiveVersion is the version of the live update message.
const LiveVersion = 1

// maxLiveRows bounds one update; a publisher splits larger batches.
const maxLiveRows = 1 << 20

// LiveUpdate is one message on the live stream (subjects.Live): rows of one table for one
// label set. For a time-partitioned table the rows are appended (each in the tier whose
// purview holds its time); for a reference table (no time column) they are upserted by
// their first column, and the message's stream position becomes the label set's
// reference vintage (seed: "on each reference data update, the DAP sends its latest
// stream position"). Columns are matched to the DAP's table by name; an int column may
// feed a float one and a string column a symbol one.
type LiveUpdate struct {
	V     uint8  `msgpack:"v"`
	Table string `msgpack:"table"`
	Rows  Table  `msgpack:"rows"`
}

// Validate checks the version, table name and rows.
func (m *LiveUpdate) Validate() error {
	const typ = "live update"
	if err := checkVersion(typ, m.V, LiveVersion); err != nil {
		return err
	}
	if err := validateText(typ, "table", m.Table, maxLabelLen); err != nil || m.Table == "" {
		return invalid(typ, "table %.32q: want a non-empty name", m.Table)
	}
	if err := m.Rows.Validate(); err != nil {
		return fmt.Errorf("%w: %s rows: %v", ErrInvalid, typ, err)
	}
	if n := m.Rows.NumRows(); n > maxLiveRows {
		return invalid(typ, "%d rows, max %d", n, maxLiveRows)
	}
	return nil
}

// A live update carries up to maxLiveRows rows, each string row a value.
func (*LiveUpdate) decodeLimits() Limits { return PayloadLimits }
