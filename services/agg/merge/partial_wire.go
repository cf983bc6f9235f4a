package merge

import (
	"encoding/binary"
	"errors"
	"math"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/sg-project/sg/messages"
)

// The hand codec of Partial (issue 10): the reflection codec's omitempty
// checks cost a DAP about 6 allocations a partial, and its decode, with the
// pre-scan it needs, about a quarter of the Agg's CPU on a small request.
// The encoder writes exactly the reflection encoder's bytes (older Aggs read
// them): a map of the fields that are not empty, in declaration order, ints
// compact, the []int64 and []float64 of aggregation states as fixed-width
// int64 and float64 values. The decoder reads the form the encoder writes
// (a row partial's; an aggregated one's with its states) and hands anything
// else (a version 1 partial's times, a key it does not know or repeated, a
// nil, an integer in another form) to the reflection decoder, whose results
// and errors are therefore the decoder's in every case.

// encodePartialWire writes p (as forWire left it) as the reflection encoder
// does.
func encodePartialWire(enc *msgpack.Encoder, p *Partial) error {
	n := 3 // v, r, k
	for _, used := range [...]bool{len(p.Times) > 0, p.TimesCol != 0, p.Aggregated, p.Groups != 0, len(p.Aggs) > 0} {
		if used {
			n++
		}
	}
	if err := enc.EncodeMapLen(n); err != nil {
		return err
	}
	if err := encodeKeyInt(enc, "v", int64(p.Version)); err != nil {
		return err
	}
	if err := enc.EncodeString("r"); err != nil {
		return err
	}
	if err := p.Rows.EncodeMsgpack(enc); err != nil {
		return err
	}
	if len(p.Times) > 0 {
		if err := enc.EncodeString("t"); err != nil {
			return err
		}
		if err := p.Times.EncodeMsgpack(enc); err != nil {
			return err
		}
	}
	if p.TimesCol != 0 {
		if err := encodeKeyInt(enc, "tc", int64(p.TimesCol)); err != nil {
			return err
		}
	}
	if p.Aggregated {
		if err := enc.EncodeString("g"); err != nil {
			return err
		}
		if err := enc.EncodeBool(true); err != nil {
			return err
		}
	}
	if p.Groups != 0 {
		if err := encodeKeyInt(enc, "n", int64(p.Groups)); err != nil {
			return err
		}
	}
	if err := enc.EncodeString("k"); err != nil {
		return err
	}
	if err := p.Keys.EncodeMsgpack(enc); err != nil {
		return err
	}
	if len(p.Aggs) > 0 {
		if err := enc.EncodeString("a"); err != nil {
			return err
		}
		if err := enc.EncodeArrayLen(len(p.Aggs)); err != nil {
			return err
		}
		for i := range p.Aggs {
			if err := encodeAggState(enc, &p.Aggs[i]); err != nil {
				return err
			}
		}
	}
	return nil
}

func encodeKeyInt(enc *msgpack.Encoder, key string, v int64) error {
	if err := enc.EncodeString(key); err != nil {
		return err
	}
	return enc.EncodeInt(v)
}

// encodeAggState writes s as the reflection encoder does.
func encodeAggState(enc *msgpack.Encoder, s *AggState) error {
	n := 3 // m, f, w
	for _, used := range [...]bool{s.Type != 0, len(s.Count) > 0, len(s.IntSum) > 0, len(s.FloatSum) > 0, len(s.Special) > 0, len(s.Time) > 0} {
		if used {
			n++
		}
	}
	if err := enc.EncodeMapLen(n); err != nil {
		return err
	}
	if err := enc.EncodeString("m"); err != nil {
		return err
	}
	if err := enc.EncodeString(s.Name); err != nil {
		return err
	}
	if err := enc.EncodeString("f"); err != nil {
		return err
	}
	if err := enc.EncodeString(string(s.Func)); err != nil {
		return err
	}
	if s.Type != 0 {
		if err := enc.EncodeString("y"); err != nil {
			return err
		}
		if err := enc.EncodeUint8(uint8(s.Type)); err != nil { // a uint8 field: not compact
			return err
		}
	}
	if err := encodeInt64s(enc, "c", s.Count); err != nil {
		return err
	}
	if err := encodeInt64s(enc, "i", s.IntSum); err != nil {
		return err
	}
	if len(s.FloatSum) > 0 {
		if err := enc.EncodeString("s"); err != nil {
			return err
		}
		if err := enc.EncodeArrayLen(len(s.FloatSum)); err != nil {
			return err
		}
		for _, fs := range s.FloatSum {
			if err := encodeFloat64s(enc, fs); err != nil {
				return err
			}
		}
	}
	if len(s.Special) > 0 {
		if err := enc.EncodeString("x"); err != nil {
			return err
		}
		if err := encodeFloat64s(enc, s.Special); err != nil {
			return err
		}
	}
	if err := enc.EncodeString("w"); err != nil {
		return err
	}
	if err := s.Value.EncodeMsgpack(enc); err != nil {
		return err
	}
	return encodeInt64s(enc, "z", s.Time)
}

