package messages

// GetDataArgs are the arguments of the getData API: which table, which time range, which
// label sets, which rows (filter), which columns, and optionally a group-by aggregation,
// a sort and a limit. The RC cuts them into portions; each DAP executes them on its shard.
//
// JSON (clients, the GW's HTTP side; passed on as sent, messages/args.go):
//
//	{"table":"trade",
//	 "startTS":"2024-01-02T00:00:00.000000000Z", "endTS":"2024-01-03T00:00:00.000000000Z",
//	 "labels":{"region":["eu","us"], "desk":"fx"},
//	 "filter":[["in","sym",["VOD.L","BP.L"]], [">","size",100], ["within","price",[10,20]]],
//	 "columns":["time","sym","price"],
//	 "groupBy":["sym"], "agg":[["vwapNum","sum","price"], ["n","count",""]],
//	 "sortCols":["-n","sym"], "limit":10}
//
// msgpack (clients, and the RC's sql plan to the DAPs): a map with short keys and a version "v"; a filter is the array
// [op, column, value] and an aggregation [name, function, column], as in JSON.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/vmihailenco/msgpack/v5"
)

// GetDataArgsVersion is the version of the msgpack form of GetDataArgs.
const GetDataArgsVersion = 1

// Sentinel errors, wrapped with %w so that callers can map them to return codes. They wrap
// the package's ErrInvalid and ErrMalformed, so errors.Is works with either.
var (
	// ErrInvalidGetDataArgs: the arguments decode but make no sense (Validate).
	ErrInvalidGetDataArgs = fmt.Errorf("getData arguments: %w", ErrInvalid)
	// ErrMalformedGetDataArgs: the bytes do not decode.
	ErrMalformedGetDataArgs = fmt.Errorf("getData arguments: %w", ErrMalformed)
)

// FilterOp is a filter operator.
type FilterOp string

// Filter operators.
const (
	FilterEq     FilterOp = "="
	FilterNe     FilterOp = "<>"
	FilterLt     FilterOp = "<"
	FilterLe     FilterOp = "<="
	FilterGt     FilterOp = ">"
	FilterGe     FilterOp = ">="
	FilterIn     FilterOp = "in"     // value is a non-empty list; matches any element
	FilterWithin FilterOp = "within" // value is [lo, hi], both inclusive
	FilterLike   FilterOp = "like"   // value is a glob: * any run of characters, ? one character
)

// AggFunc is an aggregation function.
type AggFunc string

// Aggregation functions.
const (
	AggCount AggFunc = "count" // rows in the group; the column may be empty
	AggSum   AggFunc = "sum"   // int columns give int, float columns float
	AggAvg   AggFunc = "avg"   // float
	AggMin   AggFunc = "min"
	AggMax   AggFunc = "max"
	AggFirst AggFunc = "first" // value of the earliest row (by time) in the group
	AggLast  AggFunc = "last"  // value of the latest row (by time) in the group
)

var (
	filterOps = map[FilterOp]bool{FilterEq: true, FilterNe: true, FilterLt: true, FilterLe: true,
		FilterGt: true, FilterGe: true, FilterIn: true, FilterWithin: true, FilterLike: true}
	aggFuncs = map[AggFunc]bool{AggCount: true, AggSum: true, AggAvg: true, AggMin: true,
		AggMax: true, AggFirst: true, AggLast: true}
)

// LabelSelector restricts the label sets a request covers: per label key, the values
// accepted (one or more). A key that is absent accepts any value. In JSON a key with one
// value may be written as a plain string.
type LabelSelector map[string][]string

// Matches reports whether value is accepted for key.
func (s LabelSelector) Matches(key, value string) bool {
	vals, ok := s[key]
	if !ok {
		return true
	}
	for _, v := range vals {
		if v == value {
			return true
		}
	}
	return false
}

// Selects reports whether the selector accepts a label set: the set has every
// key of the selector, each with an accepted value.
func (s LabelSelector) Selects(l LabelSet) bool {
	for k, vals := range s {
		v, ok := l[k]
		if !ok || !slices.Contains(vals, v) {
			return false
		}
	}
	return true
}

