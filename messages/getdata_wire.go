package messages

// The hand codec of GetDataArgs (wire.go): every service of a getData decodes
// its arguments, and the reflection decoder's time extensions and interface
// values were a larger share of the CPU than any envelope. The wire form is
// that of getDataArgsWire's tags: a map with short keys, a filter as
// [op, column, value], an aggregation as [name, function, column], times as
// the msgpack timestamp extension. Where (rare: the sql planner's) stays with
// the library, inside bounds the reader has checked.

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/vmihailenco/msgpack/v5"
)

// timeExtID is msgpack's timestamp extension type.
const timeExtID = -1

func (a GetDataArgs) appendWire(w *wireWriter) {
	f := w.openMap()
	f.int("v", GetDataArgsVersion)
	f.str("t", a.Table)
	if !a.StartTS.IsZero() {
		f.key("s")
		w.time(a.StartTS)
	}
	if !a.EndTS.IsZero() {
		f.key("e")
		w.time(a.EndTS)
	}
	if len(a.Labels) > 0 {
		f.key("l")
		w.mapLen(len(a.Labels))
		for k, vals := range a.Labels {
			w.str(k)
			w.strings(vals)
		}
	}
	if len(a.Filter) > 0 {
		f.key("f")
		w.arrayLen(len(a.Filter))
		for _, x := range a.Filter {
			w.filter(x)
		}
	}
	f.stringsOmit("c", a.Columns)
	f.stringsOmit("g", a.GroupBy)
	if len(a.Agg) > 0 {
		f.key("a")
		w.arrayLen(len(a.Agg))
		for _, s := range a.Agg {
			w.arrayLen(3)
			w.str(s.Name)
			w.str(string(s.Func))
			w.str(s.Column)
		}
	}
	f.stringsOmit("o", a.SortCols)
	f.intOmit("n", int64(a.Limit))
	if a.Where != nil {
		f.key("w")
		w.library(a.Where)
	}
	f.close()
}

func (a *GetDataArgs) decodeWire(r *wireReader) error { return a.decodeWireScope(r, nil) }

// decodeWireScope is decodeWire that also keeps, when sc is not nil, the raw
// value of the arguments' "scope" key (the envelope's own: ScopeFromMsgpack),
// found in the same walk.
func (a *GetDataArgs) decodeWireScope(r *wireReader, sc *[]byte) error {
	v := -1 // absent: as the reflection decoder's zero, refused below
	err := wireFields(r, a, "getData arguments", func(k []byte) error {
		switch string(k) {
		case "v":
			v = 0
			return r.intN(&v)
		case "t":
			return r.string(&a.Table)
		case "s":
			return r.time(&a.StartTS)
		case "e":
			return r.time(&a.EndTS)
		case "l":
			return r.selector(&a.Labels)
		case "f":
			return r.filters(&a.Filter)
		case "c":
			return r.strings(&a.Columns)
		case "g":
			return r.strings(&a.GroupBy)
		case "a":
			return r.aggSpecs(&a.Agg)
		case "o":
			return r.strings(&a.SortCols)
		case "n":
			return r.intN(&a.Limit)
		case "w":
			return r.where(&a.Where)
		case "scope":
			return r.scopeValue(sc)
		}
		return r.skip()
	})
	if err != nil {
		return fmt.Errorf("%w: %w", ErrMalformedGetDataArgs, err)
	}
	if v != GetDataArgsVersion {
		return fmt.Errorf("%w: %w: v%d, this build knows v%d", ErrMalformedGetDataArgs, ErrVersion, max(v, 0), GetDataArgsVersion)
	}
	return nil
}

// EncodeMsgpack implements msgpack.CustomEncoder.
func (a GetDataArgs) EncodeMsgpack(enc *msgpack.Encoder) error { return encodeWireTo(enc, a) }

// DecodeMsgpack implements msgpack.CustomDecoder.
func (a *GetDataArgs) DecodeMsgpack(dec *msgpack.Decoder) error { return decodeWireFrom(dec, a) }

