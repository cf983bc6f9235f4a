package merge

import (
	"errors"
	"fmt"
	"slices"

	"github.com/vmihailenco/msgpack/v5"
	"github.com/vmihailenco/msgpack/v5/msgpcode"

	"github.com/sg-project/sg/messages"
)

// PartialVersion is the version of the msgpack form of Partial. 2: Times is
// delta-varint bytes (Times), not an array of integers. 3: Times may be left
// off the wire for a timestamp column of Rows that holds them (TimesCol).
const PartialVersion = 3

// Partial is what one DAP returns for one portion of a getData request. A row query fills
// Rows and Times; an aggregating query (groupBy and/or agg) fills Groups, Keys and Aggs.
type Partial struct {
	Version int `msgpack:"v"`

	// Rows holds the projected columns, in the order of doc item 1 (or, with sortCols and a
	// limit, already cut to that limit). Times is each row's time in Unix ns, also when the
	// time column is not projected, because the merge orders by it; 0 for reference tables.
	Rows  messages.Table `msgpack:"r"`
	Times Times          `msgpack:"t,omitempty"`
	// TimesCol, on the wire only, is 1 + the index of the timestamp column of
	// Rows equal to Times, which are then not sent (the projected time
	// column of a row query: a fifth of a partial's bytes); 0: Times are
	// sent. EncodePartial sets it, DecodePartial reads Times from the column.
	TimesCol int `msgpack:"tc,omitempty"`

	// Aggregating: Groups groups, Keys their groupBy values (no columns when there is no
	// groupBy), Aggs one state per AggSpec of the request, in the same order.
	Aggregated bool           `msgpack:"g,omitempty"`
	Groups     int            `msgpack:"n,omitempty"`
	Keys       messages.Table `msgpack:"k"`
	Aggs       []AggState     `msgpack:"a,omitempty"`

	// validated: DecodePartial validated it, and Merger.check need not
	// again (on the merge's serial path, the codes long out of cache, that
	// second pass was 2.5% of a large answer's CPU). A decoded partial is
	// never written.
	validated bool
}

// AggState is the mergeable state of one AggSpec for every group, columnar. Which fields
// are used depends on Func and on the input column Type:
//
//	count      Count
//	sum        IntSum (int column) or FloatSum+Special (float column)
//	avg        Count and the sum fields as for sum
//	min, max   Value
//	first/last Value and Time (the time of the row Value came from)
type AggState struct {
	Name     string              `msgpack:"m"`
	Func     messages.AggFunc    `msgpack:"f"`
	Type     messages.ColumnType `msgpack:"y,omitempty"` // input column type; 0 for count without column
	Count    []int64             `msgpack:"c,omitempty"`
	IntSum   []int64             `msgpack:"i,omitempty"` // wraps around on int64 overflow, like Go
	FloatSum [][]float64         `msgpack:"s,omitempty"` // exact partials, see fsum.go
	Special  []float64           `msgpack:"x,omitempty"` // non-finite part of a float sum
	Value    messages.Table      `msgpack:"w"`           // one column of the input type, or none
	Time     []int64             `msgpack:"z,omitempty"`
}

// Times are a row partial's times, on the wire as a timestamp column is:
// [count, bin of zigzag varint deltas], so that the DAP and the Agg do not
// encode and decode every time as a msgpack value of its own (a large answer
// has hundreds of thousands).
type Times []int64

// EncodeMsgpack implements msgpack.CustomEncoder.
func (t Times) EncodeMsgpack(enc *msgpack.Encoder) error {
	if err := enc.EncodeArrayLen(2); err != nil {
		return err
	}
	if err := enc.EncodeInt(int64(len(t))); err != nil {
		return err
	}
	return messages.WriteVarints(enc, t, true)
}

