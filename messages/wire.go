package messages

// Hand-written msgpack for the messages of a small request's path (issue 10):
// the library's reflection cost about a fifth of a small request's CPU in sg's
// own code. The bytes are those the reflection codec reads and writes (the
// same keys as the msgpack tags, the same omitempty), so builds with and
// without these codecs interoperate; wire_test.go holds each type to its
// reflection twin.
//
// The reader enforces the bounds of limits.go itself, so a type with a hand
// decoder skips the pre-scan: every length is checked against the bytes
// left before anything is allocated, maps nest at most lim.MaxDepth deep,
// the values of the message count against lim.MaxElements, and an unknown
// key's value is skipped by the allocation-free scanner.

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"sync"

	"github.com/vmihailenco/msgpack/v5"
)

// wireEncoder is implemented by the messages with a hand encoder.
type wireEncoder interface{ appendWire(w *wireWriter) }

// wireDecoder is implemented by the messages with a hand decoder.
type wireDecoder interface{ decodeWire(r *wireReader) error }

// wireWriter appends msgpack to b.
type wireWriter struct{ b []byte }

var wireWriters = sync.Pool{New: func() any { return &wireWriter{b: make([]byte, 0, 1024)} }}

// encodeWire encodes v into a buffer of its own: a pooled scratch buffer
// copied once at its final size, or, for a message larger than the pool
// keeps (a partial result's table), a buffer of hint bytes.
func encodeWire(v wireEncoder, hint int) []byte {
	if hint > maxPooledBuffer {
		w := wireWriter{b: make([]byte, 0, hint)}
		v.appendWire(&w)
		return w.b
	}
	w := wireWriters.Get().(*wireWriter)
	w.b = w.b[:0]
	v.appendWire(w)
	out := bytes.Clone(w.b)
	if cap(w.b) <= maxPooledBuffer {
		wireWriters.Put(w)
	}
	return out
}

func (w *wireWriter) nil() { w.b = append(w.b, 0xc0) }

func (w *wireWriter) bool(v bool) {
	if v {
		w.b = append(w.b, 0xc3)
		return
	}
	w.b = append(w.b, 0xc2)
}

// uint writes v in the fewest bytes (the reflection encoder writes the
// field's full width; both decoders read either).
func (w *wireWriter) uint(v uint64) {
	switch {
	case v <= 0x7f:
		w.b = append(w.b, byte(v))
	case v <= math.MaxUint8:
		w.b = append(w.b, 0xcc, byte(v))
	case v <= math.MaxUint16:
		w.b = binary.BigEndian.AppendUint16(append(w.b, 0xcd), uint16(v))
	case v <= math.MaxUint32:
		w.b = binary.BigEndian.AppendUint32(append(w.b, 0xce), uint32(v))
	default:
		w.b = binary.BigEndian.AppendUint64(append(w.b, 0xcf), v)
	}
}

func (w *wireWriter) int(v int64) {
	switch {
	case v >= 0:
		w.uint(uint64(v))
	case v >= -32:
		w.b = append(w.b, byte(v))
	case v >= math.MinInt8:
		w.b = append(w.b, 0xd0, byte(v))
	case v >= math.MinInt16:
		w.b = binary.BigEndian.AppendUint16(append(w.b, 0xd1), uint16(v))
	case v >= math.MinInt32:
		w.b = binary.BigEndian.AppendUint32(append(w.b, 0xd2), uint32(v))
	default:
		w.b = binary.BigEndian.AppendUint64(append(w.b, 0xd3), uint64(v))
	}
}

func (w *wireWriter) str(s string) {
	n := len(s)
	switch {
	case n <= 31:
		w.b = append(w.b, 0xa0|byte(n))
	case n <= math.MaxUint8:
		w.b = append(w.b, 0xd9, byte(n))
	case n <= math.MaxUint16:
		w.b = binary.BigEndian.AppendUint16(append(w.b, 0xda), uint16(n))
	default:
		w.b = binary.BigEndian.AppendUint32(append(w.b, 0xdb), uint32(n))
	}
	w.b = append(w.b, s...)
}