// DecodeGetDataArgsMsgpack decodes bytes from the network within
// MessageLimits. It never panics.
func DecodeGetDataArgsMsgpack(b []byte) (GetDataArgs, error) {
	a, _, err := DecodeGetDataArgsMsgpackScope(b)
	return a, err
}

// DecodeGetDataArgsMsgpackScope is DecodeGetDataArgsMsgpack that also gives
// the raw value of the arguments' "scope" key (the last, if given twice), so
// the GW walks a msgpack caller's arguments once, as
// DecodeGetDataArgsJSONScope parses a JSON caller's once. With an error there
// is no scope: the decoder may have stopped before it (ScopeFromArgs walks for
// it).
func DecodeGetDataArgsMsgpackScope(b []byte) (a GetDataArgs, sc []byte, err error) {
	defer func() {
		if r := recover(); r != nil {
			a, sc, err = GetDataArgs{}, nil, fmt.Errorf("%w: decoder panic: %v", ErrMalformedGetDataArgs, r)
		}
	}()
	if len(b) == 0 {
		return GetDataArgs{}, nil, fmt.Errorf("%w: empty body", ErrMalformedGetDataArgs)
	}
	// decodeWireMessage's steps, with a direct call: through the interface
	// the arguments would escape to the heap.
	r := wireReaders.Get().(*wireReader)
	*r = newWireReader(b, MessageLimits)
	err = a.decodeWireScope(r, &sc)
	if n := len(b) - r.pos; err == nil && n > 0 {
		err = fmt.Errorf("%w: %d trailing bytes", ErrMalformedGetDataArgs, n)
	}
	*r = wireReader{}
	wireReaders.Put(r)
	if err != nil {
		if !errors.Is(err, ErrMalformedGetDataArgs) {
			err = fmt.Errorf("%w: %w", ErrMalformedGetDataArgs, err)
		}
		return GetDataArgs{}, nil, err
	}
	return a, sc, nil
}

// time writes t as the library does: the timestamp extension in 4, 8 or 12
// bytes.
func (w *wireWriter) time(t time.Time) {
	secs := uint64(t.Unix())
	if secs>>34 == 0 {
		data := uint64(t.Nanosecond())<<34 | secs
		if data&0xffffffff00000000 == 0 {
			w.b = binary.BigEndian.AppendUint32(append(w.b, 0xd6, 0xff), uint32(data))
			return
		}
		w.b = binary.BigEndian.AppendUint64(append(w.b, 0xd7, 0xff), data)
		return
	}
	w.b = append(w.b, 0xc7, 12, 0xff)
	w.b = binary.BigEndian.AppendUint32(w.b, uint32(t.Nanosecond()))
	w.b = binary.BigEndian.AppendUint64(w.b, secs)
}

// time reads the timestamp extension (nil: the zero time), in UTC: the
// reflection path converted every time it decoded.
func (r *wireReader) time(p *time.Time) error {
	c, err := r.code()
	if err != nil {
		return err
	}
	var n uint64
	switch c {
	case 0xc0:
		*p = time.Time{}
		return nil
	case 0xd6:
		n = 4
	case 0xd7:
		n = 8
	case 0xc7:
		if n, err = r.be(1); err != nil {
			return err
		}
	default:
		return r.bad("type 0x%02x where a time was expected", c)
	}
	t, err := r.timeBody(n)
	*p = t
	return err
}

