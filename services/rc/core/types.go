package core

import (
	"sort"
	"strings"
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
// queue block.
type TableKind int

const (
	// TimePartitioned tables are split by label set and by time.
	TimePartitioned TableKind = iota
	// Sharded tables are split by label set only: one portion per label set.
	Sharded
	// Unsharded tables are one portion, served by any one DAP holding the table.
	Unsharded
)

func (k TableKind) String() string {
	switch k {
	case TimePartitioned:
		return "partitioned"
	case Sharded:
		return "sharded"
	case Unsharded:
		return "unsharded"
	}
	return "unknown"
}

// Labels is a DAP's label set, e.g. {region: eu}.
type Labels map[string]string

// labelKey is the canonical form of a label set ("k=v,k=v", keys sorted),
// used as a map key and in deterministic ordering.
type labelKey string

func (l Labels) key() labelKey {
	if len(l) == 0 {
		return ""
	}
	keys := make([]string, 0, len(l))
	for k := range l {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for i, k := range keys {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(k)
		b.WriteByte('=')
		b.WriteString(l[k])
	}
	return labelKey(b.String())
}

// String renders a label set as {k:v,k:v} with sorted keys, the form used in
// timeout messages.
func (l Labels) String() string {
	return "{" + strings.ReplaceAll(string(l.key()), "=", ":") + "}"
}

func (l Labels) clone() Labels {
	c := make(Labels, len(l))
	for k, v := range l {
		c[k] = v
	}
	return c
}

// Selector is a request's label selector: per key the accepted values. A key
// that is absent accepts every value; several keys give the cross product.
type Selector map[string][]string

// matches reports whether a DAP label set is selected.
func (s Selector) matches(l Labels) bool {
	for k, vals := range s {
		v, ok := l[k]
		if !ok {
			return false
		}
		found := false
		for _, want := range vals {
			if want == v {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}

// combinations lists the explicit cross product of the selector's keys, so
// that a combination that no DAP has can be reported by name.
func (s Selector) combinations() []Labels {
	keys := make([]string, 0, len(s))
	for k := range s {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	out := []Labels{{}}
	for _, k := range keys {
		var next []Labels
		for _, partial := range out {
			for _, v := range s[k] {
				c := partial.clone()
				c[k] = v
				next = append(next, c)
			}
		}
		out = next
	}
	return out
}

// subsetOf reports whether every pair of l is in super.
func (l Labels) subsetOf(super Labels) bool {
	for k, v := range l {
		if super[k] != v {
			return false
		}
	}
	return true
}

// formatTS renders a timestamp as in the seed's messages (nanosecond
// precision, UTC), with -inf and +inf for unbounded ends.
func formatTS(ts int64) string {
	switch ts {
	case MinTS:
		return "-inf"
	case MaxTS:
		return "+inf"
	}
	return time.Unix(0, ts).UTC().Format("2006-01-02T15:04:05.000000000Z")
}

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

// overlap is the intersection of [s1,e1) and [s2,e2); ok is false if empty.
func overlap(s1, e1, s2, e2 int64) (s, e int64, ok bool) {
	s, e = max(s1, s2), min(e1, e2)
	return s, e, s < e
}