// portionID writes the id's wire form, a str of at most 20 digits (a
// fixstr), in place.
func (w *wireWriter) portionID(id PortionID) {
	at := len(w.b)
	w.b = id.appendWire(append(w.b, 0xa0))
	w.b[at] |= byte(len(w.b) - at - 1)
}

// bin writes b as a msgpack bin, as the reflection encoder writes a []byte.
func (w *wireWriter) bin(b []byte) {
	n := len(b)
	switch {
	case n <= math.MaxUint8:
		w.b = append(w.b, 0xc4, byte(n))
	case n <= math.MaxUint16:
		w.b = binary.BigEndian.AppendUint16(append(w.b, 0xc5), uint16(n))
	default:
		w.b = binary.BigEndian.AppendUint32(append(w.b, 0xc6), uint32(n))
	}
	w.b = append(w.b, b...)
}

func (w *wireWriter) mapLen(n int) {
	switch {
	case n <= 15:
		w.b = append(w.b, 0x80|byte(n))
	case n <= math.MaxUint16:
		w.b = binary.BigEndian.AppendUint16(append(w.b, 0xde), uint16(n))
	default:
		w.b = binary.BigEndian.AppendUint32(append(w.b, 0xdf), uint32(n))
	}
}

func (w *wireWriter) arrayLen(n int) {
	switch {
	case n <= 15:
		w.b = append(w.b, 0x90|byte(n))
	case n <= math.MaxUint16:
		w.b = binary.BigEndian.AppendUint16(append(w.b, 0xdc), uint16(n))
	default:
		w.b = binary.BigEndian.AppendUint32(append(w.b, 0xdd), uint32(n))
	}
}

// labels writes a label set; nil is nil, as the reflection encoder writes it.
func (w *wireWriter) labels(l LabelSet) {
	if l == nil {
		w.nil()
		return
	}
	w.mapLen(len(l))
	for k, v := range l {
		w.str(k)
		w.str(v)
	}
}

func (w *wireWriter) timeRange(r TimeRange) {
	f := w.openMap()
	f.int("s", r.Start)
	f.int("e", r.End)
	f.close()
}

func (w *wireWriter) status(s Status) {
	f := w.openMap()
	f.statusFields(s)
	f.close()
}

func (w *wireWriter) refs(refs []PortionRef) {
	if refs == nil {
		w.nil()
		return
	}
	w.arrayLen(len(refs))
	for _, r := range refs {
		f := w.openMap()
		f.portionID("id", r.PortionID)
		f.uint("att", uint64(r.Attempt))
		f.close()
	}
}

// wireMap writes the fields of one struct as a map whose length is known
// when it closes: each field method writes a key and its value and counts it.
type wireMap struct {
	w     *wireWriter
	start int // where the map's header byte is
	n     int
}

// openMap reserves a fixmap header; close patches it, or widens it to a
// map 16 for a struct of more than 15 fields written.
func (w *wireWriter) openMap() wireMap {
	w.b = append(w.b, 0x80)
	return wireMap{w: w, start: len(w.b) - 1}
}

func (f *wireMap) close() {
	if f.n <= 15 {
		f.w.b[f.start] = 0x80 | byte(f.n)
		return
	}
	// Rare (a struct with more than 15 fields set): move the fields up by
	// the two bytes of a map 16's length.
	f.w.b = append(f.w.b, 0, 0)
	copy(f.w.b[f.start+3:], f.w.b[f.start+1:len(f.w.b)-2])
	f.w.b[f.start] = 0xde
	binary.BigEndian.PutUint16(f.w.b[f.start+1:], uint16(f.n))
}

func (f *wireMap) key(k string) {
	f.n++
	f.w.str(k)
}

func (f *wireMap) uint(k string, v uint64) { f.key(k); f.w.uint(v) }
func (f *wireMap) int(k string, v int64)   { f.key(k); f.w.int(v) }
func (f *wireMap) str(k, v string)         { f.key(k); f.w.str(v) }
func (f *wireMap) bool(k string, v bool)   { f.key(k); f.w.bool(v) }