// timeBody reads a timestamp extension's type byte and n bytes of data.
func (r *wireReader) timeBody(n uint64) (time.Time, error) {
	typ, err := r.be(1)
	if err != nil {
		return time.Time{}, err
	}
	if int8(typ) != timeExtID {
		return time.Time{}, r.bad("extension type %d where a time (-1) was expected", int8(typ))
	}
	var t time.Time
	switch n {
	case 4:
		sec, err := r.be(4)
		if err != nil {
			return time.Time{}, err
		}
		t = time.Unix(int64(sec), 0)
	case 8:
		data, err := r.be(8)
		if err != nil {
			return time.Time{}, err
		}
		t = time.Unix(int64(data&0x3ffffffff), int64(data>>34))
	case 12:
		nsec, err := r.be(4)
		if err != nil {
			return time.Time{}, err
		}
		sec, err := r.be(8)
		if err != nil {
			return time.Time{}, err
		}
		t = time.Unix(int64(sec), int64(nsec))
	default:
		return time.Time{}, r.bad("a time of %d bytes: want 4, 8 or 12", n)
	}
	if t.IsZero() {
		return time.Time{}, nil
	}
	return t.UTC(), nil
}

func (w *wireWriter) strings(ss []string) {
	if ss == nil {
		w.nil()
		return
	}
	w.arrayLen(len(ss))
	for _, s := range ss {
		w.str(s)
	}
}

func (f *wireMap) stringsOmit(k string, ss []string) {
	if len(ss) > 0 {
		f.key(k)
		f.w.strings(ss)
	}
}

// strings reads a list of strings: nil is nil, [] is empty, as for the
// reflection decoder.
func (r *wireReader) strings(p *[]string) error {
	n, err := r.arrayLen()
	if err != nil || n < 0 {
		*p = nil
		return err
	}
	out := make([]string, n) // n is bounded by the bytes left
	for i := range out {
		if out[i], err = r.str(); err != nil {
			return err
		}
	}
	r.depth--
	*p = out
	return nil
}

func (r *wireReader) selector(p *LabelSelector) error {
	n, err := r.mapLen()
	if err != nil || n < 0 {
		*p = nil
		return err
	}
	s := *p // a key given twice merges, as for the reflection decoder
	if s == nil {
		s = make(LabelSelector, n)
	}
	for range n {
		k, err := r.str()
		if err != nil {
			return err
		}
		var vals []string
		if err := r.strings(&vals); err != nil {
			return fmt.Errorf("label %q: %w", truncate(k, 32), err)
		}
		s[k] = vals
	}
	r.depth--
	*p = s
	return nil
}

// filter writes [op, column, value]; a value of a type a decoder never
// gives (a Go caller's int, say) is written by the library, as before.
func (w *wireWriter) filter(x Filter) {
	w.arrayLen(3)
	w.str(string(x.Op))
	w.str(x.Column)
	w.filterValue(x.Value, 0)
}

func (w *wireWriter) filterValue(v any, depth int) {
	switch x := v.(type) {
	case string:
		w.str(x)
	case int64:
		w.int(x)
	case float64:
		w.b = binary.BigEndian.AppendUint64(append(w.b, 0xcb), math.Float64bits(x))
	case bool:
		w.bool(x)
	case time.Time:
		w.time(x)
	case []any:
		if depth > 0 {
			w.library(x)
			return
		}
		w.arrayLen(len(x))
		for _, e := range x {
			w.filterValue(e, depth+1)
		}
	default:
		w.library(x)
	}
}

// library appends v as the msgpack library encodes it.
func (w *wireWriter) library(v any) {
	b, err := msgpack.Marshal(v)
	if err != nil {
		// Only a type msgpack cannot encode at all (a channel, a func):
		// nil, which every decoder refuses as a filter value.
		w.nil()
		return
	}
	w.b = append(w.b, b...)
}

// elementGuard refuses an empty element of a list of structs (nil, {}, []),
// as the reflection decoder does (slices.go).
func (r *wireReader) elementGuard(i, n int, what string) error {
	if r.pos < len(r.b) {
		if c := r.b[r.pos]; c == 0xc0 || c == 0x80 || c == 0x90 {
			return r.bad("element %d of %d %s is empty (0x%02x)", i, n, what, c)
		}
	}
	return nil
}