// Combinations lists the explicit cross product of the selector's keys,
// keys in sorted order, so that a combination no DAP has can be named.
// The empty selector has one combination, the empty label set.
func (s LabelSelector) Combinations() []LabelSet {
	out := []LabelSet{{}}
	for _, k := range s.sortedLabelKeys() {
		var next []LabelSet
		for _, partial := range out {
			for _, v := range s[k] {
				c := partial.Clone()
				c[k] = v
				next = append(next, c)
			}
		}
		out = next
	}
	return out
}

// Filter keeps the rows where Column Op Value holds. Value is one of: string, int64,
// float64, bool, time.Time (UTC), or for in/within a []any of those. Decoders normalise
// to these types (every integer type to int64, float32 to float64, a JSON number to int64
// when it is an integer literal, else float64). A timestamp may also be given as an
// RFC 3339 string; the engine converts it against the column type.
type Filter struct {
	Op     FilterOp
	Column string
	Value  any
}

// AggSpec computes Func over Column for each group and names the result Name.
type AggSpec struct {
	Name   string
	Func   AggFunc
	Column string
}

// GetDataArgs: see the top of the file.
//
// SortCols: a leading '-' sorts that column descending ("-price"); otherwise ascending.
// Sorting and Limit apply to the final, merged answer. Without SortCols rows come in time
// order (ties by the values of the row), groups in ascending group-key order.
//
// A zero StartTS or EndTS leaves that side of the range open; reference tables (those
// without a time column, like instrument) ignore the range.
type GetDataArgs struct {
	Table    string
	StartTS  time.Time // inclusive
	EndTS    time.Time // exclusive
	Labels   LabelSelector
	Filter   []Filter
	Columns  []string // empty: all columns (row queries only)
	GroupBy  []string
	Agg      []AggSpec
	SortCols []string
	Limit    int // 0: no limit
	// Where: a condition tree the filters cannot express (set by the sql
	// API's planner; internal: msgpack only, key "w"). Rows pass the
	// filters AND Where.
	Where *Where
}

// Aggregating reports whether the request groups or aggregates rather than returning rows.
// groupBy without agg returns the distinct groups; agg without groupBy one whole-table group.
func (a *GetDataArgs) Aggregating() bool { return len(a.GroupBy) > 0 || len(a.Agg) > 0 }

// Range is the request's time range [StartTS, EndTS) as a TimeRange, its
// open ends TSMin and TSMax.
func (a *GetDataArgs) Range() TimeRange { return TimeRangeOf(a.StartTS, a.EndTS) }

// TimeOrderLimit is how many rows, the first in time order, a source needs to
// contribute to the answer: Limit for a row query without sortCols (its rows
// come in time order; a source keeps the rows tied with the last one, and the
// merge orders and cuts them exactly), 0 (every row) otherwise.
func (a *GetDataArgs) TimeOrderLimit() int {
	if a.Aggregating() || len(a.SortCols) > 0 {
		return 0
	}
	return a.Limit
}

// SortKey splits a sortCols entry into the column name and its direction.
func SortKey(s string) (column string, descending bool) {
	if strings.HasPrefix(s, "-") {
		return s[1:], true
	}
	return s, false
}