func (f *wireMap) portionID(k string, id PortionID) { f.key(k); f.w.portionID(id) }

func (f *wireMap) uintOmit(k string, v uint64) {
	if v != 0 {
		f.uint(k, v)
	}
}

func (f *wireMap) intOmit(k string, v int64) {
	if v != 0 {
		f.int(k, v)
	}
}

func (f *wireMap) strOmit(k, v string) {
	if v != "" {
		f.str(k, v)
	}
}

func (f *wireMap) boolOmit(k string, v bool) {
	if v {
		f.bool(k, v)
	}
}

// rawOmit writes an embedded msgpack value as is; empty is omitted.
func (f *wireMap) rawOmit(k string, v []byte) {
	if len(v) > 0 {
		f.key(k)
		f.w.b = append(f.w.b, v...)
	}
}

// binOmit writes bytes as a bin; empty is omitted.
func (f *wireMap) binOmit(k string, v []byte) {
	if len(v) > 0 {
		f.key(k)
		f.w.bin(v)
	}
}

func (f *wireMap) labels(k string, l LabelSet) { f.key(k); f.w.labels(l) }

func (f *wireMap) labelsOmit(k string, l LabelSet) {
	if len(l) > 0 {
		f.labels(k, l)
	}
}

func (f *wireMap) refsOmit(k string, refs []PortionRef) {
	if len(refs) > 0 {
		f.key(k)
		f.w.refs(refs)
	}
}

func (f *wireMap) timeRange(k string, r TimeRange) { f.key(k); f.w.timeRange(r) }

func (f *wireMap) status(k string, s Status) { f.key(k); f.w.status(s) }

// statusFields writes rc, ac and ai into the map being written (Status is
// inlined in ResponseHeader).
func (f *wireMap) statusFields(s Status) {
	f.uint("rc", uint64(s.RC))
	f.uint("ac", uint64(s.AC))
	f.strOmit("ai", s.AI)
}

// wireReader reads msgpack from b within limits: see the top of the file.
type wireReader struct {
	b        []byte
	pos      int
	depth    int // maps and arrays open
	maxDepth int
	elems    int  // values announced so far, the top-level one included
	maxElems int  // 0: bounded by the bytes only
	alias    bool // RawMsgpack values share the input (DecodeValidAliasing)
}

func newWireReader(b []byte, lim Limits) wireReader {
	return wireReader{b: b, maxDepth: lim.depth(), elems: 1, maxElems: lim.MaxElements}
}

// decodeWireMessage decodes data into v within lim; data must hold exactly
// one value.
func decodeWireMessage(data []byte, v wireDecoder, lim Limits) error {
	return decodeWireWith(data, lim, false, v.decodeWire)
}

// decodeWireWith runs decode on a pooled reader of data within lim (alias:
// RawMsgpack fields share data); data must hold exactly one value.
func decodeWireWith(data []byte, lim Limits, alias bool, decode func(*wireReader) error) error {
	r := wireReaders.Get().(*wireReader)
	*r = newWireReader(data, lim)
	r.alias = alias
	err := decode(r)
	if n := len(data) - r.pos; err == nil && n > 0 {
		err = fmt.Errorf("%d trailing bytes", n)
	}
	*r = wireReader{}
	wireReaders.Put(r)
	return err
}

// wireReaders: a reader passed to a message's decodeWire (an interface
// call) escapes; pooled, it costs no allocation per message.
var wireReaders = sync.Pool{New: func() any { return new(wireReader) }}

func (r *wireReader) bad(format string, args ...any) error {
	return &scanError{fmt.Sprintf("msgpack at byte %d of %d: ", r.pos, len(r.b)) + fmt.Sprintf(format, args...)}
}

func (r *wireReader) left() int { return len(r.b) - r.pos }

func (r *wireReader) code() (byte, error) {
	c, ok := r.next()
	if !ok {
		return 0, r.noCode()
	}
	return c, nil
}

func (r *wireReader) noCode() error { return r.bad("truncated") }