// encodeInt64s writes key and vals, unless vals is empty (omitempty), each
// value as the 9 bytes of a msgpack int64 (the reflection encoder's int64).
func encodeInt64s(enc *msgpack.Encoder, key string, vals []int64) error {
	if len(vals) == 0 {
		return nil
	}
	if err := enc.EncodeString(key); err != nil {
		return err
	}
	if err := enc.EncodeArrayLen(len(vals)); err != nil {
		return err
	}
	for _, v := range vals {
		if err := enc.EncodeInt64(v); err != nil {
			return err
		}
	}
	return nil
}

// encodeFloat64s writes vals as the reflection encoder writes a []float64:
// nil for a nil slice.
func encodeFloat64s(enc *msgpack.Encoder, vals []float64) error {
	if vals == nil {
		return enc.EncodeNil()
	}
	if err := enc.EncodeArrayLen(len(vals)); err != nil {
		return err
	}
	for _, v := range vals {
		if err := enc.EncodeFloat64(v); err != nil {
			return err
		}
	}
	return nil
}

// errNotHand: the bytes are not in the form decodePartialWire reads; the
// reflection decoder decides what they are.
var errNotHand = errors.New("not the hand decoder's form")

// wireIn reads msgpack from b. Each length is checked against the bytes
// left before it is used; nothing is allocated in proportion to one.
type wireIn struct {
	b   []byte
	pos int
}

func (r *wireIn) code() (byte, bool) {
	if r.pos >= len(r.b) {
		return 0, false
	}
	c := r.b[r.pos]
	r.pos++
	return c, true
}

// be reads a big-endian unsigned integer of w bytes.
func (r *wireIn) be(w int) (uint64, bool) {
	if len(r.b)-r.pos < w {
		return 0, false
	}
	var v uint64
	for _, x := range r.b[r.pos : r.pos+w] {
		v = v<<8 | uint64(x)
	}
	r.pos += w
	return v, true
}

// mapLen reads a map's length, at most the bytes left over 2 (a key and a
// value take a byte each).
func (r *wireIn) mapLen() (int, bool) {
	c, ok := r.code()
	var n uint64
	switch {
	case !ok:
		return 0, false
	case c >= 0x80 && c <= 0x8f:
		n = uint64(c & 0x0f)
	case c == 0xde:
		n, ok = r.be(2)
	case c == 0xdf:
		n, ok = r.be(4)
	default:
		return 0, false
	}
	if !ok || n > uint64(len(r.b)-r.pos)/2 {
		return 0, false
	}
	return int(n), true
}

// arrayLen reads an array's length, at most the bytes left.
func (r *wireIn) arrayLen() (int, bool) {
	c, ok := r.code()
	var n uint64
	switch {
	case !ok:
		return 0, false
	case c >= 0x90 && c <= 0x9f:
		n = uint64(c & 0x0f)
	case c == 0xdc:
		n, ok = r.be(2)
	case c == 0xdd:
		n, ok = r.be(4)
	default:
		return 0, false
	}
	if !ok || n > uint64(len(r.b)-r.pos) {
		return 0, false
	}
	return int(n), true
}

// key reads a short key (a fixstr: every key of Partial's and AggState's
// form), shared with b.
func (r *wireIn) key() ([]byte, bool) {
	c, ok := r.code()
	if !ok || c < 0xa0 || c > 0xbf {
		return nil, false
	}
	n := int(c & 0x1f)
	if len(r.b)-r.pos < n {
		return nil, false
	}
	k := r.b[r.pos : r.pos+n]
	r.pos += n
	return k, true
}