// Validate checks the arguments on their own; whether columns exist and values fit their
// types is for the DAP, which knows the schema. Errors wrap ErrInvalidGetDataArgs.
func (a *GetDataArgs) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrInvalidGetDataArgs, fmt.Sprintf(format, args...))
	}
	if a.Table == "" {
		return bad("table is required")
	}
	if !a.StartTS.IsZero() && !a.EndTS.IsZero() && !a.EndTS.After(a.StartTS) {
		return bad("endTS %s must be after startTS %s", a.EndTS.UTC().Format(TimeFormat), a.StartTS.UTC().Format(TimeFormat))
	}
	for key, vals := range a.Labels {
		if key == "" {
			return bad("empty label key")
		}
		if len(vals) == 0 {
			return bad("label %q has no values", key)
		}
	}
	for i, f := range a.Filter {
		if err := f.validate(); err != nil {
			return bad("filter %d: %v", i, err)
		}
	}
	cols := map[string]bool{}
	for _, c := range a.Columns {
		if c == "" || cols[c] {
			return bad("column %q is empty or repeated in columns", c)
		}
		cols[c] = true
	}
	if a.Aggregating() && len(a.Columns) > 0 {
		return bad("columns cannot be combined with groupBy/agg: the output columns are the groupBy columns then the agg names")
	}
	names := map[string]bool{}
	for _, g := range a.GroupBy {
		if g == "" || names[g] {
			return bad("groupBy column %q is empty or repeated", g)
		}
		names[g] = true
	}
	for i, s := range a.Agg {
		if s.Name == "" {
			return bad("agg %d: name is required", i)
		}
		if names[s.Name] {
			return bad("agg %d: output name %q is already used", i, s.Name)
		}
		names[s.Name] = true
		if !aggFuncs[s.Func] {
			return bad("agg %q: unknown function %q (want count, sum, avg, min, max, first or last)", s.Name, s.Func)
		}
		if s.Column == "" && s.Func != AggCount {
			return bad("agg %q: %s needs a column", s.Name, s.Func)
		}
	}
	for _, s := range a.SortCols {
		if c, _ := SortKey(s); c == "" {
			return bad("empty sort column %q", s)
		}
	}
	if a.Limit < 0 {
		return bad("limit %d is negative", a.Limit)
	}
	if a.Where != nil {
		if err := a.Where.Validate(); err != nil {
			return bad("where: %v", err)
		}
	}
	return nil
}

func (f Filter) validate() error {
	if !filterOps[f.Op] {
		return fmt.Errorf("unknown operator %q (want = <> < <= > >= in within like)", f.Op)
	}
	if f.Column == "" {
		return errors.New("column is required")
	}
	list, isList := f.Value.([]any)
	switch f.Op {
	case FilterIn:
		if !isList || len(list) == 0 {
			return errors.New("in needs a non-empty list")
		}
	case FilterWithin:
		if !isList || len(list) != 2 {
			return errors.New("within needs a list [lo, hi]")
		}
	case FilterLike:
		if _, ok := f.Value.(string); !ok {
			return fmt.Errorf("like needs a string pattern, not %T", f.Value)
		}
		return nil
	default:
		if isList {
			return fmt.Errorf("%s needs a single value, not a list", f.Op)
		}
		return checkScalar(f.Value)
	}
	for _, v := range list {
		if err := checkScalar(v); err != nil {
			return err
		}
	}
	return nil
}

func checkScalar(v any) error {
	switch v.(type) {
	case string, int64, float64, bool, time.Time:
		return nil
	}
	return fmt.Errorf("value of type %T is not a string, number, bool or time", v)
}

// normalizeValue maps what a decoder produced onto the value types Filter documents.
func normalizeValue(v any, depth int) (any, error) {
	switch x := v.(type) {
	case string, int64, float64, bool:
		return x, nil
	case time.Time:
		return x.UTC(), nil
	case int:
		return int64(x), nil
	case int8:
		return int64(x), nil
	case int16:
		return int64(x), nil
	case int32:
		return int64(x), nil
	case uint8:
		return int64(x), nil
	case uint16:
		return int64(x), nil
	case uint32:
		return int64(x), nil
	case uint64:
		if x > math.MaxInt64 {
			return nil, fmt.Errorf("integer %d out of range", x)
		}
		return int64(x), nil
	case uint:
		return normalizeValue(uint64(x), depth)
	case float32:
		return float64(x), nil
	case json.Number:
		if i, err := strconv.ParseInt(string(x), 10, 64); err == nil {
			return i, nil
		}
		f, err := strconv.ParseFloat(string(x), 64)
		if err != nil {
			return nil, fmt.Errorf("number %s: %v", x, err)
		}
		return f, nil
	case []any:
		if depth > 0 {
			return nil, errors.New("nested lists are not allowed")
		}
		out := make([]any, len(x))
		for i, e := range x {
			n, err := normalizeValue(e, depth+1)
			if err != nil {
				return nil, err
			}
			out[i] = n
		}
		return out, nil
	}
	return nil, fmt.Errorf("unsupported value type %T", v)
}