// next is code for a caller on a hot path (integer): it inlines; not ok,
// nothing is left.
func (r *wireReader) next() (byte, bool) {
	if r.pos >= len(r.b) {
		return 0, false
	}
	c := r.b[r.pos]
	r.pos++
	return c, true
}

// take returns the next n bytes (shared with the input) and passes them;
// not ok: fewer are left (truncated says so). Small enough to inline into
// be, on every wide integer's and length's path.
func (r *wireReader) take(n int) ([]byte, bool) {
	if uint(n) > uint(r.left()) { // n < 0 too
		return nil, false
	}
	start := r.pos
	r.pos += n
	return r.b[start:r.pos], true
}

func (r *wireReader) truncated(n int) error {
	return r.bad("truncated: %d bytes needed, %d left", n, r.left())
}

// be reads a big-endian unsigned integer of w bytes.
func (r *wireReader) be(w int) (uint64, error) {
	b, ok := r.take(w)
	if !ok {
		return 0, r.truncated(w)
	}
	return beUint(b), nil
}

// beUint is the big-endian unsigned integer of 1, 2, 4 or 8 bytes.
func beUint(b []byte) uint64 {
	switch len(b) {
	case 1:
		return uint64(b[0])
	case 2:
		return uint64(binary.BigEndian.Uint16(b))
	case 4:
		return uint64(binary.BigEndian.Uint32(b))
	}
	return binary.BigEndian.Uint64(b)
}

// refuseContainer says which of containerLen's bounds the values of a map
// or an array (a map entry is two) break.
func (r *wireReader) refuseContainer(values int) error {
	switch {
	case values > r.left():
		return r.bad("%d values announced, %d bytes left", values, r.left())
	case r.maxElems > 0 && r.elems+values > r.maxElems:
		return r.bad("more than %d values in one message", r.maxElems)
	}
	return r.bad("nested deeper than %d", r.maxDepth)
}

// mapLen opens a map and returns its entries; nil is -1 (nothing opened).
// Close it with r.depth-- once its entries are read.
func (r *wireReader) mapLen() (int, error) { return r.containerLen(&mapCodes) }

// arrayLen is mapLen for an array.
func (r *wireReader) arrayLen() (int, error) { return r.containerLen(&arrayCodes) }

// containerCodes are the msgpack type codes of one container kind.
type containerCodes struct {
	fix, fixLast, c16, c32 byte
	kind, items            string
	valuesPer              int // values per entry: 2 for a map (key and value)
}

var (
	mapCodes   = containerCodes{fix: 0x80, fixLast: 0x8f, c16: 0xde, c32: 0xdf, kind: "a map", items: "entries", valuesPer: 2}
	arrayCodes = containerCodes{fix: 0x90, fixLast: 0x9f, c16: 0xdc, c32: 0xdd, kind: "an array", items: "values", valuesPer: 1}
)

func (r *wireReader) containerLen(k *containerCodes) (int, error) {
	c, err := r.code()
	if err != nil {
		return 0, err
	}
	var n uint64
	switch {
	case c == 0xc0:
		return -1, nil
	case c >= k.fix && c <= k.fixLast:
		n = uint64(c & 0x0f)
	case c == k.c16:
		n, err = r.be(2)
	case c == k.c32:
		n, err = r.be(4)
	default:
		return 0, r.bad("type 0x%02x where %s was expected", c, k.kind)
	}
	if err != nil {
		return 0, err
	}
	if n > uint64(r.left()) { // before multiplying: no overflow on 32-bit ints
		return 0, r.bad("%s announces %d %s, %d bytes left", k.kind, n, k.items, r.left())
	}
	// The values announced against the bytes left, the element cap and the
	// depth; then the container is open.
	values := k.valuesPer * int(n)
	if values > r.left() || (r.maxElems > 0 && r.elems+values > r.maxElems) || r.depth+1 > r.maxDepth {
		return int(n), r.refuseContainer(values) // out of line: a large array opens many
	}
	r.elems += values
	r.depth++
	return int(n), nil
}

