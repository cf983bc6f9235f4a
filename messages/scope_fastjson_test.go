package messages

import (
	"encoding/json"
	"testing"
)

// The common shapes take the fast path, and read as encoding/json reads
// them; whatever encoding/json reads differently falls back to it.
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
		fs, fast := parseScopeJSONFast([]byte(c.raw))
		if fast != c.fast {
			t.Errorf("%s: fast path %v, want %v", c.raw, fast, c.fast)
		}
		if ws, wok, werr := scopeFromJSONStd([]byte(c.raw)); fast && (fs != ws || !wok || werr != nil) {
			t.Errorf("%s: fast path %+v, encoding/json %+v %v %v", c.raw, fs, ws, wok, werr)
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
// the same scope.
func FuzzScopeJSONFastPath(f *testing.F) {
	for _, s := range []string{`{"assembly":"eu"}`, ` {"tier":"hdb" ,"assembly":"eu"}`, `{}`, `{"Tier":"x"}`,
		`{"assembly":"\"","tier":null}`, `{"assembly":"é"}`, `null`, `"eu"`, `{"assembly":["eu"]}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		fs, fast := parseScopeJSONFast(data)
		if !fast {
			return
		}
		if ws, ok, err := scopeFromJSONStd(data); !ok || err != nil || ws != fs {
			t.Fatalf("fast path read %q as %+v, encoding/json %+v %v", data, fs, ws, err)
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
	}{{"ScopeFromJSON", ScopeFromJSON}, {"encoding/json", func(raw json.RawMessage) (Scope, bool, error) { return scopeFromJSONStd(raw) }}} {
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