// ---- JSON ----

type getDataArgsJSON struct {
	Table    string            `json:"table"`
	StartTS  string            `json:"startTS,omitempty"`
	EndTS    string            `json:"endTS,omitempty"`
	Labels   json.RawMessage   `json:"labels,omitempty"`
	Filter   []json.RawMessage `json:"filter,omitempty"`
	Columns  []string          `json:"columns,omitempty"`
	GroupBy  []string          `json:"groupBy,omitempty"`
	Agg      [][]string        `json:"agg,omitempty"`
	SortCols []string          `json:"sortCols,omitempty"`
	Limit    int               `json:"limit,omitempty"`
	// Scope is the envelope's own key (ScopeFromArgs), kept raw so that the
	// GW takes it from this one parse (DecodeGetDataArgsJSONScope).
	Scope json.RawMessage `json:"scope,omitempty"`
}

// MarshalJSON writes the shape documented at the top of the file.
func (a GetDataArgs) MarshalJSON() ([]byte, error) {
	w := getDataArgsJSON{Table: a.Table, Columns: a.Columns, GroupBy: a.GroupBy, SortCols: a.SortCols, Limit: a.Limit}
	if !a.StartTS.IsZero() {
		w.StartTS = a.StartTS.UTC().Format(TimeFormat)
	}
	if !a.EndTS.IsZero() {
		w.EndTS = a.EndTS.UTC().Format(TimeFormat)
	}
	if len(a.Labels) > 0 {
		m := make(map[string]any, len(a.Labels))
		for k, v := range a.Labels {
			if len(v) == 1 {
				m[k] = v[0]
			} else {
				m[k] = v
			}
		}
		b, err := json.Marshal(m) // map keys come out sorted: stable bytes
		if err != nil {
			return nil, err
		}
		w.Labels = b
	}
	for _, f := range a.Filter {
		b, err := marshalNoEscape([]any{f.Op, f.Column, jsonValue(f.Value)})
		if err != nil {
			return nil, fmt.Errorf("filter on %q: %w", f.Column, err)
		}
		w.Filter = append(w.Filter, b)
	}
	for _, s := range a.Agg {
		w.Agg = append(w.Agg, []string{s.Name, string(s.Func), s.Column})
	}
	// Operators stay readable (">" rather than "\u003e") for an encoder that does not
	// escape HTML; json.Marshal re-escapes, which decodes the same.
	return marshalNoEscape(w)
}

func marshalNoEscape(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// jsonValue writes times in TimeFormat rather than Go's default layout.
func jsonValue(v any) any {
	switch x := v.(type) {
	case time.Time:
		return x.UTC().Format(TimeFormat)
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = jsonValue(e)
		}
		return out
	}
	return v
}

// UnmarshalJSON reads the shape documented at the top of the file. Unknown keys are
// ignored, so that an envelope may carry its own fields (scope, opts) beside these.
func (a *GetDataArgs) UnmarshalJSON(data []byte) error {
	_, err := a.unmarshalJSON(data)
	return err
}

// unmarshalJSON is UnmarshalJSON that also gives the raw "scope" key, once
// the arguments are an object (even when a value in them is refused). The
// common shape is read by hand (getdata_fastjson.go), the rest by
// encoding/json.
func (a *GetDataArgs) unmarshalJSON(data []byte) (sc json.RawMessage, err error) {
	if w, labels, ok := parseGetDataArgsJSONFast(data); ok {
		return w.Scope, a.fromJSON(&w, labels)
	}
	return a.unmarshalJSONStd(data)
}

// unmarshalJSONStd is unmarshalJSON with encoding/json only: the reference
// the fast path must agree with.
func (a *GetDataArgs) unmarshalJSONStd(data []byte) (json.RawMessage, error) {
	var w getDataArgsJSON
	if err := json.Unmarshal(data, &w); err != nil {
		// A value of the wrong type still leaves the other keys read: the
		// scope is named first if it is bad too.
		return w.Scope, badGetDataArgs("%v", err)
	}
	return w.Scope, a.fromJSON(&w, nil)
}