// int reads an integer that fits an int64 (a uint64 above it, which the
// reflection decoder wraps, is left to it).
func (r *wireIn) int() (int64, bool) {
	c, ok := r.code()
	if !ok {
		return 0, false
	}
	switch {
	case c <= 0x7f:
		return int64(c), true
	case c >= 0xe0:
		return int64(int8(c)), true
	}
	var w int
	switch c {
	case 0xcc, 0xd0:
		w = 1
	case 0xcd, 0xd1:
		w = 2
	case 0xce, 0xd2:
		w = 4
	case 0xcf, 0xd3:
		w = 8
	default:
		return 0, false
	}
	u, ok := r.be(w)
	if !ok {
		return 0, false
	}
	switch c {
	case 0xd0:
		return int64(int8(u)), true
	case 0xd1:
		return int64(int16(u)), true
	case 0xd2:
		return int64(int32(u)), true
	case 0xd3:
		return int64(u), true
	case 0xcf:
		if u > math.MaxInt64 {
			return 0, false
		}
	}
	return int64(u), true
}

// bin reads a bin's bytes (shared with b).
func (r *wireIn) bin() ([]byte, bool) {
	c, ok := r.code()
	var n uint64
	switch {
	case !ok:
		return nil, false
	case c == 0xc4:
		n, ok = r.be(1)
	case c == 0xc5:
		n, ok = r.be(2)
	case c == 0xc6:
		n, ok = r.be(4)
	default:
		return nil, false
	}
	if !ok || n > uint64(len(r.b)-r.pos) {
		return nil, false
	}
	b := r.b[r.pos : r.pos+int(n)]
	r.pos += int(n)
	return b, true
}

// table reads a table as messages.DecodeCoded does, at depth 1 of the
// partial (its own nesting allowed one level less). The empty table (an
// aggregated partial's rows, a row partial's keys) is read here.
func (r *wireIn) table(t *messages.Table) bool {
	if rest := r.b[r.pos:]; len(rest) >= 3 && rest[0] == 0x92 && rest[1] == messages.TableVersion && rest[2] == 0x90 {
		*t = messages.Table{Columns: []messages.Column{}} // as the table decoder leaves it: not nil
		r.pos += 3
		return true
	}
	tab, n, err := messages.DecodeTableCoded(r.b[r.pos:], messages.Limits{MaxDepth: messages.MaxDepth - 1})
	if err != nil {
		return false
	}
	*t, r.pos = tab, r.pos+n
	return true
}

// times reads Times as Times.DecodeMsgpack does their version 2 form
// ([count, bin of varints]); the version 1 form is not read here.
func (r *wireIn) times(t *Times) bool {
	if n, ok := r.arrayLen(); !ok || n != 2 {
		return false
	}
	count, ok := r.int()
	if !ok {
		return false
	}
	b, ok := r.bin()
	if !ok || count < 0 || int64(len(b)) < count {
		return false
	}
	out := make([]int64, count)
	if messages.ReadVarints(out, b, true) != nil {
		return false
	}
	*t = out
	return true
}

// str reads a string (a str: the reflection decoder reads a bin too).
func (r *wireIn) str() (string, bool) {
	c, ok := r.code()
	var n uint64
	switch {
	case !ok:
		return "", false
	case c >= 0xa0 && c <= 0xbf:
		n = uint64(c & 0x1f)
	case c == 0xd9:
		n, ok = r.be(1)
	case c == 0xda:
		n, ok = r.be(2)
	case c == 0xdb:
		n, ok = r.be(4)
	default:
		return "", false
	}
	if !ok || n > uint64(len(r.b)-r.pos) {
		return "", false
	}
	s := string(r.b[r.pos : r.pos+int(n)])
	r.pos += int(n)
	return s, true
}

// int64s reads an array of integers as the reflection decoder reads an
// []int64 (an empty array: empty, not nil). A nil is left to it.
func (r *wireIn) int64s(p *[]int64) bool {
	n, ok := r.arrayLen()
	if !ok {
		return false
	}
	out := make([]int64, n)
	for i := range out {
		if out[i], ok = r.int(); !ok {
			return false
		}
	}
	*p = out
	return true
}