// bytesTemp returns a str's or bin's bytes without copying (nil: none).
// They alias the input: a caller keeps them only as a string conversion.
func (r *wireReader) bytesTemp() ([]byte, error) {
	c, err := r.code()
	if err != nil {
		return nil, err
	}
	var n uint64
	switch {
	case c >= 0xa0 && c <= 0xbf:
		n = uint64(c & 0x1f)
	case c == 0xd9 || c == 0xc4:
		n, err = r.be(1)
	case c == 0xda || c == 0xc5:
		n, err = r.be(2)
	case c == 0xdb || c == 0xc6:
		n, err = r.be(4)
	case c == 0xc0:
		return nil, nil
	default:
		return nil, r.bad("type 0x%02x where a string was expected", c)
	}
	if err != nil {
		return nil, err
	}
	if n > uint64(r.left()) {
		return nil, r.bad("a string announces %d bytes, %d are left", n, r.left())
	}
	b := r.b[r.pos : r.pos+int(n)]
	r.pos += int(n)
	return b, nil
}

// key reads a map key (temporary bytes: compare them as string(k)).
func (r *wireReader) key() ([]byte, error) { return r.bytesTemp() }

func (r *wireReader) str() (string, error) {
	b, err := r.bytesTemp()
	return string(b), err
}

// integer reads any msgpack integer (nil is 0, as for the reflection decoder)
// as a sign and magnitude.
func (r *wireReader) integer() (neg bool, mag uint64, err error) {
	c, ok := r.next()
	if !ok {
		return false, 0, r.noCode()
	}
	var w int // bytes that follow
	switch {
	case c <= 0x7f:
		return false, uint64(c), nil
	case c >= 0xe0:
		return true, uint64(-int64(int8(c))), nil
	case c == 0xc0:
		return false, 0, nil
	case c >= 0xcc && c <= 0xcf:
		w = 1 << (c - 0xcc)
	case c >= 0xd0 && c <= 0xd3:
		w = 1 << (c - 0xd0)
	default:
		return false, 0, r.bad("type 0x%02x where an integer was expected", c)
	}
	// Not be: one call less for each integer of a large array (an
	// aggregated partial's states).
	b, ok := r.take(w)
	if !ok {
		return false, 0, r.truncated(w)
	}
	v := beUint(b)
	if c <= 0xcf {
		return false, v, nil
	}
	shift := 64 - 8*w
	s := int64(v<<shift) >> shift // sign-extend
	if s < 0 {
		return true, uint64(-s), nil // -MinInt64 wraps to its own magnitude
	}
	return false, uint64(s), nil
}

// uintMax reads an unsigned integer of at most max.
func (r *wireReader) uintMax(max uint64) (uint64, error) {
	neg, v, err := r.integer()
	switch {
	case err != nil:
		return 0, err
	case neg && v != 0:
		return 0, r.bad("negative value where an unsigned integer was expected")
	case v > max:
		return 0, r.bad("%d is out of range (max %d)", v, max)
	}
	return v, nil
}

func (r *wireReader) int64() (int64, error) {
	neg, v, err := r.integer()
	switch {
	case err != nil:
		return 0, err
	case neg && v <= 1<<63:
		return int64(-v), nil // v == 1<<63: MinInt64
	case !neg && v <= math.MaxInt64:
		return int64(v), nil
	}
	return 0, r.bad("integer out of the range of int64")
}

func (r *wireReader) u8(p *uint8) error {
	v, err := r.uintMax(math.MaxUint8)
	*p = uint8(v)
	return err
}

func (r *wireReader) u32(p *uint32) error {
	v, err := r.uintMax(math.MaxUint32)
	*p = uint32(v)
	return err
}

func (r *wireReader) u64(p *uint64) error {
	v, err := r.uintMax(math.MaxUint64)
	*p = v
	return err
}

func (r *wireReader) i64(p *int64) error {
	v, err := r.int64()
	*p = v
	return err
}

