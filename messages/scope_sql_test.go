package messages

import (
	"errors"
	"strings"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
)

func TestScopeFromArgs(t *testing.T) {
	mp := func(v any) []byte {
		b, err := msgpack.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	for _, c := range []struct {
		name    string
		content Content
		args    []byte
		want    Scope
		ok      bool
		err     string
	}{
		{"json object", ContentJSON, []byte(`{"table":"t","scope":{"assembly":"eu","tier":"hdb"}}`), Scope{Assembly: "eu", Tier: TierHDB}, true, ""},
		{"json none", ContentJSON, []byte(`{"table":"t"}`), Scope{}, false, ""},
		{"json null", ContentJSON, []byte(`{"scope":null}`), Scope{}, false, ""},
		{"json string", ContentJSON, []byte(`{"scope":"eu"}`), Scope{}, false, "got a string"},
		{"json number", ContentJSON, []byte(`{"scope":5}`), Scope{}, false, "got a number"},
		// Every other key of the wrong type for each API (getData's table and
		// limit, ping's labels, sql's query): the bad scope is still named.
		{"json bad scope, other keys of the wrong type", ContentJSON,
			[]byte(`{"table":5,"limit":"5","labels":[],"query":5,"scope":"eu"}`), Scope{}, false, "got a string"},
		{"msgpack map", ContentMsgpack, mp(map[string]any{"t": "x", "scope": map[string]any{"assembly": "us"}}), Scope{Assembly: "us"}, true, ""},
		{"msgpack none", ContentMsgpack, mp(map[string]any{"t": "x"}), Scope{}, false, ""},
		{"msgpack nil", ContentMsgpack, mp(map[string]any{"scope": nil}), Scope{}, false, ""},
		{"msgpack list", ContentMsgpack, mp(map[string]any{"scope": []string{"eu"}}), Scope{}, false, "must be a map"},
		{"msgpack string args", ContentMsgpack, mp("SELECT 1"), Scope{}, false, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, ok, err := ScopeFromArgs(c.content, c.args)
			if c.content == ContentJSON {
				// The GW takes a JSON caller's scope from the API decoder's
				// one parse: the same scope, or the same error, for every API.
				_, gd, _ := DecodeGetDataArgsJSONScope(c.args)
				_, pg, _ := DecodePingArgsJSONScope(c.args)
				_, sq, _ := DecodeSQLArgsScope(ContentJSON, c.args)
				for api, raw := range map[string][]byte{"getData": gd, "ping": pg, "sql": sq} {
					g, o, e := ScopeFromJSON(raw)
					if g != got || o != ok || (e == nil) != (err == nil) || (e != nil && e.Error() != err.Error()) {
						t.Errorf("%s: from its decoder's parse %+v %v %v, ScopeFromArgs %+v %v %v", api, g, o, e, got, ok, err)
					}
				}
			}
			if c.err != "" {
				if err == nil || !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("err %v, want one containing %q", err, c.err)
				}
				return
			}
			if err != nil || ok != c.ok || got != c.want {
				t.Fatalf("got %+v %v %v, want %+v %v", got, ok, err, c.want, c.ok)
			}
		})
	}
}

func TestDecodeSQLArgs(t *testing.T) {
	q := "SELECT * FROM trade"
	objMP, _ := msgpack.Marshal(map[string]string{"query": q})
	strMP, _ := msgpack.Marshal(q)
	for name, c := range map[string]struct {
		content Content
		b       []byte
	}{
		"json object": {ContentJSON, []byte(`{"query":"` + q + `"}`)},
		"json string": {ContentJSON, []byte(`"` + q + `"`)},
		"msgpack map": {ContentMsgpack, objMP},
		"msgpack str": {ContentMsgpack, strMP},
	} {
		a, err := DecodeSQLArgs(c.content, c.b)
		if err != nil || a.Query != q {
			t.Errorf("%s: %+v %v", name, a, err)
		}
	}
	for name, b := range map[string][]byte{
		"empty":    []byte(`{"query":"  "}`),
		"no query": []byte(`{"sql":"x"}`),
		"number":   []byte(`5`),
		"too long": []byte(`{"query":"` + strings.Repeat("x", MaxSQLBytes+1) + `"}`),
	} {
		if _, err := DecodeSQLArgs(ContentJSON, b); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}
