package messages

import (
	"slices"
	"testing"
	"time"
)

// A label set prints as the RC's timeout messages print it: {k:v,...}, keys
// sorted; the empty and the nil set as {}.
func TestLabelSetString(t *testing.T) {
	for _, c := range []struct {
		l    LabelSet
		want string
	}{
		{nil, "{}"},
		{LabelSet{}, "{}"},
		{LabelSet{"region": "eu"}, "{region:eu}"},
		{LabelSet{"z": "1", "a": "x y", "m": ""}, "{a:x y,m:,z:1}"},
	} {
		if got := c.l.String(); got != c.want {
			t.Errorf("%#v: %q, want %q", map[string]string(c.l), got, c.want)
		}
	}
}

func TestLabelSetCloneAndSubset(t *testing.T) {
	l := LabelSet{"region": "eu", "venue": "x"}
	c := l.Clone()
	c["region"] = "us"
	if l["region"] != "eu" {
		t.Fatal("Clone shares the map")
	}
	if n := LabelSet(nil).Clone(); n == nil || len(n) != 0 {
		t.Fatalf("nil clone: %#v", n)
	}
	for _, x := range []struct {
		sub  LabelSet
		want bool
	}{
		{nil, true}, {LabelSet{"region": "eu"}, true}, {l, true},
		{LabelSet{"region": "us"}, false}, {LabelSet{"other": ""}, false},
	} {
		if got := x.sub.SubsetOf(l); got != x.want {
			t.Errorf("%v subset of %v: %v", x.sub, l, got)
		}
	}
}

// A selector selects a label set that has each of its keys with an accepted
// value; an absent key is not a match, even for the empty value.
func TestLabelSelectorSelects(t *testing.T) {
	l := LabelSet{"region": "eu", "venue": "x"}
	for _, x := range []struct {
		s    LabelSelector
		want bool
	}{
		{nil, true},
		{LabelSelector{"region": {"us", "eu"}}, true},
		{LabelSelector{"region": {"eu"}, "venue": {"x"}}, true},
		{LabelSelector{"region": {"us"}}, false},
		{LabelSelector{"region": {"eu"}, "desk": {""}}, false},
		{LabelSelector{"region": {}}, false},
	} {
		if got := x.s.Selects(l); got != x.want {
			t.Errorf("%v selects %v: %v, want %v", x.s, l, got, x.want)
		}
	}
}

func TestLabelSelectorCombinations(t *testing.T) {
	got := LabelSelector{"venue": {"x", "y"}, "region": {"eu", "us"}}.Combinations()
	var names []string
	for _, l := range got {
		names = append(names, l.String())
	}
	want := []string{"{region:eu,venue:x}", "{region:eu,venue:y}", "{region:us,venue:x}", "{region:us,venue:y}"}
	if !slices.Equal(names, want) {
		t.Fatalf("%v, want %v", names, want)
	}
	if got := LabelSelector(nil).Combinations(); len(got) != 1 || len(got[0]) != 0 {
		t.Fatalf("empty selector: %v", got)
	}
}

// Class names the errors the RC treats apart, OnWire undoes it, and the
// RC's names never pass validation as a DAP's outcome.
func TestOutcomeClassAndWire(t *testing.T) {
	for _, x := range []struct {
		out  Outcome
		code Code
		want Outcome
	}{
		{OutcomeOK, CodeOK, OutcomeOK},
		{OutcomeRetry, CodeRetry, OutcomeRetry},
		{OutcomeError, CodeErr, OutcomeError},
		{OutcomeError, CodeTimeout, OutcomeTimeout},
		{OutcomeError, CodeRateLimited, OutcomeRefused},
	} {
		m := PortionCompletion{Outcome: x.out, Code: x.code}
		if got := m.Class(); got != x.want {
			t.Errorf("%s/%s: class %s, want %s", x.out, x.code, got, x.want)
		}
		if o, c := x.want.OnWire(x.code); o != x.out || c != x.code {
			t.Errorf("%s on the wire: %s/%s, want %s/%s", x.want, o, c, x.out, x.code)
		}
	}
	for _, o := range []Outcome{OutcomeTimeout, OutcomeRefused} {
		m := PortionCompletion{V: PortionVersion, RequestID: "q", PortionID: 1, DAPID: "d", Outcome: o, Code: CodeErr}
		if m.Validate() == nil {
			t.Errorf("outcome %s passed validation", o)
		}
	}
	if OutcomeTimeout.String() != "timeout" || OutcomeRefused.String() != "refused" {
		t.Error("names")
	}
}

// getData's time.Time range (the zero time an open end) and TimeRange (TSMin
// and TSMax) convert both ways; times int64 nanoseconds cannot hold clamp to
// the nearest end instead of wrapping around.
func TestTimeRangeOfAndTimes(t *testing.T) {
	at := func(ns int64) time.Time { return time.Unix(0, ns).UTC() }
	far := time.Date(3000, 1, 1, 0, 0, 0, 0, time.UTC)
	early := time.Date(1600, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		start, end time.Time
		want       TimeRange
		back       bool // Times gives start and end back
	}{
		{time.Time{}, time.Time{}, Unbounded, true},
		{at(5), time.Time{}, TimeRange{5, TSMax}, true},
		{time.Time{}, at(-7), TimeRange{TSMin, -7}, true},
		{at(1), at(2), TimeRange{1, 2}, true},
		{early, far, TimeRange{TSMin, TSMax}, false},
		{far, time.Time{}, TimeRange{TSMax, TSMax}, false}, // empty: starts after every time
		{time.Time{}, early, TimeRange{TSMin, TSMin}, false},
	} {
		got := TimeRangeOf(c.start, c.end)
		if got != c.want {
			t.Errorf("TimeRangeOf(%v, %v) = %v, want %v", c.start, c.end, got, c.want)
		}
		a := GetDataArgs{StartTS: c.start, EndTS: c.end}
		if r := a.Range(); r != c.want {
			t.Errorf("Range of [%v, %v) = %v, want %v", c.start, c.end, r, c.want)
		}
		if s, e := got.Times(); c.back && (!s.Equal(c.start) || !e.Equal(c.end)) {
			t.Errorf("%v.Times() = %v, %v, want %v, %v", got, s, e, c.start, c.end)
		}
	}
	if s, e := Unbounded.Times(); !s.IsZero() || !e.IsZero() {
		t.Errorf("Unbounded.Times() = %v, %v, want zero times", s, e)
	}
}

// Only a row query without sortCols has its limit met by the first rows in
// time order.
func TestTimeOrderLimit(t *testing.T) {
	for _, c := range []struct {
		a    GetDataArgs
		want int
	}{
		{GetDataArgs{Limit: 10}, 10},
		{GetDataArgs{Limit: 10, Columns: []string{"price"}, Filter: []Filter{{Op: "=", Column: "sym", Value: "a"}}}, 10},
		{GetDataArgs{}, 0},
		{GetDataArgs{Limit: 10, SortCols: []string{"-size"}}, 0},
		{GetDataArgs{Limit: 10, GroupBy: []string{"sym"}}, 0},
		{GetDataArgs{Limit: 10, Agg: []AggSpec{{Name: "n", Func: AggCount}}}, 0},
	} {
		if got := c.a.TimeOrderLimit(); got != c.want {
			t.Errorf("%+v: %d, want %d", c.a, got, c.want)
		}
	}
}
