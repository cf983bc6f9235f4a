package messages

import (
	"fmt"
	"reflect"

	"github.com/vmihailenco/msgpack/v5"
	"github.com/vmihailenco/msgpack/v5/msgpcode"
)

// The msgpack library makes a slice of structs at the length an array claims
// before it decodes one element. The pre-scan (CheckMsgpack) bounds that
// length by the bytes present, but n one-byte elements (nil, {}, 0) still
// cost n times the struct's size. sg's own slices of structs are therefore
// decoded here instead: they grow as elements arrive, and an element that is
// nil or an empty map or array (no sg struct is ever sent so) ends the decode.
func init() {
	RegisterGrowingSlice[TableInfo]()
	RegisterGrowingSlice[ColumnSpec]()
	RegisterGrowingSlice[Filter]()
	RegisterGrowingSlice[AggSpec]()
	RegisterGrowingSlice[PortionRef]()
	RegisterGrowingSlice[AggDoneEntry]()
}

// firstSliceCap is the capacity a decoded slice starts with, whatever the
// array claims.
const firstSliceCap = 16

// RegisterGrowingSlice makes msgpack decode every []T that way. Call it from
// an init function of T's package, for a struct type T that is never sent as
// nil or as an empty map or array.
func RegisterGrowingSlice[T any]() {
	msgpack.Register([]T(nil), nil, func(d *msgpack.Decoder, v reflect.Value) error {
		n, err := d.DecodeArrayLen()
		if err != nil {
			return err
		}
		if n < 0 {
			v.Set(reflect.Zero(v.Type()))
			return nil
		}
		out := make([]T, 0, min(n, firstSliceCap))
		for i := range n {
			c, err := d.PeekCode()
			if err != nil {
				return err
			}
			if c == msgpcode.Nil || c == msgpcode.FixedMapLow || c == msgpcode.FixedArrayLow {
				return fmt.Errorf("element %d of %d of a %T is empty (0x%02x)", i, n, out, c)
			}
			var e T
			if err := d.Decode(&e); err != nil {
				return fmt.Errorf("element %d of %d of a %T: %w", i, n, out, err)
			}
			out = append(out, e)
		}
		v.Set(reflect.ValueOf(out))
		return nil
	})
}
