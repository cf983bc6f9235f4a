package messages

import (
	"bytes"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"
)

func TestCheckMsgpackAcceptsEveryType(t *testing.T) {
	vals := []any{
		nil, true, false, 0, 1, 127, 128, -1, -32, -33, 255, 256, 65535, 65536, int64(math.MaxInt64), int64(math.MinInt64),
		uint64(math.MaxUint64), float32(1.5), 2.5, "", "x", strings.Repeat("s", 31), strings.Repeat("s", 32),
		strings.Repeat("s", 300), strings.Repeat("s", 70000), []byte{}, []byte("bin"), bytes.Repeat([]byte{1}, 300),
		bytes.Repeat([]byte{1}, 70000), []any{}, []any{1, "a", nil}, make([]any, 20), make([]any, 70000),
		map[string]any{}, map[string]any{"a": 1}, map[string]any{"a": []any{map[string]any{"b": []byte("c")}}},
		time.Unix(1, 0), time.Unix(1, 5), time.Unix(1<<40, 5),
	}
	big := map[string]any{}
	for i := range 20 {
		big[strings.Repeat("k", i+1)] = i
	}
	vals = append(vals, big)
	for _, s := range envSamples() {
		vals = append(vals, s)
	}
	for _, v := range vals {
		b, err := msgpack.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		if err := CheckMsgpack(b, MessageLimits); err != nil {
			t.Errorf("%T %.40v: %v", v, v, err)
		}
	}
	// Every ext form, hand-made.
	for _, b := range [][]byte{
		{0xd4, 1, 0}, {0xd5, 1, 0, 0}, {0xd6, 1, 0, 0, 0, 0}, {0xd7, 1, 0, 0, 0, 0, 0, 0, 0, 0},
		append([]byte{0xd8, 1}, make([]byte, 16)...), {0xc7, 2, 1, 0, 0}, {0xc8, 0, 1, 1, 9}, {0xc9, 0, 0, 0, 0, 1},
	} {
		if err := CheckMsgpack(b, MessageLimits); err != nil {
			t.Errorf("% x: %v", b, err)
		}
	}
}

func TestCheckMsgpackRefuses(t *testing.T) {
	nested := func(depth int) []byte { return append(bytes.Repeat([]byte{0x91}, depth), 0xc0) }
	for _, c := range []struct {
		name string
		data []byte
		want string
	}{
		{"empty", nil, "truncated"},
		{"the 13-byte message", hugeTables, "announces 4294967295 values"},
		{"map32 of 2^32-1 entries", []byte{0xdf, 0xff, 0xff, 0xff, 0xff}, "announces 8589934590 values"},
		{"array16 one short", append([]byte{0xdc, 0, 3}, 1, 2), "announces 3 values"},
		{"outer values count too", []byte{0x92, 0x92, 1, 2}, "announces 2 values, only 2 bytes are left for them and 1 values pending"},
		{"str32 claiming 4 GB", []byte{0xdb, 0xff, 0xff, 0xff, 0xff, 'a'}, "announces 4294967300 bytes"},
		{"bin32 claiming 4 GB", []byte{0xc6, 0xff, 0xff, 0xff, 0xff}, "announces"},
		{"ext32 claiming 4 GB", []byte{0xc9, 0xff, 0xff, 0xff, 0xff, 1}, "announces"},
		{"fixstr truncated", []byte{0xa5, 'a'}, "announces 6 bytes, 2 are left"},
		{"float64 truncated", []byte{0xcb, 0, 0}, "announces 9 bytes"},
		{"truncated length", []byte{0xdd, 0, 0}, "truncated length field"},
		{"0xc1", []byte{0xc1}, "never used"},
		{"trailing", []byte{1, 2}, "1 trailing bytes"},
		{"33 deep", nested(33), "nested deeper than 32"},
		{"33 deep, empty innermost", append(bytes.Repeat([]byte{0x91}, 32), 0x90), "nested deeper than 32"},
		{"map missing a value", []byte{0x81, 0xa1, 'k'}, "truncated: 1 more values"},
	} {
		err := CheckMsgpack(c.data, MessageLimits)
		if !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want ErrMalformed with %q", c.name, err, c.want)
		}
	}
	if err := CheckMsgpack(nested(32), MessageLimits); err != nil {
		t.Errorf("32 deep: %v", err)
	}
	if err := CheckMsgpack(nested(40), Limits{MaxDepth: 40}); err != nil {
		t.Errorf("40 deep with MaxDepth 40: %v", err)
	}
	many, _ := msgpack.Marshal(make([]any, 100))
	if err := CheckMsgpack(many, Limits{MaxElements: 100}); !errors.Is(err, ErrMalformed) {
		t.Errorf("101 values with MaxElements 100: %v", err)
	}
	if err := CheckMsgpack(many, Limits{MaxElements: 101}); err != nil {
		t.Errorf("101 values with MaxElements 101: %v", err)
	}
}

func TestCheckJSON(t *testing.T) {
	for _, ok := range []string{
		``, `1`, `"a"`, `{}`, `[]`, `{"a":[1,2,{"b":"]}\"["}]}`, strings.Repeat("[", 32) + strings.Repeat("]", 32),
		`{"header":{"api":"getData"},"payload":{"table":"t","filter":[["=","x",[1,2]]]}}`,
	} {
		if err := CheckJSON([]byte(ok), MessageLimits); err != nil {
			t.Errorf("%.60s: %v", ok, err)
		}
	}
	deep := strings.Repeat(`{"a":`, 1<<20/5) + "1" + strings.Repeat("}", 1<<20/5)
	for _, c := range []struct{ data, want string }{
		{strings.Repeat("[", 33) + strings.Repeat("]", 33), "nested deeper than 32"},
		{deep, "nested deeper than 32"},
		{`[}`, "unbalanced"},
		{`]`, "unbalanced"},
		{`[1,2`, "1 unclosed"},
		{`"abc`, "unterminated string"},
		{`"abc\"`, "unterminated string"},
	} {
		err := CheckJSON([]byte(c.data), MessageLimits)
		if !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%.40s: %v, want ErrMalformed with %q", c.data, err, c.want)
		}
	}
	if err := CheckJSON([]byte(`[1,2,3]`), Limits{MaxElements: 3}); !errors.Is(err, ErrMalformed) {
		t.Errorf("4 values with MaxElements 3: %v", err)
	}
}

// TestCheckMsgpackNoAlloc: the scan itself allocates nothing on success.
func TestCheckMsgpackNoAlloc(t *testing.T) {
	b, _ := Encode(envPtr(envRegistration()))
	if n := testing.AllocsPerRun(100, func() { _ = CheckMsgpack(b, MessageLimits) }); n != 0 {
		t.Fatalf("%v allocations per scan", n)
	}
}