func (r *wireReader) filters(p *[]Filter) error {
	n, err := r.arrayLen()
	if err != nil || n < 0 {
		*p = nil
		return err
	}
	out := make([]Filter, 0, min(n, firstSliceCap))
	for i := range n {
		if err := r.elementGuard(i, n, "filters"); err != nil {
			return err
		}
		var x Filter
		if err := r.filter(&x); err != nil {
			return fmt.Errorf("filter %d: %w", i, err)
		}
		out = append(out, x)
	}
	r.depth--
	*p = out
	return nil
}

// filter reads [op, column, value], the value normalised as normalizeValue
// does for the reflection decoder's DecodeInterface.
func (r *wireReader) filter(x *Filter) error {
	n, err := r.arrayLen()
	if err != nil {
		return err
	}
	if n != 3 {
		return r.bad("want [op, column, value], %d elements", n)
	}
	op, err := r.str()
	if err != nil {
		return err
	}
	col, err := r.str()
	if err != nil {
		return err
	}
	v, err := r.filterValue(0)
	if err != nil {
		return err
	}
	r.depth--
	*x = Filter{Op: FilterOp(op), Column: col, Value: v}
	return nil
}

func (r *wireReader) filterValue(depth int) (any, error) {
	if r.pos >= len(r.b) {
		return nil, r.bad("truncated")
	}
	c := r.b[r.pos]
	switch {
	case c <= 0x7f || c >= 0xe0 || (c >= 0xcc && c <= 0xd3):
		return r.int64()
	case (c >= 0xa0 && c <= 0xbf) || (c >= 0xd9 && c <= 0xdb):
		return r.str()
	case c == 0xc2 || c == 0xc3:
		var b bool
		return b, r.boolean(&b)
	case c == 0xca:
		r.pos++
		bits, err := r.be(4)
		return float64(math.Float32frombits(uint32(bits))), err
	case c == 0xcb:
		r.pos++
		bits, err := r.be(8)
		return math.Float64frombits(bits), err
	case c == 0xd6 || c == 0xd7 || c == 0xc7:
		var t time.Time
		return t, r.time(&t)
	case (c >= 0x90 && c <= 0x9f) || c == 0xdc || c == 0xdd:
		if depth > 0 {
			return nil, r.bad("nested lists are not allowed")
		}
		n, err := r.arrayLen()
		if err != nil {
			return nil, err
		}
		out := make([]any, 0, min(n, firstSliceCap))
		for range n {
			e, err := r.filterValue(depth + 1)
			if err != nil {
				return nil, err
			}
			out = append(out, e)
		}
		r.depth--
		return out, nil
	}
	return nil, r.bad("unsupported value type 0x%02x: want a string, number, bool, time or list", c)
}

func (r *wireReader) aggSpecs(p *[]AggSpec) error {
	n, err := r.arrayLen()
	if err != nil || n < 0 {
		*p = nil
		return err
	}
	out := make([]AggSpec, 0, min(n, firstSliceCap))
	for i := range n {
		if err := r.elementGuard(i, n, "aggregations"); err != nil {
			return err
		}
		m, err := r.arrayLen()
		if err != nil {
			return fmt.Errorf("agg %d: %w", i, err)
		}
		if m != 3 {
			return r.bad("agg %d: want [name, function, column], %d elements", i, m)
		}
		var x [3]string
		for j := range x {
			if x[j], err = r.str(); err != nil {
				return fmt.Errorf("agg %d: %w", i, err)
			}
		}
		r.depth--
		out = append(out, AggSpec{Name: x[0], Func: AggFunc(x[1]), Column: x[2]})
	}
	r.depth--
	*p = out
	return nil
}

// where reads a Where with the library, from bytes the scanner has checked
// within the depth and element budget left.
func (r *wireReader) where(p **Where) error {
	if r.pos < len(r.b) && r.b[r.pos] == 0xc0 {
		r.pos++
		*p = nil
		return nil
	}
	start := r.pos
	if err := r.skip(); err != nil {
		return err
	}
	if *p == nil {
		*p = new(Where)
	}
	return DecodeLimited(r.b[start:r.pos], *p, Limits{MaxDepth: max(r.maxDepth-r.depth, 1)})
}
