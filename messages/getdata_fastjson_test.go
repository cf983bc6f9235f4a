package messages

import (
	"encoding/json"
	"fmt"
	"reflect"
	"testing"
	"time"
)

// smallArgsJSON is a small request's arguments, as `sg bench` and the client
// send them.
const smallArgsJSON = `{"table":"trade","startTS":"2026-11-24T12:00:00Z","endTS":"2026-11-24T12:01:00Z",` +
	`"labels":{"region":"eu"},"limit":1}`

// tookFastPath reports whether unmarshalJSON reads b by hand: exactly when
// the scanner accepts it.
func tookFastPath(b []byte) bool {
	_, _, ok := parseGetDataArgsJSONFast(b)
	return ok
}

// decodeBothJSON decodes b with unmarshalJSON (fast path first) and with
// encoding/json alone, and fails t unless both give the same arguments,
// scope and error.
func decodeBothJSON(t *testing.T, b []byte) (a GetDataArgs, fast bool, err error) {
	t.Helper()
	fast = tookFastPath(b)
	sc, err := a.unmarshalJSON(b)
	var std GetDataArgs
	stdSc, stdErr := std.unmarshalJSONStd(b)
	if !reflect.DeepEqual(a, std) || !reflect.DeepEqual(sc, stdSc) || fmt.Sprint(err) != fmt.Sprint(stdErr) {
		t.Fatalf("%s (fast %v):\n got %#v scope %q err %v\nwant %#v scope %q err %v", b, fast, a, sc, err, std, stdSc, stdErr)
	}
	return a, fast, err
}

// The common shapes take the fast path; whatever encoding/json reads
// differently (another case, an unknown key, null, escapes, ...) falls back
// to it and decodes as before.
func TestGetDataArgsJSONFastPath(t *testing.T) {
	for _, c := range []struct {
		args string
		fast bool
	}{
		{smallArgsJSON, true},
		{` { "table" : "trade" , "labels" : { "region" : [ "eu" , "us" ] , "desk" : [ ] } , "limit" : 0 } `, true},
		{`{"table":"trade","columns":["time","sym"],"groupBy":[],"agg":[["n","count"],["px","avg","price"]],` +
			`"sortCols":["-n"],"limit":10,"scope":{"assembly":"eu","x":[1,"\"}",null]}}`, true},
		{`{"table":"tråde","labels":{},"agg":[],"scope":"eu"}`, true},
		{`{}`, true},
		{`{"table":"trade","startTS":"yesterday"}`, true}, // the same error, from fromJSON
		{`{"Table":"trade","limit":1}`, false},            // encoding/json matches keys in any case
		{`{"table":"trade","opts":{"x":1},"limit":1}`, false},
		{`{"table":"trade","filter":[["=","sym","A"]]}`, false},
		{`{"table":"a","table":"b"}`, false},
		{`{"table":"trade","labels":{"a":"x","a":"y"}}`, false},
		{`{"table":null,"limit":1}`, false},
		{`{"table":"trade","scope":null}`, false},
		{`{"table":"tr\u0061de"}`, false},
		{"{\"table\":\"tr\xffde\"}", false},
		{`{"table":"trade","limit":1e2}`, false},
		{`{"table":"trade","limit":-1}`, false},
		{`{"table":"trade","limit":1.0}`, false},
		{`{"table":"trade","limit":01}`, false},
		{`{"table":"trade","limit":99999999999999999999}`, false},
		{`{"table":"trade","labels":{"a":1}}`, false},
		{`{"table":"trade"} x`, false},
		{`{"table":"trade",}`, false},
		{`{"table":"trade","scope":{"a":}}`, false},
		{`["table"]`, false},
	} {
		a, fast, err := decodeBothJSON(t, []byte(c.args))
		if fast != c.fast {
			t.Errorf("%s: fast path %v, want %v (%+v, %v)", c.args, fast, c.fast, a, err)
		}
	}
	a, fast, err := decodeBothJSON(t, []byte(smallArgsJSON))
	want := GetDataArgs{Table: "trade", StartTS: time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC),
		EndTS: time.Date(2026, 11, 24, 12, 1, 0, 0, time.UTC), Labels: LabelSelector{"region": {"eu"}}, Limit: 1}
	if !fast || err != nil || !reflect.DeepEqual(a, want) {
		t.Fatalf("small request: fast %v, %+v, %v", fast, a, err)
	}
	// Another case or an unknown key: read by encoding/json as before.
	a, fast, err = decodeBothJSON(t, []byte(`{"Table":"trade","Limit":1,"opts":{},"labels":{"region":"eu"}}`))
	if fast || err != nil || a.Table != "trade" || a.Limit != 1 || !reflect.DeepEqual(a.Labels, LabelSelector{"region": {"eu"}}) {
		t.Fatalf("fallback: fast %v, %+v, %v", fast, a, err)
	}
}

// Whatever the fast path accepts, encoding/json accepts too and decodes to
// the same arguments, scope and error.
func FuzzGetDataArgsJSONFastPath(f *testing.F) {
	b, _ := json.Marshal(sampleArgs())
	f.Add(b)
	b, _ = json.Marshal(GetDataArgs{Table: "t", Columns: []string{"a"}, GroupBy: []string{"b"}, Agg: []AggSpec{{"n", AggCount, ""}}, SortCols: []string{"-n"}})
	f.Add(b)
	f.Add([]byte(smallArgsJSON))
	f.Add([]byte(`{"table":"trade","labels":{"region":["eu","us"],"desk":"fx"},"limit":10,"scope":{"assembly":"eu"}}`))
	f.Add([]byte(` {"columns":[],"agg":[["a","sum","b"]],"scope":[1,{"a":"\""}],"startTS":"2024-01-02T01:00:00+01:00"}`))
	f.Add([]byte(`{"Table":"x","labels":{"a":null},"scope":"é","limit":0}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		if !tookFastPath(data) {
			return
		}
		var a GetDataArgs
		sc, err := a.unmarshalJSON(data)
		var w getDataArgsJSON
		if jerr := json.Unmarshal(data, &w); jerr != nil {
			t.Fatalf("fast path accepted %q, encoding/json refuses it: %v", data, jerr)
		}
		var std GetDataArgs
		stdSc, stdErr := std.unmarshalJSONStd(data)
		if !reflect.DeepEqual(a, std) || !reflect.DeepEqual(sc, stdSc) || fmt.Sprint(err) != fmt.Sprint(stdErr) {
			t.Fatalf("%q:\nfast %#v scope %q err %v\n std %#v scope %q err %v", data, a, sc, err, std, stdSc, stdErr)
		}
	})
}