// float64s reads an array of float64 values (nil: a nil slice) as the
// reflection decoder reads a []float64; other numbers are left to it.
func (r *wireIn) float64s(p *[]float64) bool {
	if r.pos < len(r.b) && r.b[r.pos] == 0xc0 {
		r.pos++
		*p = nil
		return true
	}
	n, ok := r.arrayLen()
	if !ok || n > (len(r.b)-r.pos)/9 {
		return false
	}
	out := make([]float64, n)
	for i := range out {
		if r.b[r.pos] != 0xcb {
			return false
		}
		out[i] = math.Float64frombits(binary.BigEndian.Uint64(r.b[r.pos+1:]))
		r.pos += 9
	}
	*p = out
	return true
}

// aggStates reads the aggregation states as the reflection decoder does
// (messages.RegisterGrowingSlice: grown as they arrive, an empty one
// refused, which is left to it).
func (r *wireIn) aggStates(p *[]AggState) bool {
	n, ok := r.arrayLen()
	if !ok {
		return false
	}
	out := make([]AggState, 0, min(n, 16))
	for range n {
		out = append(out, AggState{})
		if !r.aggState(&out[len(out)-1]) {
			return false
		}
	}
	*p = out
	return true
}

// aggState reads one state in the form encodeAggState writes.
func (r *wireIn) aggState(s *AggState) bool {
	n, ok := r.mapLen()
	if !ok || n == 0 {
		return false
	}
	var seen uint16
	for range n {
		k, ok := r.key()
		if !ok || len(k) != 1 {
			return false
		}
		var bit uint16
		switch k[0] {
		case 'm':
			bit = 1
			s.Name, ok = r.str()
		case 'f':
			bit = 2
			var f string
			f, ok = r.str()
			s.Func = messages.AggFunc(f)
		case 'y':
			bit = 4
			c, ok2 := r.code()
			switch {
			case ok2 && c <= 0x7f:
				s.Type = messages.ColumnType(c)
			case ok2 && c == 0xcc:
				var v uint64
				v, ok = r.be(1)
				s.Type = messages.ColumnType(v)
			default:
				ok = false
			}
		case 'c':
			bit = 8
			ok = r.int64s(&s.Count)
		case 'i':
			bit = 16
			ok = r.int64s(&s.IntSum)
		case 's':
			bit = 32
			var m int
			if m, ok = r.arrayLen(); ok {
				s.FloatSum = make([][]float64, m)
				for i := 0; i < m && ok; i++ {
					ok = r.float64s(&s.FloatSum[i])
				}
			}
		case 'x':
			bit = 64
			ok = r.pos < len(r.b) && r.b[r.pos] != 0xc0 && r.float64s(&s.Special)
		case 'w':
			bit = 128
			ok = r.table(&s.Value)
		case 'z':
			bit = 256
			ok = r.int64s(&s.Time)
		default:
			return false
		}
		if !ok || seen&bit != 0 {
			return false
		}
		seen |= bit
	}
	return true
}

// decodePartialWire decodes b as the reflection decoder would, or returns
// errNotHand for any bytes not in the encoder's form (see above).
func decodePartialWire(b []byte, p *Partial) error {
	r := wireIn{b: b}
	n, ok := r.mapLen()
	if !ok {
		return errNotHand
	}
	var seen uint8
	for range n {
		k, ok := r.key()
		if !ok {
			return errNotHand
		}
		var bit uint8
		switch string(k) { // no allocation: the keys are constants
		case "v":
			bit = 1
			v, ok2 := r.int()
			p.Version, ok = int(v), ok2
		case "r":
			bit = 2
			ok = r.table(&p.Rows)
		case "t":
			bit = 4
			ok = r.times(&p.Times)
		case "tc":
			bit = 8
			v, ok2 := r.int()
			p.TimesCol, ok = int(v), ok2
		case "g":
			bit = 16
			c, ok2 := r.code()
			p.Aggregated, ok = c == 0xc3, ok2 && (c == 0xc2 || c == 0xc3)
		case "n":
			bit = 32
			v, ok2 := r.int()
			p.Groups, ok = int(v), ok2
		case "k":
			bit = 64
			ok = r.table(&p.Keys)
		case "a":
			bit = 128
			ok = r.aggStates(&p.Aggs)
		default:
			return errNotHand
		}
		if !ok || seen&bit != 0 {
			return errNotHand
		}
		seen |= bit
	}
	if r.pos != len(b) {
		return errNotHand
	}
	return nil
}
