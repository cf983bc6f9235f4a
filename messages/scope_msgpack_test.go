package messages

import (
	"reflect"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
)

// The msgpack decoders of the APIs' arguments give the raw scope from their
// own walk (DecodeGetDataArgsMsgpackScope and the like): the scope it reads
// is the one ScopeFromArgs' walk of its own finds, the last of a key given
// twice included.
func TestMsgpackArgsScopeFromTheDecodersWalk(t *testing.T) {
	mp := func(kv ...any) []byte {
		t.Helper()
		// By hand: a map with a key given twice, in this order.
		w := wireWriter{}
		w.mapLen(len(kv) / 2)
		for i := 0; i < len(kv); i += 2 {
			w.str(kv[i].(string))
			b, err := msgpack.Marshal(kv[i+1])
			if err != nil {
				t.Fatal(err)
			}
			w.b = append(w.b, b...)
		}
		return w.b
	}
	eu := map[string]any{"assembly": "eu", "tier": "hdb"}
	us := map[string]any{"assembly": "us"}
	decoders := map[string]func([]byte) ([]byte, error){
		"getData": func(b []byte) ([]byte, error) { _, sc, err := DecodeGetDataArgsMsgpackScope(b); return sc, err },
		"ping":    func(b []byte) ([]byte, error) { _, sc, err := DecodePingArgsMsgpackScope(b); return sc, err },
		"sql": func(b []byte) ([]byte, error) {
			_, sc, err := DecodeSQLArgsScope(ContentMsgpack, b)
			return sc, err
		},
	}
	args := map[string][]any{
		"getData": {"v", 1, "t", "trade"},
		"ping":    {"labels", map[string][]string{"region": {"eu"}}},
		"sql":     {"query", "SELECT * FROM trade"},
	}
	for api, decode := range decoders {
		for name, c := range map[string]struct {
			kv   []any
			want Scope
			ok   bool
		}{
			"first":   {append([]any{"scope", eu}, args[api]...), Scope{Assembly: "eu", Tier: TierHDB}, true},
			"last":    {append(append([]any{}, args[api]...), "scope", us), Scope{Assembly: "us"}, true},
			"twice":   {append([]any{"scope", eu}, append(append([]any{}, args[api]...), "scope", us)...), Scope{Assembly: "us"}, true},
			"nil":     {append([]any{"scope", nil}, args[api]...), Scope{}, false},
			"none":    {args[api], Scope{}, false},
			"a table": {append(append([]any{}, args[api]...), "table", "x", "scope", eu), Scope{Assembly: "eu", Tier: TierHDB}, true},
		} {
			b := mp(c.kv...)
			sc, err := decode(b)
			if err != nil {
				t.Fatalf("%s %s: %v", api, name, err)
			}
			got, ok, err := ScopeFromMsgpack(sc)
			if err != nil || ok != c.ok || got != c.want {
				t.Errorf("%s %s: scope %+v %v %v, want %+v %v", api, name, got, ok, err, c.want, c.ok)
			}
			walked, wok, werr := ScopeFromArgs(ContentMsgpack, b)
			if walked != got || wok != ok || werr != nil {
				t.Errorf("%s %s: the decoder's scope %+v %v, ScopeFromArgs' %+v %v %v", api, name, got, ok, walked, wok, werr)
			}
		}
		// A scope that is not a map comes back raw; ScopeFromMsgpack names it.
		sc, err := decode(mp(append([]any{"scope", "eu"}, args[api]...)...))
		if err != nil {
			t.Fatalf("%s: %v", api, err)
		}
		if _, _, err := ScopeFromMsgpack(sc); err == nil {
			t.Errorf("%s: a string scope accepted", api)
		}
	}
}

// FuzzMsgpackArgsScope holds the decoders that give the scope in their walk
// to what they replaced: the arguments as before (ping and sql: as the
// library reads them), the scope as ScopeFromArgs' walk of its own finds it,
// within allocBound.
func FuzzMsgpackArgsScope(f *testing.F) {
	for _, v := range []any{
		map[string]any{"v": 1, "t": "t", "scope": map[string]any{"assembly": "eu", "tier": "hdb", "x": []int{1}}},
		map[string]any{"labels": map[string][]string{"k": {"a", "b"}, "e": {}}, "scope": map[string]any{"assembly": "eu"}},
		map[string]any{"labels": nil, "scope": nil, "query": "SELECT 1"},
		map[string]any{"query": []byte("SELECT 1"), "scope": "eu"},
		map[string]any{"labels": map[string]any{"k": "a"}},
		[]any{map[string][]string{"k": {"a"}}},
		"SELECT 1",
	} {
		b, _ := msgpack.Marshal(v)
		f.Add(b)
	}
	for _, b := range hostileMsgpack {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		sameScope := func(api string, sc []byte) {
			t.Helper()
			s, ok, err := ScopeFromMsgpack(sc)
			ws, wok, werr := ScopeFromArgs(ContentMsgpack, data)
			if s != ws || ok != wok || (err == nil) != (werr == nil) || (err != nil && err.Error() != werr.Error()) {
				t.Fatalf("%s % x: scope from the decoder (%+v, %v, %v), from a walk (%+v, %v, %v)", api, data, s, ok, err, ws, wok, werr)
			}
		}
		var (
			ga   GetDataArgs
			gsc  []byte
			gerr error
		)
		checkAlloc(t, "getData scope", data, func() { ga, gsc, gerr = DecodeGetDataArgsMsgpackScope(data) })
		if ga2, err := DecodeGetDataArgsMsgpack(data); (err == nil) != (gerr == nil) || !reflect.DeepEqual(ga, ga2) {
			t.Fatalf("getData % x: with the scope (%+v, %v), without (%+v, %v)", data, ga, gerr, ga2, err)
		}
		if gerr == nil {
			sameScope("getData", gsc)
		}

		var (
			pa   PingArgs
			psc  []byte
			perr error
		)
		checkAlloc(t, "ping scope", data, func() { pa, psc, perr = DecodePingArgsMsgpackScope(data) })
		if len(data) > 0 {
			var ref PingArgs
			rerr := DecodeLimited(data, &ref, MessageLimits)
			if (perr == nil) != (rerr == nil) || (perr == nil && !reflect.DeepEqual(pa, ref)) {
				t.Fatalf("ping % x: hand (%+v, %v), library (%+v, %v)", data, pa, perr, ref, rerr)
			}
		}
		if perr == nil {
			sameScope("ping", psc)
		}

		var ssc []byte
		var serr error
		checkAlloc(t, "sql scope", data, func() { _, ssc, serr = DecodeSQLArgsScope(ContentMsgpack, data) })
		if len(data) > 0 && isMsgpackMap(data[0]) {
			var hand, ref SQLArgs
			_, herr := hand.decodeMsgpackMap(data)
			rerr := DecodeLimited(data, &ref, MessageLimits)
			if (herr == nil) != (rerr == nil) || (herr == nil && hand != ref) {
				t.Fatalf("sql % x: hand (%+v, %v), library (%+v, %v)", data, hand, herr, ref, rerr)
			}
		}
		if serr == nil {
			sameScope("sql", ssc)
		}
	})
}
