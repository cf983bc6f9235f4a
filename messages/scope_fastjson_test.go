package messages

import (
	"bytes"
	"encoding/json"
	"fmt"
	"testing"
)

// scopeFromJSONStd is ScopeFromJSON with encoding/json only (as it was
// before parseScopeJSONFast): the reference the fast path must agree with.
func scopeFromJSONStd(raw json.RawMessage) (s Scope, ok bool, err error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return s, false, nil
	}
	if raw[0] != '{' {
		return s, false, invalid("request arguments", "scope must be an object such as {\"assembly\":\"eu\"}, got %s", jsonKind(raw[0]))
	}
	if err := json.Unmarshal(raw, &s); err != nil {
		return s, false, invalid("request arguments", "scope: %v", err)
	}
	return s, true, nil
}

// The common shapes take the fast path; whatever encoding/json reads
// differently falls back to it. Either way ScopeFromJSON answers as
// encoding/json does.
func TestScopeJSONFastPath(t *testing.T) {
	for _, c := range []struct {
		raw  string
		fast bool
	}{
		{`{"assembly":"eu"}`, true},
		{` { "assembly" : "eu" , "tier" : "hdb" } `, true},
		{`{"tier":"rdb","assembly":"asia"}`, true},
		{`{"assembly":"europé"}`, true},
		{`{}`, true},
		{`{"tier":"nonsense"}`, true}, // valid JSON; the header's Validate refuses it
		{`{"Assembly":"eu"}`, false},  // encoding/json matches keys in any case
		{`{"assembly":"eu","x":1}`, false},
		{`{"assembly":"a","assembly":"b"}`, false},
		{`{"assembly":null}`, false},
		{`{"assembly":"\u0065u"}`, false},
		{"{\"assembly\":\"e\xffu\"}", false},
		{`{"assembly":5}`, false},
		{`{"assembly":"eu"} x`, false},
		{`{"assembly":"eu",}`, false},
		{`{"assembly":"eu"`, false},
		{`["eu"]`, false},
	} {
		_, fast := parseScopeJSONFast([]byte(c.raw))
		if fast != c.fast {
			t.Errorf("%s: fast path %v, want %v", c.raw, fast, c.fast)
		}
		s, ok, err := ScopeFromJSON(json.RawMessage(c.raw))
		ws, wok, werr := scopeFromJSONStd(json.RawMessage(c.raw))
		if s != ws || ok != wok || fmt.Sprint(err) != fmt.Sprint(werr) {
			t.Errorf("%s: %+v %v %v, encoding/json %+v %v %v", c.raw, s, ok, err, ws, wok, werr)
		}
	}
	// The common scope costs its strings only (encoding/json: 7 allocations).
	raw := json.RawMessage(`{"assembly":"eu","tier":"hdb"}`)
	if n := testing.AllocsPerRun(100, func() {
		if s, ok, err := ScopeFromJSON(raw); !ok || err != nil || s.Assembly != "eu" {
			t.Fatal(s, ok, err)
		}
	}); n > 2 {
		t.Errorf("ScopeFromJSON(%s): %.0f allocations, want at most 2", raw, n)
	}
}

// Whatever the fast path accepts, encoding/json accepts too and decodes to
// the same scope; ScopeFromJSON answers as encoding/json alone does on
// everything.
func FuzzScopeJSONFastPath(f *testing.F) {
	for _, s := range []string{`{"assembly":"eu"}`, ` {"tier":"hdb" ,"assembly":"eu"}`, `{}`, `{"Tier":"x"}`,
		`{"assembly":"\"","tier":null}`, `{"assembly":"é"}`, `null`, `"eu"`, `{"assembly":["eu"]}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		s, ok, err := ScopeFromJSON(data)
		ws, wok, werr := scopeFromJSONStd(data)
		if s != ws || ok != wok || fmt.Sprint(err) != fmt.Sprint(werr) {
			t.Fatalf("%q: %+v %v %v, encoding/json %+v %v %v", data, s, ok, err, ws, wok, werr)
		}
		fs, fast := parseScopeJSONFast(data)
		if !fast {
			return
		}
		var js Scope
		if jerr := json.Unmarshal(data, &js); jerr != nil || js != fs {
			t.Fatalf("fast path read %q as %+v, encoding/json %+v %v", data, fs, js, jerr)
		}
	})
}

// BenchmarkScopeFromJSON is the GW's read of a JSON caller's scope.
//
//	go test ./messages -run '^$' -bench ScopeFromJSON -benchmem
func BenchmarkScopeFromJSON(b *testing.B) {
	raw := json.RawMessage(`{"assembly":"eu","tier":"hdb"}`)
	for _, c := range []struct {
		name string
		f    func(json.RawMessage) (Scope, bool, error)
	}{{"ScopeFromJSON", ScopeFromJSON}, {"encoding/json", scopeFromJSONStd}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if s, ok, err := c.f(raw); !ok || err != nil || s.Tier != TierHDB {
					b.Fatal(s, ok, err)
				}
			}
		})
	}
}
