package merge

import (
	"encoding/binary"
	"errors"
	"math"

	"github.com/vmihailenco/msgpack/v5"
	"github.com/vmihailenco/msgpack/v5/msgpcode"

	"github.com/sg-project/sg/messages"
)

// The hand codec of Partial (issue 10): the reflection codec's omitempty
// checks cost a DAP about 6 allocations a partial, and its decode, with the
// pre-scan it needs, about a quarter of the Agg's CPU on a small request.
// The encoder writes exactly the reflection encoder's bytes (older Aggs read
// them): a map of the fields that are not empty, in declaration order, ints
// compact, the []int64 and []float64 of aggregation states as fixed-width
// int64 and float64 values. The decoder reads the form the encoder writes
// (a row partial's; an aggregated one's with its states), with messages'
// bounded reader, and hands anything else (a version 1 partial's times, a
// key it does not know or repeated, a nil map or array, a number in another
// form than an integer's) to the reflection decoder, whose results and
// errors are therefore the decoder's in every case. What the reader takes
// beyond the encoder's form (a nil integer or string, an integer of any
// width) it reads as the reflection decoder does.

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

// partialIn reads the form of Partial with messages' bounded reader, the
// one home of the checks on hostile msgpack (each length against the bytes
// left before anything is allocated, the depth). Its reads of a field
// report only ok: whatever fails, the reader's errors included, is
// errNotHand, and the reflection decoder decides.
type partialIn struct{ messages.WireReader }

// tableLimits: a partial's tables are read at depth 1 of it (their own
// nesting allowed one level less), as messages.DecodeCoded reads them.
var tableLimits = messages.Limits{MaxDepth: messages.MaxDepth - 1}

// table reads a table as messages.DecodeCoded does. The empty table (an
// aggregated partial's rows, a row partial's keys) is read here.
func (r *partialIn) table(t *messages.Table) bool {
	if rest := r.Rest(); len(rest) >= 3 && rest[0] == 0x92 && rest[1] == messages.TableVersion && rest[2] == 0x90 {
		*t = messages.Table{Columns: []messages.Column{}} // as the table decoder leaves it: not nil
		_, ok := r.Take(3)
		return ok
	}
	tab, n, err := messages.DecodeTableCoded(r.Rest(), tableLimits)
	if err != nil {
		return false
	}
	if _, ok := r.Take(n); !ok {
		return false
	}
	*t = tab
	return true
}

// times reads Times as Times.DecodeMsgpack does their version 2 form
// ([count, bin of varints]); the version 1 form is not read here.
func (r *partialIn) times(t *Times) bool {
	if n, err := r.ArrayLen(); err != nil || n != 2 {
		return false
	}
	count, err := r.Int64()
	if err != nil {
		return false
	}
	if rest := r.Rest(); len(rest) == 0 || !msgpcode.IsBin(rest[0]) { // a str is version 1's error
		return false
	}
	b, err := r.Bytes()
	if err != nil || count < 0 || int64(len(b)) < count {
		return false
	}
	out := make([]int64, count)
	if messages.ReadVarints(out, b, true) != nil {
		return false
	}
	r.End()
	*t = out
	return true
}

// int64s reads an array of integers as the reflection decoder reads an
// []int64 (an empty array: empty, not nil). A nil is left to it.
func (r *partialIn) int64s(p *[]int64) bool {
	n, err := r.ArrayLen()
	if err != nil || n < 0 {
		return false
	}
	out := make([]int64, n)
	for i := range out {
		if out[i], err = r.Int64(); err != nil { // a uint64 above MaxInt64, which the reflection decoder wraps, is left to it
			return false
		}
	}
	r.End()
	*p = out
	return true
}

