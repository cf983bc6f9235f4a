package engine

import (
	"cmp"
	"fmt"
	"math"
	"time"

	"github.com/sg-project/sg/messages"
)

// pred reports whether a row of the table passes one filter.
type pred func(i int) bool

// compileFilter turns a filter into a predicate over its column, converting the value to
// the column type once, not per row. Errors wrap ErrUnknownColumn or ErrFilterType.
func compileFilter(t *messages.Table, f messages.Filter) (pred, error) {
	c := t.Col(f.Column)
	if c == nil {
		return nil, fmt.Errorf("%w: filter on %q", ErrUnknownColumn, f.Column)
	}
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: filter %s on %s column %q: %s", ErrFilterType, f.Op, c.Type, c.Name, fmt.Sprintf(format, args...))
	}
	if f.Op == messages.FilterLike {
		pattern, ok := f.Value.(string)
		if !ok || (c.Type != messages.TypeSymbol && c.Type != messages.TypeString) {
			return nil, bad("like needs a string pattern and a symbol or string column")
		}
		if c.Coded() {
			dict := c.Dict
			return byCode(c.Codes, len(dict), func(k int) bool { return globMatch(pattern, dict[k]) }), nil
		}
		return likePred(c, pattern), nil
	}
	var vals []any
	switch f.Op {
	case messages.FilterIn, messages.FilterWithin:
		list, ok := f.Value.([]any)
		if !ok {
			return nil, bad("needs a list")
		}
		vals = list
	default:
		vals = []any{f.Value}
	}
	switch c.Type {
	case messages.TypeSymbol, messages.TypeString:
		if c.Coded() {
			p, err := typedPred(f.Op, c.Dict, vals, asString, bad)
			if err != nil {
				return nil, err
			}
			return byCode(c.Codes, len(c.Dict), p), nil
		}
		return typedPred(f.Op, c.Strings, vals, asString, bad)
	case messages.TypeFloat:
		return typedPred(f.Op, c.Floats, vals, asFloat, bad)
	case messages.TypeInt:
		return typedPred(f.Op, c.Ints, vals, asInt, bad)
	case messages.TypeTimestamp:
		return typedPred(f.Op, c.Ints, vals, asNanos, bad)
	case messages.TypeBool:
		return boolPred(f.Op, c.Bools, vals, bad)
	}
	return nil, bad("unsupported column type")
}

// typedPred builds the predicate for an ordered column type T.
func typedPred[T cmp.Ordered](op messages.FilterOp, col []T, vals []any, conv func(any) (T, bool),
	bad func(string, ...any) error) (pred, error) {
	xs := make([]T, len(vals))
	for k, v := range vals {
		x, ok := conv(v)
		if !ok {
			return nil, bad("value %v (%T) does not fit", v, v)
		}
		xs[k] = x
	}
	switch op {
	case messages.FilterEq:
		v := xs[0]
		return func(i int) bool { return col[i] == v }, nil
	case messages.FilterNe:
		v := xs[0]
		return func(i int) bool { return col[i] != v }, nil
	case messages.FilterLt:
		v := xs[0]
		return func(i int) bool { return col[i] < v }, nil
	case messages.FilterLe:
		v := xs[0]
		return func(i int) bool { return col[i] <= v }, nil
	case messages.FilterGt:
		v := xs[0]
		return func(i int) bool { return col[i] > v }, nil
	case messages.FilterGe:
		v := xs[0]
		return func(i int) bool { return col[i] >= v }, nil
	case messages.FilterWithin:
		if len(xs) != 2 {
			return nil, bad("within needs [lo, hi]")
		}
		lo, hi := xs[0], xs[1]
		return func(i int) bool { return col[i] >= lo && col[i] <= hi }, nil
	case messages.FilterIn:
		set := make(map[T]struct{}, len(xs))
		for _, x := range xs {
			set[x] = struct{}{}
		}
		return func(i int) bool { _, ok := set[col[i]]; return ok }, nil
	}
	return nil, bad("unknown operator")
}

func boolPred(op messages.FilterOp, col []bool, vals []any, bad func(string, ...any) error) (pred, error) {
	var want [2]bool // want[0]: false passes, want[1]: true passes
	for _, v := range vals {
		b, ok := v.(bool)
		if i, isInt := v.(int64); isInt && (i == 0 || i == 1) {
			b, ok = i == 1, true // SQL's TRUE and FALSE are 1 and 0
		}
		if !ok {
			return nil, bad("value %v (%T) is not a bool", v, v)
		}
		if b {
			want[1] = true
		} else {
			want[0] = true
		}
	}
	switch op {
	case messages.FilterEq, messages.FilterIn:
	case messages.FilterNe:
		want[0], want[1] = !want[0], !want[1]
	default:
		return nil, bad("bool columns take only =, <> and in")
	}
	return func(i int) bool {
		if col[i] {
			return want[1]
		}
		return want[0]
	}, nil
}

// byCode is the predicate over a coded column's rows of p over its
// dictionary: each value is tested once, when a row first has it.
func byCode(codes []uint32, n int, p pred) pred {
	memo := make([]uint8, n) // 0: not tested yet, 1: passes, 2: fails
	return func(i int) bool {
		code := codes[i]
		m := memo[code]
		if m == 0 {
			m = 2
			if p(int(code)) {
				m = 1
			}
			memo[code] = m
		}
		return m == 1
	}
}

// likePred memoises per distinct value: symbol columns repeat a few values many times.
func likePred(c *messages.Column, pattern string) pred {
	memo := map[string]bool{}
	return func(i int) bool {
		s := c.Strings[i]
		m, ok := memo[s]
		if !ok {
			m = globMatch(pattern, s)
			if len(memo) < 1<<16 { // free text must not grow the memo without bound
				memo[s] = m
			}
		}
		return m
	}
}

func asString(v any) (string, bool) { s, ok := v.(string); return s, ok }

func asFloat(v any) (float64, bool) {
	switch x := v.(type) {
	case float64:
		return x, true
	case int64:
		return float64(x), true
	}
	return 0, false
}

// asInt accepts a float only when it is a whole number in range (JSON's 100.0).
func asInt(v any) (int64, bool) {
	switch x := v.(type) {
	case int64:
		return x, true
	case float64:
		if x == math.Trunc(x) && x >= math.MinInt64 && x < math.MaxInt64 {
			return int64(x), true
		}
	}
	return 0, false
}

// asNanos accepts a time or an RFC 3339 string (JSON carries times as strings).
func asNanos(v any) (int64, bool) {
	switch x := v.(type) {
	case time.Time:
		return messages.UnixNanos(x), true
	case string:
		t, err := time.Parse(time.RFC3339Nano, x)
		if err != nil {
			return 0, false
		}
		return messages.UnixNanos(t), true
	}
	return 0, false
}