// intN reads a Go int (64 bits on every platform sg runs on).
func (r *wireReader) intN(p *int) error {
	v, err := r.int64()
	if err == nil && int64(int(v)) != v {
		return r.bad("%d is out of the range of int", v)
	}
	*p = int(v)
	return err
}

func (r *wireReader) code16(p *Code) error {
	v, err := r.uintMax(math.MaxUint16)
	*p = Code(v)
	return err
}

func (r *wireReader) string(p *string) error {
	s, err := r.str()
	*p = s
	return err
}

// portionID reads a portion id's wire form (a str, or nil for none) without
// copying it; anything but the form is an error (ParsePortionID).
func (r *wireReader) portionID(p *PortionID) error {
	b, err := r.bytesTemp()
	if err != nil {
		return err
	}
	if *p, err = parsePortionID(b); err != nil {
		return r.bad("%v", err)
	}
	return nil
}

func (r *wireReader) boolean(p *bool) error {
	c, err := r.code()
	switch {
	case err != nil:
		return err
	case c == 0xc3:
		*p = true
	case c == 0xc2 || c == 0xc0:
		*p = false
	default:
		return r.bad("type 0x%02x where a bool was expected", c)
	}
	return nil
}

// skip passes over one value of any type: the scanner checks it within the
// depth and element budget left, allocating nothing.
func (r *wireReader) skip() error {
	var maxElems uint64
	if r.maxElems > 0 {
		maxElems = uint64(r.maxElems-r.elems) + 1 // the value itself is counted already
	}
	n, elems, err := scanMsgpackCount(r.b[r.pos:], r.maxDepth-r.depth, maxElems)
	if err != nil {
		return err
	}
	r.pos += n
	r.elems += int(elems) - 1
	return nil
}

// raw returns a copy of the next value's bytes (an embedded msgpack value).
func (r *wireReader) raw() ([]byte, error) {
	start := r.pos
	if err := r.skip(); err != nil {
		return nil, err
	}
	return bytes.Clone(r.b[start:r.pos]), nil
}

// rawShared is raw, sharing the reader's bytes instead of copying them when
// it decodes for a receiver that owns them (alias).
func (r *wireReader) rawShared() ([]byte, error) {
	if !r.alias {
		return r.raw()
	}
	start := r.pos
	if err := r.skip(); err != nil {
		return nil, err
	}
	return r.b[start:r.pos:r.pos], nil // an append copies
}

// bytes reads a bin (or str) into a copy of its bytes; nil is nil, as for
// the reflection decoder.
func (r *wireReader) bytes(p *[]byte) error {
	b, err := r.bytesTemp()
	*p = bytes.Clone(b)
	return err
}

// rawMsgpack reads an embedded value (an API's arguments), sharing the
// reader's bytes when it decodes for a receiver that owns them (alias).
func (r *wireReader) rawMsgpack(p *msgpack.RawMessage) error {
	b, err := r.rawShared()
	*p = b
	return err
}

func (r *wireReader) rawSg(p *RawMsgpack) error {
	b, err := r.rawShared()
	*p = b
	return err
}

// labels reads a label set: nil is nil, as for the reflection decoder.
func (r *wireReader) labels(p *LabelSet) error {
	n, err := r.mapLen()
	if err != nil || n < 0 {
		*p = nil
		return err
	}
	l := *p // a key given twice merges, as for the reflection decoder
	if l == nil {
		l = make(LabelSet, n) // n is bounded by the bytes left (two per entry at least)
	}
	for range n {
		k, err := r.str()
		if err != nil {
			return err
		}
		v, err := r.str()
		if err != nil {
			return err
		}
		l[k] = v
	}
	r.depth--
	*p = l
	return nil
}

// wireFields reads the map of the struct at p: each key is handed to field,
// which reads its value (or skips it). Nil sets the struct to zero, as the
// reflection decoder does; a key given twice is read twice, into the same
// value, as there too.
func wireFields[T any](r *wireReader, p *T, typ string, field func(k []byte) error) error {
	n, err := r.mapLen()
	if err != nil {
		return fmt.Errorf("%s: %w", typ, err)
	}
	if n < 0 {
		var zero T
		*p = zero
		return nil
	}
	for range n {
		k, err := r.key()
		if err != nil {
			return fmt.Errorf("%s: key: %w", typ, err)
		}
		if err := field(k); err != nil {
			return fmt.Errorf("%s.%s: %w", typ, truncate(string(k), 32), err)
		}
	}
	r.depth--
	return nil
}

