package messages

import (
	"bytes"
	"testing"
	"unsafe"

	"github.com/vmihailenco/msgpack/v5"
)

// RawMsgpack is on the wire what msgpack.RawMessage is, and decodes to the same
// bytes, through Decode (the fast path) and through a plain msgpack decoder.
func TestRawMsgpackMatchesRawMessage(t *testing.T) {
	type withRaw struct {
		A string     `msgpack:"a"`
		P RawMsgpack `msgpack:"p,omitempty"`
		Z int        `msgpack:"z"`
	}
	type withLib struct {
		A string             `msgpack:"a"`
		P msgpack.RawMessage `msgpack:"p,omitempty"`
		Z int                `msgpack:"z"`
	}
	tbl := NewTable([]ColumnSpec{{Name: "sym", Type: TypeSymbol}, {Name: "px", Type: TypeFloat}})
	for i := range 100 {
		if err := tbl.AppendRow("s"+string(rune('a'+i%26)), float64(i)); err != nil {
			t.Fatal(err)
		}
	}
	tb, err := msgpack.Marshal(&tbl)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range [][]byte{nil, {0xc0}, {0x01}, tb, mustMarshal(t, map[string]any{"x": []any{1, "two", map[string]any{"k": nil}}})} {
		libBytes, err := msgpack.Marshal(withLib{A: "x", P: p, Z: 7})
		if err != nil {
			t.Fatal(err)
		}
		ours, err := Encode(&withRaw{A: "x", P: p, Z: 7})
		if err != nil || !bytes.Equal(ours, libBytes) {
			t.Fatalf("encoding differs from msgpack.RawMessage's (%v)", err)
		}
		var viaDecode withRaw
		if err := Decode(ours, &viaDecode); err != nil {
			t.Fatal(err)
		}
		var viaLib withLib
		if err := msgpack.Unmarshal(libBytes, &viaLib); err != nil {
			t.Fatal(err)
		}
		var viaPlain withRaw
		if err := msgpack.Unmarshal(ours, &viaPlain); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(viaDecode.P, viaLib.P) || !bytes.Equal(viaPlain.P, viaLib.P) || viaDecode.Z != 7 || viaPlain.Z != 7 {
			t.Fatalf("payload %x: Decode %x, plain %x, msgpack.RawMessage %x", p, []byte(viaDecode.P), []byte(viaPlain.P), []byte(viaLib.P))
		}
		if len(p) > 0 && len(viaDecode.P) > 0 && &viaDecode.P[0] == &ours[bytes.Index(ours, viaDecode.P)] {
			t.Fatal("the payload aliases the message's bytes")
		}
	}
}

func mustMarshal(t *testing.T, v any) []byte {
	t.Helper()
	b, err := msgpack.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// DecodeValidAliasing shares a partial result's payload with the bytes it
// decoded (a copy less of a large partial at the Agg); DecodeValid copies it,
// so a caller that reuses its buffer is safe. Both decode the same message.
func TestDecodeValidAliasingSharesPayload(t *testing.T) {
	pr := PartialResult{V: PortionVersion, RequestID: "req", PortionID: 1, Attempt: 1, DAPID: "d", Status: StatusOK,
		Payload: RawMsgpack(envArgs())}
	data, err := Encode(&pr)
	if err != nil {
		t.Fatal(err)
	}
	within := func(b []byte) bool {
		p, lo, hi := unsafe.Pointer(unsafe.SliceData(b)), unsafe.Pointer(unsafe.SliceData(data)), unsafe.Pointer(&data[len(data)-1])
		return uintptr(p) >= uintptr(lo) && uintptr(p) <= uintptr(hi)
	}
	shared, err := DecodeValidAliasing[PartialResult](data)
	if err != nil || !bytes.Equal(shared.Payload, pr.Payload) || !within(shared.Payload) || cap(shared.Payload) != len(shared.Payload) {
		t.Fatalf("aliasing decode: %v, payload equal %v, shared %v", err, bytes.Equal(shared.Payload, pr.Payload), within(shared.Payload))
	}
	copied, err := DecodeValid[PartialResult](data)
	if err != nil || !bytes.Equal(copied.Payload, pr.Payload) || within(copied.Payload) {
		t.Fatalf("decode: %v, payload equal %v, shared %v", err, bytes.Equal(copied.Payload, pr.Payload), within(copied.Payload))
	}
}
