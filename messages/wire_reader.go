package messages

// WireReader is this package's bounded msgpack reader (wire.go), for the
// hand decoder of a message of another package (merge.DecodePartial): so
// that each check on hostile input has one home. Every length is checked
// against the bytes left before it is used, maps and arrays nest at most
// lim's depth, and their values count against lim's element cap. Errors
// say at which byte the reader stopped and why.
type WireReader struct{ r wireReader }

// NewWireReader returns a reader of b within lim.
func NewWireReader(b []byte, lim Limits) WireReader { return WireReader{newWireReader(b, lim)} }

// MapLen opens a map and returns its entries; nil is -1 (nothing opened).
// Close it with End once its entries are read.
func (r *WireReader) MapLen() (int, error) { return r.r.containerLen(&mapCodes) }

// ArrayLen is MapLen for an array.
func (r *WireReader) ArrayLen() (int, error) { return r.r.containerLen(&arrayCodes) }

// End closes the map or array opened last.
func (r *WireReader) End() { r.r.depth-- }

// Bytes reads a str or bin without copying it (nil: none); the bytes are
// the input's.
func (r *WireReader) Bytes() ([]byte, error) { return r.r.bytesTemp() }

// Str reads a str or bin as a string (nil is "", as for the reflection
// decoder).
func (r *WireReader) Str() (string, error) { return r.r.str() }

// Int64 reads an integer of any msgpack form that fits an int64 (nil is 0,
// as for the reflection decoder).
func (r *WireReader) Int64() (int64, error) { return r.r.int64() }

// Bool reads a bool (nil is false, as for the reflection decoder).
func (r *WireReader) Bool() (bool, error) {
	var v bool
	err := r.r.boolean(&v)
	return v, err
}

// Rest returns the bytes not read yet, shared with the input: for a value
// in a form the caller reads itself (a table: DecodeTableCoded), passed
// then with Take.
func (r *WireReader) Rest() []byte { return r.r.b[r.r.pos:] }

// Take returns the next n bytes, shared with the input, and passes them;
// not ok: fewer are left (nothing passed). What they hold counts against
// neither the depth nor the element cap: the caller bounds it.
func (r *WireReader) Take(n int) (b []byte, ok bool) { return r.r.take(n) }
