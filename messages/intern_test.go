package messages

import (
	"strings"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
)

// decodeStringRecent reads what DecodeString reads, in every string form
// and the forms it leaves to DecodeString (nil, bin, str32, cut short),
// whether the string is in recentStrings or not, and leaves the reader
// where DecodeString does.
func TestDecodeStringRecentIsDecodeString(t *testing.T) {
	enc := func(v any) []byte {
		b, err := msgpack.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	cases := map[string][]byte{
		"empty": enc(""), "fixstr": enc("sym"), "str8": enc(strings.Repeat("a", 32)),
		"str8 long": enc(strings.Repeat("b", 200)), "str16": enc(strings.Repeat("c", 300)),
		"str32": append([]byte{0xdb, 0, 0, 0, 3}, "abc"...), "nil": {0xc0}, "bin": enc([]byte("bin")),
		"int": enc(7), "cut fixstr": enc("sym")[:2], "cut str8": enc(strings.Repeat("d", 40))[:10],
	}
	for name, b := range cases {
		for round := range 2 { // the second finds it in the table
			in := append(b, 0x01) // a value after: the reader must stop before it
			var want, got sliceReader
			want.reset(in)
			got.reset(in)
			wd, gd := msgpack.NewDecoder(&want), msgpack.NewDecoder(&got)
			ws, werr := wd.DecodeString()
			gs, gerr := decodeStringRecent(gd)
			if ws != gs || (werr == nil) != (gerr == nil) || (werr == nil && want.pos != got.pos) {
				t.Errorf("%s (round %d): got %q, %v at %d; DecodeString %q, %v at %d", name, round, gs, gerr, got.pos, ws, werr, want.pos)
			}
		}
	}
}

// A string that shares its slot with another is still itself.
func TestRecentStringsCollide(t *testing.T) {
	for i := range 4 * recentSlots {
		s := strings.Repeat("x", i%maxRecentString) + string(rune('a'+i%26))
		if got := recentStrings.str([]byte(s)); got != s {
			t.Fatalf("%q read as %q", s, got)
		}
	}
}