// DecodeMsgpack implements msgpack.CustomDecoder. The count is checked
// against the bytes present (a varint takes at least one) before anything is
// allocated. A version 1 partial's times (an array of integers, from a DAP not
// upgraded yet) decode too: Aggs upgrade first.
func (t *Times) DecodeMsgpack(dec *msgpack.Decoder) error {
	n, err := dec.DecodeArrayLen()
	if err != nil || n < 0 {
		return fmt.Errorf("times: %d elements (%v)", n, err)
	}
	first := int64(0)
	if n >= 1 {
		if first, err = dec.DecodeInt64(); err != nil {
			return fmt.Errorf("times: %v", err)
		}
	}
	code, err := dec.PeekCode()
	if n != 2 || err != nil || !msgpcode.IsBin(code) {
		// Version 1: n integers (CheckMsgpack bounded n by the bytes).
		out := make([]int64, 0, n)
		if n >= 1 {
			out = append(out, first)
		}
		for i := 1; i < n; i++ {
			v, err := dec.DecodeInt64()
			if err != nil {
				return fmt.Errorf("times: %v", err)
			}
			out = append(out, v)
		}
		*t = out
		return nil
	}
	count := int(first)
	b, err := dec.DecodeBytes()
	if err != nil || count < 0 || len(b) < count {
		return fmt.Errorf("times: %d bytes for %d times (%v)", len(b), count, err)
	}
	out := make([]int64, count)
	if err := messages.ReadVarints(out, b, true); err != nil {
		return fmt.Errorf("times: %w", err)
	}
	*t = out
	return nil
}

// timesFromColumn sets the Times of a decoded partial that names the column
// holding them (TimesCol); the column is shared, never written.
func (p *Partial) timesFromColumn() error {
	if p.TimesCol == 0 {
		return nil
	}
	k := p.TimesCol - 1
	if p.Version < 3 || p.Aggregated || len(p.Times) > 0 || k < 0 || k >= len(p.Rows.Columns) || p.Rows.Columns[k].Type != messages.TypeTimestamp {
		return fmt.Errorf("%w: times in column %d of %d (version %d, aggregated %t, %d times sent)",
			ErrInvalidPartial, p.TimesCol, len(p.Rows.Columns), p.Version, p.Aggregated, len(p.Times))
	}
	p.Times, p.TimesCol = p.Rows.Columns[k].Ints, 0
	return nil
}

// Release gives the storage of a row partial's columns (numbers, codes,
// booleans) to later decodes (messages.ReleaseColumn) and clears p. The
// caller guarantees that nothing reads them any more: p was decoded
// (DecodePartial), and whatever the merge made of it is written out.
func (p *Partial) Release() {
	for k := range p.Rows.Columns {
		messages.ReleaseColumn(&p.Rows.Columns[k]) // Times, when from a column, with it
	}
	*p = Partial{}
}

// which lists the fields a state uses, so that Validate and the merge agree.
func (s *AggState) uses() (count, intSum, floatSum, value, tm bool) {
	switch s.Func {
	case messages.AggCount:
		count = true
	case messages.AggSum, messages.AggAvg:
		count = s.Func == messages.AggAvg
		intSum = s.Type == messages.TypeInt
		floatSum = s.Type == messages.TypeFloat
	case messages.AggMin, messages.AggMax:
		value = true
	case messages.AggFirst, messages.AggLast:
		value, tm = true, true
	}
	return
}

// Validate checks that the partial is consistent in itself, so that merging it cannot
// index out of range. Errors wrap ErrInvalidPartial.
func (p *Partial) Validate() error { return p.validate(false) }

// validate is Validate; decoded: Rows and Keys were decoded from msgpack,
// which validated them (messages.Table.DecodeMsgpack), and are not again (a
// second pass over a large partial's codes, long out of cache).
func (p *Partial) validate(decoded bool) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrInvalidPartial, fmt.Sprintf(format, args...))
	}
	if p.Version < 1 || p.Version > PartialVersion {
		return bad("version %d, want 1..%d", p.Version, PartialVersion)
	}
	if !decoded {
		if err := p.Rows.Validate(); err != nil {
			return bad("rows: %v", err)
		}
		if err := p.Keys.Validate(); err != nil {
			return bad("keys: %v", err)
		}
	}
	if !p.Aggregated {
		if len(p.Times) != p.Rows.NumRows() {
			return bad("%d times for %d rows", len(p.Times), p.Rows.NumRows())
		}
		return nil
	}
	g := p.Groups
	if g < 0 || (len(p.Keys.Columns) > 0 && p.Keys.NumRows() != g) || (len(p.Keys.Columns) == 0 && g > 1) {
		return bad("%d groups with %d key rows", g, p.Keys.NumRows())
	}
	for i := range p.Aggs {
		s := &p.Aggs[i]
		if err := s.validate(g); err != nil {
			return fmt.Errorf("%w: agg %q: %w", ErrInvalidPartial, s.Name, err)
		}
	}
	return nil
}