func badGetDataArgs(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrMalformedGetDataArgs, fmt.Sprintf(format, args...))
}

// fromJSON finishes what json.Unmarshal read into w. labels, when not nil,
// are w.Labels already decoded (by the fast path).
func (a *GetDataArgs) fromJSON(w *getDataArgsJSON, labels LabelSelector) error {
	bad := badGetDataArgs
	out := GetDataArgs{Table: w.Table, Labels: labels, Columns: w.Columns, GroupBy: w.GroupBy, SortCols: w.SortCols, Limit: w.Limit}
	var err error
	if w.StartTS != "" {
		if out.StartTS, err = time.Parse(time.RFC3339Nano, w.StartTS); err != nil {
			return bad("startTS: %v", err)
		}
		out.StartTS = out.StartTS.UTC()
	}
	if w.EndTS != "" {
		if out.EndTS, err = time.Parse(time.RFC3339Nano, w.EndTS); err != nil {
			return bad("endTS: %v", err)
		}
		out.EndTS = out.EndTS.UTC()
	}
	if labels == nil && len(w.Labels) > 0 && !bytes.Equal(w.Labels, []byte("null")) {
		var m map[string]json.RawMessage
		if err := json.Unmarshal(w.Labels, &m); err != nil {
			return bad("labels must be an object of key to value or list of values: %v", err)
		}
		var k string
		var ok bool
		if out.Labels, k, ok = labelsFromJSON(m); !ok {
			return bad("label %q: want a string or a list of strings", k)
		}
	}
	for i, raw := range w.Filter {
		f, err := decodeFilterJSON(raw)
		if err != nil {
			return bad("filter %d: %v", i, err)
		}
		out.Filter = append(out.Filter, f)
	}
	for i, t := range w.Agg {
		// [name, function] is accepted for count, which needs no column.
		if len(t) != 3 && len(t) != 2 {
			return bad("agg %d: want [name, function, column]", i)
		}
		s := AggSpec{Name: t[0], Func: AggFunc(t[1])}
		if len(t) == 3 {
			s.Column = t[2]
		}
		out.Agg = append(out.Agg, s)
	}
	*a = out
	return nil
}

// labelsFromJSON reads a label selector's values, each a string or a list of
// strings (getData's and ping's labels); bad is the first key whose value is
// neither.
func labelsFromJSON(m map[string]json.RawMessage) (s LabelSelector, bad string, ok bool) {
	s = make(LabelSelector, len(m))
	for k, raw := range m {
		var one string
		// A list is the usual form: tried first as a string only when it is
		// one, a list would cost an error (json.UnmarshalTypeError) each time.
		if len(raw) > 0 && raw[0] == '"' && json.Unmarshal(raw, &one) == nil {
			s[k] = []string{one}
			continue
		}
		var many []string
		if err := json.Unmarshal(raw, &many); err != nil || many == nil {
			return nil, k, false
		}
		s[k] = many
	}
	return s, "", true
}

func decodeFilterJSON(raw json.RawMessage) (Filter, error) {
	var parts []json.RawMessage
	if err := json.Unmarshal(raw, &parts); err != nil || len(parts) != 3 {
		return Filter{}, errors.New("want [op, column, value]")
	}
	var f Filter
	var op string
	if err := json.Unmarshal(parts[0], &op); err != nil {
		return Filter{}, errors.New("op must be a string")
	}
	f.Op = FilterOp(op)
	if err := json.Unmarshal(parts[1], &f.Column); err != nil {
		return Filter{}, errors.New("column must be a string")
	}
	dec := json.NewDecoder(bytes.NewReader(parts[2]))
	dec.UseNumber() // keep 9007199254740993 an exact int64
	var v any
	if err := dec.Decode(&v); err != nil {
		return Filter{}, fmt.Errorf("value: %v", err)
	}
	v, err := normalizeValue(v, 0)
	if err != nil {
		return Filter{}, fmt.Errorf("value: %v", err)
	}
	f.Value = v
	return f, nil
}

// ---- msgpack: getdata_wire.go (Filter and AggSpec below serve Where) ----

