package messages

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"
)

func sampleArgs() GetDataArgs {
	return GetDataArgs{
		Table:   "trade",
		StartTS: time.Date(2024, 1, 2, 9, 30, 0, 123456789, time.UTC),
		EndTS:   time.Date(2024, 1, 3, 0, 0, 0, 0, time.UTC),
		Labels:  LabelSelector{"region": {"eu", "us"}, "desk": {"fx"}},
		Filter: []Filter{
			{Op: FilterIn, Column: "sym", Value: []any{"VOD.L", "BP.L"}},
			{Op: FilterGt, Column: "size", Value: int64(100)},
			{Op: FilterWithin, Column: "price", Value: []any{1.5, int64(20)}},
			{Op: FilterLike, Column: "venue", Value: "X*"},
			{Op: FilterEq, Column: "block", Value: true},
			{Op: FilterGe, Column: "time", Value: time.Date(2024, 1, 2, 10, 0, 0, 5, time.UTC)},
		},
		GroupBy:  []string{"sym"},
		Agg:      []AggSpec{{Name: "n", Func: AggCount}, {Name: "px", Func: AggAvg, Column: "price"}},
		SortCols: []string{"-n", "sym"},
		Limit:    10,
	}
}

// The JSON shape is a contract with clients: labels as an object (one value as a string),
// filter as [op, column, value], agg as [name, function, column], times with nanoseconds.
func TestGetDataArgsJSONShape(t *testing.T) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf) // json.Marshal would escape < and > as \u003c, \u003e
	enc.SetEscapeHTML(false)
	if err := enc.Encode(sampleArgs()); err != nil {
		t.Fatal(err)
	}
	b := bytes.TrimSpace(buf.Bytes())
	want := `{"table":"trade","startTS":"2024-01-02T09:30:00.123456789Z","endTS":"2024-01-03T00:00:00.000000000Z",` +
		`"labels":{"desk":"fx","region":["eu","us"]},` +
		`"filter":[["in","sym",["VOD.L","BP.L"]],[">","size",100],["within","price",[1.5,20]],["like","venue","X*"],` +
		`["=","block",true],[">=","time","2024-01-02T10:00:00.000000005Z"]],` +
		`"groupBy":["sym"],"agg":[["n","count",""],["px","avg","price"]],"sortCols":["-n","sym"],"limit":10}`
	if string(b) != want {
		t.Fatalf("JSON shape\n got %s\nwant %s", b, want)
	}
}

func TestGetDataArgsJSONRoundTrip(t *testing.T) {
	in := sampleArgs()
	b, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeGetDataArgsJSON(b)
	if err != nil {
		t.Fatal(err)
	}
	// A time in a filter comes back as its RFC 3339 string: JSON has no time type; the
	// engine converts it against the column type.
	want := sampleArgs()
	want.Filter[5].Value = "2024-01-02T10:00:00.000000005Z"
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("round trip\n got %#v\nwant %#v", got, want)
	}
}

func TestGetDataArgsJSONInput(t *testing.T) {
	in := `{"table":"quote","startTS":"2024-01-02T01:00:00+01:00","endTS":"2024-01-02T00:30:00.5Z",
		"labels":{"region":"eu"},"filter":[["=","size",9007199254740993],["<","bid",2.5]],
		"agg":[["n","count"]],"scope":{"assembly":"x"}}`
	got, err := DecodeGetDataArgsJSON([]byte(in))
	if err != nil {
		t.Fatal(err)
	}
	if !got.StartTS.Equal(time.Date(2024, 1, 2, 0, 0, 0, 0, time.UTC)) || got.StartTS.Location() != time.UTC {
		t.Errorf("startTS %v, want midnight UTC", got.StartTS)
	}
	if !reflect.DeepEqual(got.Labels, LabelSelector{"region": {"eu"}}) {
		t.Errorf("labels %v", got.Labels)
	}
	if got.Filter[0].Value != int64(9007199254740993) || got.Filter[1].Value != 2.5 {
		t.Errorf("filter values %#v %#v: integers must stay exact int64, fractions float64", got.Filter[0].Value, got.Filter[1].Value)
	}
	if got.Agg[0] != (AggSpec{Name: "n", Func: AggCount}) {
		t.Errorf("agg %v", got.Agg)
	}
	if err := got.Validate(); err != nil {
		t.Errorf("valid args: %v", err)
	}
}

