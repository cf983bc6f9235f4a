package messages

import (
	"errors"
	"strings"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
)

// A map hidden in an extension's data, where a label set or selector is
// expected, is refused before the library sizes it: the fuzzer's 7 bytes
// (an array holding a fixext4 whose data is a map 16 header of 14,384
// entries) allocated 1.5 MB; a timestamp's extension and an ext 8 hiding a
// map 32 alike. Real maps and nil decode as before.
func TestLabelMapsRefuseAnExtension(t *testing.T) {
	for _, c := range []struct {
		name string
		data []byte
	}{
		{"the fuzzer's", []byte{0x91, 0xd6, 0x30, 0xde, 0x38, 0x30, 0x30}},
		{"in a timestamp's extension", []byte{0x91, 0xd6, 0xff, 0xde, 0x38, 0x30, 0x30}},
		{"a map 32 in an ext 8", []byte{0x91, 0xc7, 5, 1, 0xdf, 0, 0x0f, 0x42, 0x40}},
	} {
		var a PingArgs
		var err error
		checkAlloc(t, c.name, c.data, func() { err = Decode(c.data, &a) })
		if !errors.Is(err, ErrMalformed) || err == nil || !strings.Contains(err.Error(), errExtForMap.Error()) {
			t.Errorf("%s: %v, want the extension refused", c.name, err)
		}
		var l LabelSet
		if err := msgpack.Unmarshal(c.data[1:], &l); err == nil || !strings.Contains(err.Error(), errExtForMap.Error()) {
			t.Errorf("%s: a label set: %v, want the extension refused", c.name, err)
		}
	}
	for _, v := range []any{
		PingArgs{Labels: LabelSelector{"region": {"eu", "us"}}},
		PingArgs{},
		struct {
			L LabelSet `msgpack:"l"`
		}{LabelSet{"region": "eu"}},
	} {
		b, err := msgpack.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		switch v := v.(type) {
		case PingArgs:
			var got PingArgs
			if err := Decode(b, &got); err != nil || len(got.Labels) != len(v.Labels) || (len(v.Labels) > 0 && len(got.Labels["region"]) != 2) {
				t.Errorf("%+v: decoded %+v, %v", v, got, err)
			}
		default:
			var got struct {
				L LabelSet `msgpack:"l"`
			}
			if err := msgpack.Unmarshal(b, &got); err != nil || got.L["region"] != "eu" {
				t.Errorf("a label set: decoded %+v, %v", got, err)
			}
		}
	}
}