// float64s reads an array of float64 values (nil: a nil slice) as the
// reflection decoder reads a []float64; other numbers are left to it.
func (r *partialIn) float64s(p *[]float64) bool {
	n, err := r.ArrayLen()
	if err != nil {
		return false
	}
	if n < 0 {
		*p = nil
		return true
	}
	b, ok := r.Take(9 * n) // n is at most the bytes left: no overflow
	if !ok {
		return false
	}
	out := make([]float64, n)
	for i := range out {
		v := b[9*i : 9*i+9]
		if v[0] != 0xcb {
			return false
		}
		out[i] = math.Float64frombits(binary.BigEndian.Uint64(v[1:]))
	}
	r.End()
	*p = out
	return true
}

// aggStates reads the aggregation states as the reflection decoder does
// (messages.RegisterGrowingSlice: grown as they arrive, an empty one
// refused, which is left to it).
func (r *partialIn) aggStates(p *[]AggState) bool {
	n, err := r.ArrayLen()
	if err != nil || n < 0 {
		return false
	}
	out := make([]AggState, 0, min(n, 16))
	for range n {
		out = append(out, AggState{})
		if !r.aggState(&out[len(out)-1]) {
			return false
		}
	}
	r.End()
	*p = out
	return true
}

// aggState reads one state in the form encodeAggState writes.
func (r *partialIn) aggState(s *AggState) bool {
	n, err := r.MapLen()
	if err != nil || n <= 0 { // nil and {} are refused by the reflection decoder
		return false
	}
	var seen uint16
	for range n {
		k, err := r.Bytes()
		if err != nil || len(k) != 1 {
			return false
		}
		var bit uint16
		var ok bool
		switch k[0] {
		case 'm':
			bit = 1
			s.Name, err = r.Str()
			ok = err == nil
		case 'f':
			bit = 2
			f, err := r.Str()
			s.Func, ok = messages.AggFunc(f), err == nil
		case 'y':
			bit = 4
			v, err := r.Int64()
			ok = err == nil && v >= 0 && v <= math.MaxUint8 // others wrap in the reflection decoder
			s.Type = messages.ColumnType(v)
		case 'c':
			bit = 8
			ok = r.int64s(&s.Count)
		case 'i':
			bit = 16
			ok = r.int64s(&s.IntSum)
		case 's':
			bit = 32
			m, err := r.ArrayLen()
			if ok = err == nil && m >= 0; ok {
				s.FloatSum = make([][]float64, m)
				for i := 0; i < m && ok; i++ {
					ok = r.float64s(&s.FloatSum[i])
				}
				r.End()
			}
		case 'x':
			bit = 64
			ok = r.float64s(&s.Special) && s.Special != nil // a nil is left to the reflection decoder
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
	r.End()
	return true
}

// decodePartialWire decodes b as the reflection decoder would, or returns
// errNotHand for any bytes not in the encoder's form (see above). Its
// bounds are the reflection decoder's (messages.PayloadLimits).
func decodePartialWire(b []byte, p *Partial) error {
	r := partialIn{messages.NewWireReader(b, messages.PayloadLimits)}
	n, err := r.MapLen()
	if err != nil || n < 0 {
		return errNotHand
	}
	var seen uint8
	for range n {
		k, err := r.Bytes()
		if err != nil {
			return errNotHand
		}
		var bit uint8
		var ok bool
		switch string(k) { // no allocation: the keys are constants
		case "v":
			bit = 1
			v, err := r.Int64()
			p.Version, ok = int(v), err == nil
		case "r":
			bit = 2
			ok = r.table(&p.Rows)
		case "t":
			bit = 4
			ok = r.times(&p.Times)
		case "tc":
			bit = 8
			v, err := r.Int64()
			p.TimesCol, ok = int(v), err == nil
		case "g":
			bit = 16
			v, err := r.Bool()
			p.Aggregated, ok = v, err == nil
		case "n":
			bit = 32
			v, err := r.Int64()
			p.Groups, ok = int(v), err == nil
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
	r.End()
	if len(r.Rest()) != 0 {
		return errNotHand
	}
	return nil
}