// EncodeMsgpack writes [op, column, value].
func (f Filter) EncodeMsgpack(enc *msgpack.Encoder) error {
	if err := enc.EncodeArrayLen(3); err != nil {
		return err
	}
	if err := enc.EncodeString(string(f.Op)); err != nil {
		return err
	}
	if err := enc.EncodeString(f.Column); err != nil {
		return err
	}
	return enc.Encode(f.Value)
}

// DecodeMsgpack reads [op, column, value].
func (f *Filter) DecodeMsgpack(dec *msgpack.Decoder) error {
	n, err := dec.DecodeArrayLen()
	if err != nil || n != 3 {
		return fmt.Errorf("filter: want [op, column, value] (%d elements, %v)", n, err)
	}
	op, err := dec.DecodeString()
	if err != nil {
		return fmt.Errorf("filter op: %v", err)
	}
	col, err := dec.DecodeString()
	if err != nil {
		return fmt.Errorf("filter column: %v", err)
	}
	raw, err := dec.DecodeInterface()
	if err != nil {
		return fmt.Errorf("filter value: %v", err)
	}
	v, err := normalizeValue(raw, 0)
	if err != nil {
		return fmt.Errorf("filter value: %v", err)
	}
	*f = Filter{Op: FilterOp(op), Column: col, Value: v}
	return nil
}

// EncodeMsgpack writes [name, function, column].
func (s AggSpec) EncodeMsgpack(enc *msgpack.Encoder) error {
	if err := enc.EncodeArrayLen(3); err != nil {
		return err
	}
	for _, x := range []string{s.Name, string(s.Func), s.Column} {
		if err := enc.EncodeString(x); err != nil {
			return err
		}
	}
	return nil
}

// DecodeMsgpack reads [name, function, column].
func (s *AggSpec) DecodeMsgpack(dec *msgpack.Decoder) error {
	n, err := dec.DecodeArrayLen()
	if err != nil || n != 3 {
		return fmt.Errorf("agg: want [name, function, column] (%d elements, %v)", n, err)
	}
	var x [3]string
	for i := range x {
		if x[i], err = dec.DecodeString(); err != nil {
			return fmt.Errorf("agg: %v", err)
		}
	}
	*s = AggSpec{Name: x[0], Func: AggFunc(x[1]), Column: x[2]}
	return nil
}

// DecodeGetDataArgsJSON is the JSON counterpart of DecodeGetDataArgsMsgpack.
func DecodeGetDataArgsJSON(b []byte) (GetDataArgs, error) {
	a, _, err := DecodeGetDataArgsJSONScope(b)
	return a, err
}

// DecodeGetDataArgsJSONScope is DecodeGetDataArgsJSON that also gives the
// arguments' raw "scope" key, so the GW parses a JSON caller's arguments
// once. The scope is given whenever the arguments are an object, even with
// an error, so that a bad scope can be named first, as ScopeFromArgs does.
func DecodeGetDataArgsJSONScope(b []byte) (a GetDataArgs, sc json.RawMessage, err error) {
	defer func() {
		if r := recover(); r != nil {
			a, sc, err = GetDataArgs{}, nil, fmt.Errorf("%w: decoder panic: %v", ErrMalformedGetDataArgs, r)
		}
	}()
	if err := CheckJSON(b, MessageLimits); err != nil {
		return GetDataArgs{}, nil, fmt.Errorf("%w: %w", ErrMalformedGetDataArgs, err)
	}
	sc, err = a.unmarshalJSON(b)
	if err != nil {
		return GetDataArgs{}, sc, err
	}
	return a, sc, nil
}

// sortedLabelKeys gives a stable order for messages and logs.
func (s LabelSelector) sortedLabelKeys() []string {
	keys := make([]string, 0, len(s))
	for k := range s {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// String renders the selector as key=v1|v2,key2=v, keys sorted (for logs and errors).
func (s LabelSelector) String() string {
	var b strings.Builder
	for i, k := range s.sortedLabelKeys() {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(k)
		b.WriteByte('=')
		b.WriteString(strings.Join(s[k], "|"))
	}
	return b.String()
}