func (s *AggState) validate(g int) error {
	if err := s.Value.Validate(); err != nil {
		return err
	}
	if s.Type != 0 && !s.Type.Valid() {
		return fmt.Errorf("unknown input type %d", s.Type)
	}
	if err := checkAggType(s.Func, s.Type); err != nil {
		return err
	}
	count, intSum, floatSum, value, tm := s.uses()
	want := func(used bool, n int) bool { return (used && n == g) || (!used && n == 0) }
	if !want(count, len(s.Count)) || !want(intSum, len(s.IntSum)) || !want(floatSum, len(s.FloatSum)) ||
		!want(floatSum, len(s.Special)) || !want(tm, len(s.Time)) {
		return errors.New("state lengths do not match the group count")
	}
	if value != (len(s.Value.Columns) == 1) || (value && (s.Value.NumRows() != g || s.Value.Columns[0].Type != s.Type)) {
		return errors.New("value column does not match the group count or input type")
	}
	return nil
}

// checkAggType says whether f applies to an input column of type t (0: no column).
func checkAggType(f messages.AggFunc, t messages.ColumnType) error {
	switch f {
	case messages.AggCount:
		return nil
	case messages.AggSum, messages.AggAvg:
		if t == messages.TypeInt || t == messages.TypeFloat {
			return nil
		}
	case messages.AggMin, messages.AggMax, messages.AggFirst, messages.AggLast:
		if t.Valid() {
			return nil
		}
	default:
		return fmt.Errorf("%w: unknown function %q", ErrAggType, f)
	}
	return fmt.Errorf("%w: %s of a %s column", ErrAggType, f, t)
}

// EncodePartial is the msgpack form sent from DAP to Agg, in a buffer sized
// once for it. A row partial's times are left off when a timestamp column
// of its rows holds them (TimesCol).
func EncodePartial(p Partial) ([]byte, error) {
	p = p.forWire()
	hint := p.Rows.SizeHint() + 5*len(p.Times) + p.Keys.SizeHint()
	for i := range p.Aggs {
		hint += 64 + 16*p.Groups + p.Aggs[i].Value.SizeHint()
	}
	return messages.EncodeSizedWith(hint, func(enc *msgpack.Encoder) error { return encodePartialWire(enc, &p) })
}

// EncodePartialTo writes EncodePartial's bytes to enc (a DAP's window,
// written in place into its envelope: messages.AppendPartialResult).
func EncodePartialTo(enc *msgpack.Encoder, p Partial) error {
	p = p.forWire()
	return encodePartialWire(enc, &p)
}

// forWire is p as sent: a row partial's times are left off when a timestamp
// column of its rows holds them (TimesCol).
func (p Partial) forWire() Partial {
	p.TimesCol = 0
	if !p.Aggregated {
		for k := range p.Rows.Columns {
			if c := &p.Rows.Columns[k]; c.Type == messages.TypeTimestamp && slices.Equal(c.Ints, p.Times) {
				p.TimesCol, p.Times = k+1, nil
				break
			}
		}
	}
	return p
}

// decodePartialReflect is DecodePartial's decoding by the reflection
// decoder, after its pre-scan. Its partial is its own (on the heap: the
// decoder takes it as an interface), so that DecodePartial's stays off it.
func decodePartialReflect(b []byte) (Partial, error) {
	p := new(Partial)
	// Symbol columns stay coded: the merge gathers their codes and the
	// answer's encoder re-codes them, no string per row (messages.DecodeCoded).
	if err := messages.DecodeCoded(b, p, messages.PayloadLimits); err != nil {
		return Partial{}, fmt.Errorf("%w: %v", ErrInvalidPartial, err)
	}
	return *p, nil
}

// DecodePartial decodes and validates bytes from the network; it never
// panics. Its tables' symbol columns are coded (messages.Column.Coded).
func DecodePartial(b []byte) (p Partial, err error) {
	defer func() {
		if r := recover(); r != nil {
			p, err = Partial{}, fmt.Errorf("%w: decoder panic: %v", ErrInvalidPartial, r)
		}
	}()
	if err := decodePartialWire(b, &p); err != nil {
		// Not in the hand decoder's form (an aggregated partial, an older
		// DAP's, a damaged one): the reflection decoder's value or error.
		if p, err = decodePartialReflect(b); err != nil {
			return Partial{}, err
		}
	}
	if err := p.timesFromColumn(); err != nil {
		return Partial{}, err
	}
	if err := p.validate(true); err != nil { // its tables validated as decoded
		return Partial{}, err
	}
	p.validated = true
	return p, nil
}