func TestGetDataArgsMsgpackRoundTrip(t *testing.T) {
	in := sampleArgs()
	b, err := msgpack.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeGetDataArgsMsgpack(b)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, in) {
		t.Fatalf("round trip\n got %#v\nwant %#v", got, in)
	}
	// Zero times (open range) survive as zero times.
	open := GetDataArgs{Table: "instrument"}
	b, _ = msgpack.Marshal(open)
	if got, err := DecodeGetDataArgsMsgpack(b); err != nil || !reflect.DeepEqual(got, open) {
		t.Fatalf("open range: %#v, %v", got, err)
	}
}

func TestGetDataArgsMalformed(t *testing.T) {
	jsonCases := []string{
		``, `[]`, `{"table":1}`, `{"table":"t","startTS":"yesterday"}`,
		`{"table":"t","labels":{"region":1}}`, `{"table":"t","labels":["eu"]}`,
		`{"table":"t","filter":[["=","x"]]}`, `{"table":"t","filter":[[1,"x",1]]}`,
		`{"table":"t","filter":[["=","x",{"a":1}]]}`, `{"table":"t","filter":[["in","x",[[1]]]]}`,
		`{"table":"t","filter":[["=","x",null]]}`, `{"table":"t","agg":[["n"]]}`,
	}
	for _, c := range jsonCases {
		if _, err := DecodeGetDataArgsJSON([]byte(c)); !errors.Is(err, ErrMalformedGetDataArgs) || !errors.Is(err, ErrMalformed) {
			t.Errorf("JSON %s: err %v, want ErrMalformedGetDataArgs", c, err)
		}
	}
	good, _ := msgpack.Marshal(sampleArgs())
	for n := 0; n < len(good); n++ { // every truncation fails cleanly
		if _, err := DecodeGetDataArgsMsgpack(good[:n]); err == nil {
			t.Fatalf("truncated to %d bytes: no error", n)
		}
	}
	if _, err := DecodeGetDataArgsMsgpack(append(good, 0xc0)); err == nil {
		t.Error("trailing byte accepted")
	}
	v2, _ := msgpack.Marshal(map[string]any{"v": 2, "t": "trade"})
	if _, err := DecodeGetDataArgsMsgpack(v2); !errors.Is(err, ErrVersion) {
		t.Errorf("version 2: %v, want ErrVersion", err)
	}
}

