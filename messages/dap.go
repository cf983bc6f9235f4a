package messages

// DAP events: registration, status update, vintage update, heartbeat, loss,
// and the full state kept last-per-DAP in JetStream. Seed: "At registration
// and after each end-of-interval or end-of-day event, the DAP sends an
// increment value [purview version]"; "At registration and on each reference
// data update, the DAP sends its latest stream position [reference vintage]".

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/sg-project/sg/subjects"
)

// DAPVersion is the version of every DAP event message.
const DAPVersion = 1

// Tier is the kind of data a DAP holds.
type Tier string

const (
	TierRDB Tier = "rdb" // real-time: the most recent data
	TierIDB Tier = "idb" // intraday
	TierHDB Tier = "hdb" // history
)

// Valid reports whether t is one of the three tiers.
func (t Tier) Valid() bool { return t == TierRDB || t == TierIDB || t == TierHDB }

// Unbounded ends of a purview or time range, in unix nanoseconds. They are
// the q infinities -0Wp and 0Wp: the extreme int64 values, so that plain
// integer comparison orders them correctly and no flag is needed.
const (
	TSMin int64 = math.MinInt64 // -0Wp: unbounded start
	TSMax int64 = math.MaxInt64 // 0Wp: unbounded end
)

// TimeRange is a half-open interval [Start, End) of unix nanoseconds; Start
// may be TSMin and End TSMax. It is a DAP's temporal purview, or the time
// range of a portion.
type TimeRange struct {
	Start int64 `msgpack:"s" json:"start"`
	End   int64 `msgpack:"e" json:"end"`
}

// Unbounded is the range (-0Wp, 0Wp): a DAP or request with no time limits.
var Unbounded = TimeRange{Start: TSMin, End: TSMax}

// Valid reports whether Start < End.
func (r TimeRange) Valid() bool { return r.Start < r.End }

// Contains reports whether t is in [Start, End).
func (r TimeRange) Contains(t int64) bool { return r.Start <= t && t < r.End }

// Intersect returns the intersection of r and o; ok is false when it is empty.
func (r TimeRange) Intersect(o TimeRange) (TimeRange, bool) {
	x := TimeRange{Start: max(r.Start, o.Start), End: min(r.End, o.End)}
	return x, x.Valid()
}

// TimeRangeOf is [start, end) in the form getData's arguments and the engines
// give it (time.Time, the zero time an open end) as a TimeRange: an open end
// is TSMin or TSMax, and a time int64 nanoseconds cannot hold is clamped to
// the nearest (UnixNanos).
func TimeRangeOf(start, end time.Time) TimeRange {
	r := Unbounded
	if !start.IsZero() {
		r.Start = UnixNanos(start)
	}
	if !end.IsZero() {
		r.End = UnixNanos(end)
	}
	return r
}

// Times is r in the time.Time form, TimeRangeOf's inverse: TSMin and TSMax
// are the zero time.
func (r TimeRange) Times() (start, end time.Time) {
	if r.Start != TSMin {
		start = time.Unix(0, r.Start).UTC()
	}
	if r.End != TSMax {
		end = time.Unix(0, r.End).UTC()
	}
	return start, end
}

var (
	minTime = time.Unix(0, TSMin)
	maxTime = time.Unix(0, TSMax)
)

// UnixNanos is t in unix nanoseconds, clamped to [TSMin, TSMax]: t.UnixNano
// is undefined before 1678 and after 2262, dates a caller may well send.
func UnixNanos(t time.Time) int64 {
	switch {
	case t.Before(minTime):
		return TSMin
	case t.After(maxTime):
		return TSMax
	}
	return t.UnixNano()
}

// String is the range as logs and messages to callers show it (FormatTS).
func (r TimeRange) String() string {
	return "[" + FormatTS(r.Start) + ";" + FormatTS(r.End) + ")"
}

