package core

import (
	"time"

	"github.com/sg-project/sg/messages"
)

// Timestamps in the core are Unix nanoseconds. MinTS and MaxTS stand for an
// unbounded purview end (the seed's -0Wp and 0Wp); messages is their home.
const (
	MinTS = messages.TSMin
	MaxTS = messages.TSMax
)

// Tier is the storage tier of a DAP: messages.Tier, its one home.
type Tier = messages.Tier

// The tiers of the seed: recent, intraday and historical data.
const (
	TierRDB = messages.TierRDB
	TierIDB = messages.TierIDB
	TierHDB = messages.TierHDB
)

// TableKind says how a table is routed; it selects the seed's three forms of
// queue block: messages.TableKind, its one home.
type TableKind = messages.TableKind

const (
	// TimePartitioned tables are split by label set and by time.
	TimePartitioned = messages.TablePartitioned
	// Sharded tables are split by label set only: one portion per label set.
	Sharded = messages.TableSharded
	// Unsharded tables are one portion, served by any one DAP holding the table.
	Unsharded = messages.TableUnsharded
)

// Labels is a DAP's or a portion's label set, e.g. {region: eu}:
// messages.LabelSet, its one home (String is the {k:v} form of timeout
// messages).
type Labels = messages.LabelSet

// labelKey is the canonical form of a label set (messages.LabelSet.Key),
// used as a map key and in deterministic ordering.
type labelKey string

func keyOf(l Labels) labelKey { return labelKey(l.Key()) }

// Selector is a request's label selector: per key the accepted values
// (messages.LabelSelector, its one home; Selects and Combinations are what
// the core asks of it).
type Selector = messages.LabelSelector

// formatTS renders a timestamp as in the seed's messages: messages.FormatTS
// (nanosecond precision, UTC, -inf and +inf for unbounded ends).
var formatTS = messages.FormatTS

// utcDay is the UTC date of a timestamp, as a day number; SQL requests retry
// when it rolls over.
func utcDay(ts int64) int64 {
	const day = int64(24 * time.Hour)
	d := ts / day
	if ts%day < 0 {
		d--
	}
	return d
}

// PortionID numbers a portion within its request: messages.PortionID, its
// one home (the wire carries it as it is, in its decimal form).
type PortionID = messages.PortionID

// PortionRef names one attempt of one portion, as the Agg is told of it:
// messages.PortionRef, its one home.
type PortionRef = messages.PortionRef

// TimeRange is a time range [Start, End) with its open ends (MinTS, MaxTS):
// messages.TimeRange, its one home (Intersect and Valid are what the core
// asks of it).
type TimeRange = messages.TimeRange