func TestGetDataArgsValidate(t *testing.T) {
	t0 := time.Date(2024, 1, 2, 0, 0, 0, 0, time.UTC)
	cases := []struct {
		name   string
		mutate func(*GetDataArgs)
		want   string // substring of the error; "" = valid
	}{
		{"sample", func(*GetDataArgs) {}, ""},
		{"agg without groupBy", func(a *GetDataArgs) { a.GroupBy = nil }, ""},
		{"open range", func(a *GetDataArgs) { a.StartTS, a.EndTS = time.Time{}, time.Time{} }, ""},
		{"no table", func(a *GetDataArgs) { a.Table = "" }, "table is required"},
		{"end before start", func(a *GetDataArgs) { a.StartTS, a.EndTS = t0, t0.Add(-1) }, "must be after startTS"},
		{"empty range", func(a *GetDataArgs) { a.StartTS, a.EndTS = t0, t0 }, "must be after startTS"},
		{"unknown op", func(a *GetDataArgs) { a.Filter[0].Op = "==" }, `unknown operator "=="`},
		{"in scalar", func(a *GetDataArgs) { a.Filter[0].Value = "x" }, "in needs a non-empty list"},
		{"in empty", func(a *GetDataArgs) { a.Filter[0].Value = []any{} }, "in needs a non-empty list"},
		{"within 3", func(a *GetDataArgs) { a.Filter[2].Value = []any{1.0, 2.0, 3.0} }, "within needs a list [lo, hi]"},
		{"like number", func(a *GetDataArgs) { a.Filter[3].Value = int64(1) }, "like needs a string pattern"},
		{"compare list", func(a *GetDataArgs) { a.Filter[1].Value = []any{int64(1)} }, "needs a single value"},
		{"unknown agg", func(a *GetDataArgs) { a.Agg[1].Func = "median" }, `unknown function "median"`},
		{"sum without column", func(a *GetDataArgs) { a.Agg[1] = AggSpec{Name: "s", Func: AggSum} }, "sum needs a column"},
		{"agg name clash", func(a *GetDataArgs) { a.Agg[1].Name = "sym" }, `output name "sym" is already used`},
		{"columns with agg", func(a *GetDataArgs) { a.Columns = []string{"price"} }, "columns cannot be combined"},
		{"repeated column", func(a *GetDataArgs) { a.GroupBy, a.Agg, a.Columns = nil, nil, []string{"a", "a"} }, `column "a" is empty or repeated`},
		{"empty label values", func(a *GetDataArgs) { a.Labels["region"] = nil }, `label "region" has no values`},
		{"sort dash only", func(a *GetDataArgs) { a.SortCols = []string{"-"} }, "empty sort column"},
		{"negative limit", func(a *GetDataArgs) { a.Limit = -1 }, "limit -1 is negative"},
	}
	for _, c := range cases {
		a := sampleArgs()
		c.mutate(&a)
		err := a.Validate()
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: unexpected error %v", c.name, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want) || !errors.Is(err, ErrInvalidGetDataArgs)):
			t.Errorf("%s: error %v, want ErrInvalidGetDataArgs containing %q", c.name, err, c.want)
		}
	}
}

func TestSortKey(t *testing.T) {
	if c, d := SortKey("-price"); c != "price" || !d {
		t.Errorf("-price: %q %v", c, d)
	}
	if c, d := SortKey("price"); c != "price" || d {
		t.Errorf("price: %q %v", c, d)
	}
}

func FuzzDecodeGetDataArgsJSON(f *testing.F) {
	b, _ := json.Marshal(sampleArgs())
	f.Add(b)
	f.Add([]byte(`{"table":"t","filter":[["in","x",[1,"a",true,2.5]]],"labels":{"a":["b"]}}`))
	f.Add([]byte(`{"table":"t","filter":[["in","x",[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		var (
			a   GetDataArgs
			err error
		)
		checkAlloc(t, "getData JSON", data, func() { a, err = DecodeGetDataArgsJSON(data) })
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error %v is not ErrMalformed", err)
			}
			return
		}
		_ = a.Validate()
		// Whatever decodes must encode and decode again to the same arguments.
		b, err := json.Marshal(a)
		if err != nil {
			return // e.g. a float filter value that JSON cannot hold
		}
		if _, err := DecodeGetDataArgsJSON(b); err != nil {
			t.Fatalf("re-decode of %s: %v", b, err)
		}
	})
}

func FuzzDecodeGetDataArgsMsgpack(f *testing.F) {
	b, _ := msgpack.Marshal(sampleArgs())
	f.Add(b)
	b, _ = msgpack.Marshal(GetDataArgs{Table: "instrument"})
	f.Add(b)
	for _, b := range hostileMsgpack {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var (
			a   GetDataArgs
			err error
		)
		checkAlloc(t, "getData msgpack", data, func() { a, err = DecodeGetDataArgsMsgpack(data) })
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error %v is not ErrMalformed", err)
			}
			return
		}
		_ = a.Validate()
		b, err := msgpack.Marshal(a)
		if err != nil {
			t.Fatalf("re-encode: %v", err)
		}
		if _, err := DecodeGetDataArgsMsgpack(b); err != nil {
			t.Fatalf("re-decode: %v", err)
		}
	})
}