// FormatTS renders a timestamp (Unix nanoseconds) as every message and log
// line of sg shows one: RFC 3339 UTC with nanoseconds, and -inf and +inf for
// the open ends TSMin and TSMax (the seed's -0Wp and 0Wp: README, Timeouts).
func FormatTS(ts int64) string {
	switch ts {
	case TSMin:
		return "-inf"
	case TSMax:
		return "+inf"
	}
	return time.Unix(0, ts).UTC().Format("2006-01-02T15:04:05.000000000Z")
}

// LabelSet is the labels of a DAP or of a portion, e.g. {"region": "eu"}.
type LabelSet map[string]string

// Key is a canonical form of the label set ("k1=v1,k2=v2", keys sorted), so
// that equal label sets compare and index equal.
func (l LabelSet) Key() string {
	if len(l) == 0 {
		return ""
	}
	keys := make([]string, 0, len(l))
	for k := range l {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var b strings.Builder
	for i, k := range keys {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(k)
		b.WriteByte('=')
		b.WriteString(l[k])
	}
	return b.String()
}

// String renders the label set as {k1:v1,k2:v2}, keys sorted: the form the
// RC's timeout messages print (label keys hold no ',' or '=', see
// validateLabels).
func (l LabelSet) String() string {
	return "{" + strings.ReplaceAll(l.Key(), "=", ":") + "}"
}

// Clone is a copy of the label set (an empty one for nil).
func (l LabelSet) Clone() LabelSet {
	c := make(LabelSet, len(l))
	for k, v := range l {
		c[k] = v
	}
	return c
}

// SubsetOf reports whether every label of l is in super.
func (l LabelSet) SubsetOf(super LabelSet) bool {
	for k, v := range l {
		if w, ok := super[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// Equal reports whether l and o hold the same labels.
func (l LabelSet) Equal(o LabelSet) bool {
	if len(l) != len(o) {
		return false
	}
	for k, v := range l {
		if w, ok := o[k]; !ok || w != v {
			return false
		}
	}
	return true
}

const (
	maxLabels     = 64
	maxLabelLen   = 256
	maxTables     = 4096
	maxReasonLen  = 1024
	maxAddrLen    = 256
	maxDAPRunning = 1 << 16
)

func validateLabels(typ string, l LabelSet) error {
	if len(l) > maxLabels {
		return invalid(typ, "%d labels, max %d", len(l), maxLabels)
	}
	for k, v := range l {
		if k == "" {
			return invalid(typ, "empty label key")
		}
		if len(k) > maxLabelLen || len(v) > maxLabelLen || !utf8.ValidString(k) || !utf8.ValidString(v) {
			return invalid(typ, "label %.32q: key and value must be UTF-8 of at most %d bytes", k, maxLabelLen)
		}
		// Keys appear in the seed's timeout message as `k1`k2!`v1`v2: keep them printable.
		if strings.ContainsAny(k, ",=") {
			return invalid(typ, "label key %q contains ',' or '='", k)
		}
	}
	return nil
}

func validateID(typ, what, id string) error {
	if err := subjects.Validate(what, id); err != nil {
		return fmt.Errorf("%w: %s: %v", ErrInvalid, typ, err)
	}
	return nil
}

func validateOptionalID(typ, what, id string) error {
	if id == "" {
		return nil
	}
	return validateID(typ, what, id)
}

func validateText(typ, what, s string, maxLen int) error {
	if len(s) > maxLen || !utf8.ValidString(s) {
		return invalid(typ, "%s must be UTF-8 of at most %d bytes", what, maxLen)
	}
	return nil
}

// DAPRegistration is sent by a DAP when it connects, and again whenever an RC
// asks (e.g. after an RC restart). It is the full description of the DAP.
type DAPRegistration struct {
	V                uint8       `msgpack:"v"`
	DAPID            string      `msgpack:"dap"`
	RCID             string      `msgpack:"rc,omitempty"`   // the RC that owns this DAP; "" = any RC may use it
	Addr             string      `msgpack:"addr,omitempty"` // host:port, shown in timeout messages (dap=...)
	Assembly         string      `msgpack:"asm,omitempty"`  // assembly the DAP belongs to; "" = none
	Labels           LabelSet    `msgpack:"labels"`
	Tier             Tier        `msgpack:"tier"`
	Purview          TimeRange   `msgpack:"purview"` // temporal purview [start, end); TSMin/TSMax = unbounded
	Tables           []TableInfo `msgpack:"tables"`
	PurviewVersion   uint64      `msgpack:"pv"`
	ReferenceVintage uint64      `msgpack:"rv"`
	Available        bool        `msgpack:"avail"`
	Concurrency      int         `msgpack:"conc"` // portions it runs at once; at least 1
}

// Validate checks the registration.
func (m *DAPRegistration) Validate() error {
	const typ = "DAP registration"
	if err := checkVersion(typ, m.V, DAPVersion); err != nil {
		return err
	}
	if err := validateID(typ, "DAP id", m.DAPID); err != nil {
		return err
	}
	if err := validateOptionalID(typ, "RC id", m.RCID); err != nil {
		return err
	}
	if err := validateOptionalID(typ, "assembly", m.Assembly); err != nil {
		return err
	}
	if err := validateText(typ, "addr", m.Addr, maxAddrLen); err != nil {
		return err
	}
	if err := validateLabels(typ, m.Labels); err != nil {
		return err
	}
	if !m.Tier.Valid() {
		return invalid(typ, "tier %q: want rdb, idb or hdb", truncate(string(m.Tier), 16))
	}
	if !m.Purview.Valid() {
		return invalid(typ, "purview %s is empty (start must be before end)", m.Purview)
	}
	if len(m.Tables) > maxTables {
		return invalid(typ, "%d tables, max %d", len(m.Tables), maxTables)
	}
	for _, t := range m.Tables {
		if t.Name == "" || len(t.Name) > maxLabelLen || !utf8.ValidString(t.Name) {
			return invalid(typ, "table name %.32q: want non-empty UTF-8 of at most %d bytes", t.Name, maxLabelLen)
		}
		if !t.Kind.Valid() {
			return invalid(typ, "table %q kind %q: want partitioned, sharded or unsharded", t.Name, truncate(string(t.Kind), 16))
		}
	}
	if m.Concurrency < 1 || m.Concurrency > maxDAPRunning {
		return invalid(typ, "concurrency %d: want 1..%d", m.Concurrency, maxDAPRunning)
	}
	return nil
}

// TableKind says how a table is routed (seed: Routing - Table): split by
// label set and time, by label set only, or not at all.
type TableKind string

const (
	TablePartitioned TableKind = "partitioned" // e.g. trade, quote: split by label set and time
	TableSharded     TableKind = "sharded"     // one portion per label set, no time split
	TableUnsharded   TableKind = "unsharded"   // one portion, any one DAP that holds the table
)

// Valid reports whether k is one of the three kinds.
func (k TableKind) Valid() bool {
	return k == TablePartitioned || k == TableSharded || k == TableUnsharded
}

// TableInfo is a table a DAP serves.
type TableInfo struct {
	Name string    `msgpack:"name" json:"name"`
	Kind TableKind `msgpack:"kind" json:"kind"`
	// Columns is the table's schema, when the DAP's source knows it
	// (getMeta shows it).
	Columns []ColumnSpec `msgpack:"columns,omitempty" json:"columns,omitempty"`
}

// DAPStatusUpdate is sent when availability or purview changes: end of
// interval or day, log replay, or a DAP going busy for maintenance. It
// carries the whole of what can change, so the RC needs no merge logic.
type DAPStatusUpdate struct {
	V              uint8     `msgpack:"v"`
	DAPID          string    `msgpack:"dap"`
	Available      bool      `msgpack:"avail"`
	Reason         string    `msgpack:"reason,omitempty"` // why unavailable, for logs
	Purview        TimeRange `msgpack:"purview"`
	PurviewVersion uint64    `msgpack:"pv"`
	Running        int       `msgpack:"running"` // portions executing now
}

// Validate checks the status update.
func (m *DAPStatusUpdate) Validate() error {
	const typ = "DAP status update"
	if err := checkVersion(typ, m.V, DAPVersion); err != nil {
		return err
	}
	if err := validateID(typ, "DAP id", m.DAPID); err != nil {
		return err
	}
	if err := validateText(typ, "reason", m.Reason, maxReasonLen); err != nil {
		return err
	}
	if !m.Purview.Valid() {
		return invalid(typ, "purview %s is empty (start must be before end)", m.Purview)
	}
	if m.Running < 0 || m.Running > maxDAPRunning {
		return invalid(typ, "running %d: want 0..%d", m.Running, maxDAPRunning)
	}
	return nil
}

// DAPVintageUpdate is sent on each reference data update.
type DAPVintageUpdate struct {
	V                uint8  `msgpack:"v"`
	DAPID            string `msgpack:"dap"`
	ReferenceVintage uint64 `msgpack:"rv"`
}

// Validate checks the vintage update.
func (m *DAPVintageUpdate) Validate() error {
	const typ = "DAP vintage update"
	if err := checkVersion(typ, m.V, DAPVersion); err != nil {
		return err
	}
	return validateID(typ, "DAP id", m.DAPID)
}

// DAPHeartbeat is sent periodically; an RC that misses several declares the
// DAP lost. The versions let an RC that missed an update notice it.
type DAPHeartbeat struct {
	V                uint8  `msgpack:"v"`
	DAPID            string `msgpack:"dap"`
	Seq              uint64 `msgpack:"seq"`  // +1 per heartbeat; a restart starts again at 1
	SentAt           int64  `msgpack:"at"`   // unix nanoseconds, for lag metrics only
	Running          int    `msgpack:"run"`  // portions executing now
	PurviewVersion   uint64 `msgpack:"pv"`   // current, so a missed status update is noticed
	ReferenceVintage uint64 `msgpack:"rv"`   // current, so a missed vintage update is noticed
	IntervalMS       int64  `msgpack:"ivms"` // period until the next heartbeat, so watchers need no config
	// Registration is the DAP's current registration, so that an RC that
	// dropped the DAP (missed heartbeats, a restart) takes it back at once.
	Registration *DAPRegistration `msgpack:"reg,omitempty"`
}

// Validate checks the heartbeat.
func (m *DAPHeartbeat) Validate() error {
	const typ = "DAP heartbeat"
	if err := checkVersion(typ, m.V, DAPVersion); err != nil {
		return err
	}
	if err := validateID(typ, "DAP id", m.DAPID); err != nil {
		return err
	}
	if m.Running < 0 || m.Running > maxDAPRunning {
		return invalid(typ, "running %d: want 0..%d", m.Running, maxDAPRunning)
	}
	if m.IntervalMS < 0 || m.IntervalMS > maxHeartbeatMS {
		return invalid(typ, "interval %d ms: want 0..%d", m.IntervalMS, maxHeartbeatMS)
	}
	return nil
}

// DAPLost says a DAP is gone: sent by the DAP itself on shutdown, or by the
// watcher that missed its heartbeats. Its portions must be retried elsewhere.
type DAPLost struct {
	V          uint8  `msgpack:"v"`
	DAPID      string `msgpack:"dap"`
	Reason     string `msgpack:"reason"` // "shutdown", "missed heartbeats", ...
	DetectedBy string `msgpack:"by,omitempty"`
	At         int64  `msgpack:"at"` // unix nanoseconds
}

// Validate checks the loss notice.
func (m *DAPLost) Validate() error {
	const typ = "DAP lost"
	if err := checkVersion(typ, m.V, DAPVersion); err != nil {
		return err
	}
	if err := validateID(typ, "DAP id", m.DAPID); err != nil {
		return err
	}
	if err := validateText(typ, "detected by", m.DetectedBy, maxAddrLen); err != nil {
		return err
	}
	return validateText(typ, "reason", m.Reason, maxReasonLen)
}