func (r *wireReader) timeRange(p *TimeRange) error {
	return wireFields(r, p, "range", func(k []byte) error {
		switch string(k) {
		case "s":
			return r.i64(&p.Start)
		case "e":
			return r.i64(&p.End)
		}
		return r.skip()
	})
}

// statusField reads one of rc, ac and ai; ok is false for any other key.
func (r *wireReader) statusField(k []byte, s *Status) (ok bool, err error) {
	switch string(k) {
	case "rc":
		return true, r.code16(&s.RC)
	case "ac":
		return true, r.code16(&s.AC)
	case "ai":
		return true, r.string(&s.AI)
	}
	return false, nil
}

func (r *wireReader) status(s *Status) error {
	return wireFields(r, s, "status", func(k []byte) error {
		if ok, err := r.statusField(k, s); ok {
			return err
		}
		return r.skip()
	})
}

// refs reads portion refs.
func (r *wireReader) refs(p *[]PortionRef) error {
	return wireStructs(r, p, "portion refs", func() (ref PortionRef, err error) {
		err = wireFields(r, &ref, "portion ref", func(k []byte) error {
			switch string(k) {
			case "id":
				return r.portionID(&ref.PortionID)
			case "att":
				return r.u32(&ref.Attempt)
			}
			return r.skip()
		})
		return ref, err
	})
}

// wireStructs reads an array of structs as the reflection decoder reads sg's
// slices of structs (slices.go): the slice grows as elements arrive, and an
// empty element (nil, {}, []) is refused, so that one byte never becomes a
// whole struct. elem reads one element.
func wireStructs[T any](r *wireReader, p *[]T, what string, elem func() (T, error)) error {
	n, err := r.arrayLen()
	if err != nil || n < 0 {
		*p = nil
		return err
	}
	out := make([]T, 0, min(n, firstSliceCap))
	for i := range n {
		if r.pos < len(r.b) {
			if c := r.b[r.pos]; c == 0xc0 || c == 0x80 || c == 0x90 {
				return r.bad("element %d of %d %s is empty (0x%02x)", i, n, what, c)
			}
		}
		e, err := elem()
		if err != nil {
			return err
		}
		out = append(out, e)
	}
	r.depth--
	*p = out
	return nil
}

// decodeWireFrom is a hand decoder's msgpack.CustomDecoder for a message
// inside a reflection-decoded one (a dispatch in a PeerPortion, a
// submission in a LogEntry): under Decode the outer pre-scan has checked
// the bytes, which the sliceReader exposes; elsewhere the value is read raw
// by the library first.
func decodeWireFrom(dec *msgpack.Decoder, v wireDecoder) error {
	lim := MessageLimits
	if l, ok := v.(limiter); ok {
		lim = l.decodeLimits()
	}
	if sr, ok := dec.Buffered().(*sliceReader); ok {
		r := wireReaders.Get().(*wireReader)
		*r = newWireReader(sr.data[sr.pos:], lim)
		err := v.decodeWire(r)
		sr.pos += r.pos
		*r = wireReader{}
		wireReaders.Put(r)
		return err
	}
	raw, err := dec.DecodeRaw()
	if err != nil {
		return err
	}
	return decodeWireMessage(raw, v, lim)
}

// encodeWireTo is a hand encoder's msgpack.CustomEncoder.
func encodeWireTo(enc *msgpack.Encoder, v wireEncoder) error {
	w := wireWriters.Get().(*wireWriter)
	w.b = w.b[:0]
	v.appendWire(w)
	err := msgpack.RawMessage(w.b).EncodeMsgpack(enc)
	if cap(w.b) <= maxPooledBuffer {
		wireWriters.Put(w)
	}
	return err
}
