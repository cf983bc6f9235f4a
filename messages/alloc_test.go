package messages

import (
	"bytes"
	"reflect"
	"runtime"
	"strings"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
)

// allocBound is what decoding n bytes may allocate (limits.go).
func allocBound(n int) uint64 { return uint64(MaxAllocPerByte*n + MaxAllocSlack) }

// allocated runs f and returns the bytes it allocated on the heap. Other
// goroutines count too; the slack of allocBound covers them.
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// checkAlloc fails t when decoding data with f allocated more than
// allocBound(len(data)).
func checkAlloc(t *testing.T, what string, data []byte, f func()) {
	t.Helper()
	got := allocated(f)
	if got > allocBound(len(data)) {
		t.Fatalf("%s: decoding %d bytes allocated %d bytes, bound %d", what, len(data), got, allocBound(len(data)))
	}
}

// msgpackFields lists the msgpack keys of a struct type.
func msgpackFields(typ reflect.Type) []string {
	var out []string
	for i := range typ.NumField() {
		f := typ.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("msgpack"), ",")
		if name == "" || name == "-" {
			continue
		}
		out = append(out, name)
	}
	return out
}

// The worst case the pre-scan leaves: every value 1 byte (nil, {}, 0), in
// every field of every message, each becoming a Go value of its own (a whole
// struct in a slice of structs). Decoding stays within allocBound.
func TestDecodeAllocBoundWorstCases(t *testing.T) {
	const n = 1 << 16
	var samples []any
	samples = append(samples, envSamples()...)
	samples = append(samples, &LiveUpdate{}, &PingArgs{})
	for _, s := range samples {
		typ := reflect.TypeOf(s).Elem()
		for _, field := range msgpackFields(typ) {
			for _, elem := range []byte{0xc0, 0x80, 0x90, 0x00, 0xa0} {
				var buf bytes.Buffer
				enc := msgpack.NewEncoder(&buf)
				_ = enc.EncodeMapLen(1)
				_ = enc.EncodeString(field)
				_ = enc.EncodeArrayLen(n)
				buf.Write(bytes.Repeat([]byte{elem}, n))
				data := buf.Bytes()
				checkAlloc(t, typ.Name()+"."+field, data, func() {
					_ = Decode(data, reflect.New(typ).Interface())
				})
				// The same as a map of n entries.
				buf.Reset()
				_ = enc.EncodeMapLen(1)
				_ = enc.EncodeString(field)
				_ = enc.EncodeMapLen(n / 2)
				for range n / 2 {
					buf.WriteByte(elem)
					buf.WriteByte(elem)
				}
				data = buf.Bytes()
				checkAlloc(t, typ.Name()+"."+field+" (map)", data, func() {
					_ = Decode(data, reflect.New(typ).Interface())
				})
			}
		}
	}
}
