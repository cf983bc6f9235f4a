package messages

// A Table is the columnar result of a data-access API (getData): column names, a type per
// column and one typed slice per column. It is what the Agg sends back to the GW, and what
// DAPs put inside their partial results.
//
// Wire forms:
//   - msgpack (DAP -> Agg -> GW): columnar and compact, see EncodeMsgpack;
//   - JSON (GW -> HTTP clients): an array of row objects, keys in column order, timestamps
//     RFC 3339 with nine fractional digits in UTC, non-finite floats as null.

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/bits"
	"slices"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"
	"unsafe"

	"github.com/vmihailenco/msgpack/v5"
)

// ColumnType is the type of a table column.
type ColumnType uint8

// Column types. The numbers are on the wire: never renumber.
const (
	TypeSymbol    ColumnType = 1 // interned categorical string (sym, side, region): dictionary-encoded on the wire
	TypeString    ColumnType = 2 // free text
	TypeFloat     ColumnType = 3 // float64
	TypeInt       ColumnType = 4 // int64
	TypeBool      ColumnType = 5 // bool
	TypeTimestamp ColumnType = 6 // nanoseconds since the Unix epoch, UTC (years 1678..2262)
)

var columnTypeNames = map[ColumnType]string{
	TypeSymbol: "symbol", TypeString: "string", TypeFloat: "float", TypeInt: "int",
	TypeBool: "bool", TypeTimestamp: "timestamp",
}

func (t ColumnType) String() string {
	if s, ok := columnTypeNames[t]; ok {
		return s
	}
	return "type(" + strconv.Itoa(int(t)) + ")"
}

// Valid reports whether t is one of the known column types.
// MarshalJSON names the type in JSON (getMeta): "symbol", "float", ... (not
// MarshalText, which msgpack would also use, changing the wire form).
func (t ColumnType) MarshalJSON() ([]byte, error) {
	if !t.Valid() {
		return nil, fmt.Errorf("column type %d is not valid", uint8(t))
	}
	return []byte(`"` + t.String() + `"`), nil
}

// UnmarshalJSON reads the name MarshalJSON writes.
func (t *ColumnType) UnmarshalJSON(b []byte) error {
	var name string
	if err := json.Unmarshal(b, &name); err != nil {
		return fmt.Errorf("column type: %w", err)
	}
	for ct, n := range columnTypeNames {
		if n == name {
			*t = ct
			return nil
		}
	}
	return fmt.Errorf("column type %q: want one of symbol, string, float, int, bool, timestamp", name)
}

func (t ColumnType) Valid() bool { _, ok := columnTypeNames[t]; return ok }

// TableVersion is the version of the msgpack form of Table.
const TableVersion = 1

// ErrMalformedTable is wrapped by every error about undecodable or inconsistent table
// bytes; it wraps the package's ErrMalformed.
var ErrMalformedTable = fmt.Errorf("table: %w", ErrMalformed)

// TimeFormat is how timestamps are written in JSON: RFC 3339, UTC, always nine fractional
// digits, so that values sort as text and no precision is lost.
const TimeFormat = "2006-01-02T15:04:05.000000000Z07:00"

// ColumnSpec names and types one column: a table schema is a []ColumnSpec.
type ColumnSpec struct {
	Name string     `json:"name"`
	Type ColumnType `json:"type"`
}

// Column is one named, typed column. Exactly one slice is used, chosen by Type:
// Strings (symbol, string), Floats (float), Ints (int, timestamp as Unix ns), Bools (bool).
//
// A symbol column may instead be dictionary-coded: Codes, one per row, index
// Dict (Coded reports it; Dict is then non-nil). DecodeCoded, the Agg's
// merge and the DAP engine's store make such columns (so the partials a DAP
// hands out are coded too): a symbol is then never a string of its own
// per row (16 bytes the GC scans), and is re-encoded without hashing it.
// Code that reads Strings directly must read a column that is not coded, or
// call Str, or Uncode it first; Column's and Table's methods take either.
type Column struct {
	Name    string
	Type    ColumnType
	Strings []string
	Floats  []float64
	Ints    []int64
	Bools   []bool
	Codes   []uint32
	Dict    []string

	// FirstSeen, on a coded column, says that Codes number Dict's values in
	// the order the rows first use them, and use every one (a DictBuilder
	// started empty and fed the rows in order: the merge's gather): the
	// msgpack form's own numbering, so the encoder writes the codes as they
	// are instead of numbering them again (recode). It is a claim the
	// encoder checks as it writes (writeFirstSeen), numbering the codes
	// again where it is false: the bytes never depend on it. Column's
	// methods that change the codes drop it.
	FirstSeen bool
}

// Table is a list of columns of equal length.
type Table struct {
	Columns []Column
}

// NewTable returns an empty table with the given schema.
func NewTable(schema []ColumnSpec) Table {
	t := Table{Columns: make([]Column, len(schema))}
	for i, s := range schema {
		t.Columns[i] = Column{Name: s.Name, Type: s.Type}
	}
	return t
}

// Coded reports whether the column is a dictionary-coded symbol column.
func (c *Column) Coded() bool { return c.Dict != nil }

// Str is row i of a symbol or string column, coded or not.
func (c *Column) Str(i int) string {
	if c.Dict != nil {
		return c.Dict[c.Codes[i]]
	}
	return c.Strings[i]
}

// Uncode turns a coded column into one of Strings (a no-op for any other).
func (c *Column) Uncode() {
	if c.Dict == nil {
		return
	}
	s := make([]string, len(c.Codes))
	for i, code := range c.Codes {
		s[i] = c.Dict[code]
	}
	c.Strings, c.Codes, c.Dict, c.FirstSeen = s, nil, nil, false
}

// Len is the number of values in the column.
func (c *Column) Len() int {
	switch c.Type {
	case TypeSymbol, TypeString:
		if c.Dict != nil {
			return len(c.Codes)
		}
		return len(c.Strings)
	case TypeFloat:
		return len(c.Floats)
	case TypeInt, TypeTimestamp:
		return len(c.Ints)
	case TypeBool:
		return len(c.Bools)
	}
	return 0
}

// Value returns row i as a Go value: string, float64, int64, bool or time.Time (UTC).
func (c *Column) Value(i int) any {
	switch c.Type {
	case TypeSymbol, TypeString:
		return c.Str(i)
	case TypeFloat:
		return c.Floats[i]
	case TypeInt:
		return c.Ints[i]
	case TypeTimestamp:
		return time.Unix(0, c.Ints[i]).UTC()
	case TypeBool:
		return c.Bools[i]
	}
	return nil
}

// Compare orders row i of c against row j of o, which must have the same type.
// Floats use cmp.Compare (NaN sorts first), and values it finds equal but
// whose bits differ (-0 and +0, NaNs) by their bits, -0 before +0: rows equal
// in every value are then equal in their encoding too, so every merge of
// the same rows (whole, streamed, in halves) gives the same bytes.
func (c *Column) Compare(i int, o *Column, j int) int {
	switch c.Type {
	case TypeSymbol, TypeString:
		if c.Dict != nil && o.Dict != nil && c.Codes[i] == o.Codes[j] && sameDict(c.Dict, o.Dict) {
			return 0
		}
		return cmp.Compare(c.Str(i), o.Str(j))
	case TypeFloat:
		a, b := c.Floats[i], o.Floats[j]
		if r := cmp.Compare(a, b); r != 0 {
			return r
		}
		return cmp.Compare(math.Float64bits(b), math.Float64bits(a)) // the sign bit set first
	case TypeInt, TypeTimestamp:
		return cmp.Compare(c.Ints[i], o.Ints[j])
	case TypeBool:
		return cmpBool(c.Bools[i], o.Bools[j])
	}
	return 0
}

func cmpBool(a, b bool) int {
	switch {
	case a == b:
		return 0
	case !a:
		return -1
	}
	return 1
}

// sameDict reports whether a and b are the same dictionary (not a copy).
func sameDict(a, b []string) bool {
	return len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0])
}

// AppendFrom appends row i of src, which must have the same type, to c. A
// coded c is uncoded first (Column.Uncode), unless src shares its dictionary.
func (c *Column) AppendFrom(src *Column, i int) {
	switch c.Type {
	case TypeSymbol, TypeString:
		if c.Dict != nil && src.Dict != nil && sameDict(c.Dict, src.Dict) {
			c.Codes, c.FirstSeen = append(c.Codes, src.Codes[i]), false
			return
		}
		c.Uncode()
		c.Strings = append(c.Strings, src.Str(i))
	case TypeFloat:
		c.Floats = append(c.Floats, src.Floats[i])
	case TypeInt, TypeTimestamp:
		c.Ints = append(c.Ints, src.Ints[i])
	case TypeBool:
		c.Bools = append(c.Bools, src.Bools[i])
	}
}

// Grow makes room for n more values without reallocating.
func (c *Column) Grow(n int) {
	switch c.Type {
	case TypeSymbol, TypeString:
		if c.Dict != nil {
			c.Codes = slices.Grow(c.Codes, n)
			return
		}
		c.Strings = slices.Grow(c.Strings, n)
	case TypeFloat:
		c.Floats = slices.Grow(c.Floats, n)
	case TypeInt, TypeTimestamp:
		c.Ints = slices.Grow(c.Ints, n)
	case TypeBool:
		c.Bools = slices.Grow(c.Bools, n)
	}
}

// SetFrom overwrites row i of c with row j of src, which must have the same
// type. A coded c is uncoded first, unless src shares its dictionary.
func (c *Column) SetFrom(i int, src *Column, j int) {
	switch c.Type {
	case TypeSymbol, TypeString:
		if c.Dict != nil && src.Dict != nil && sameDict(c.Dict, src.Dict) {
			c.Codes[i], c.FirstSeen = src.Codes[j], false
			return
		}
		c.Uncode()
		c.Strings[i] = src.Str(j)
	case TypeFloat:
		c.Floats[i] = src.Floats[j]
	case TypeInt, TypeTimestamp:
		c.Ints[i] = src.Ints[j]
	case TypeBool:
		c.Bools[i] = src.Bools[j]
	}
}

// AppendColumn appends all rows of src, which must have the same type, to c.
// Coded columns stay coded: src's codes are mapped into c's dictionary, which
// grows by the values it lacks (an empty c takes src's dictionary).
func (c *Column) AppendColumn(src *Column) {
	if src.Dict != nil || c.Dict != nil {
		c.appendSymbols(src)
		return
	}
	c.Strings = append(c.Strings, src.Strings...)
	c.Floats = append(c.Floats, src.Floats...)
	c.Ints = append(c.Ints, src.Ints...)
	c.Bools = append(c.Bools, src.Bools...)
}

// appendSymbols is AppendColumn where c or src is coded.
func (c *Column) appendSymbols(src *Column) {
	c.FirstSeen = false
	switch {
	case c.Len() == 0 && src.Dict != nil:
		c.Strings = nil
		c.Dict = src.Dict[:len(src.Dict):len(src.Dict)] // shared: appending to it copies
		c.Codes = append(c.Codes[:0], src.Codes...)
	case c.Dict != nil && src.Dict != nil:
		if !sameDict(c.Dict, src.Dict) {
			d := NewDictBuilder(c.Dict)
			remap := make([]uint32, len(src.Dict))
			for k, s := range src.Dict {
				remap[k] = d.Code(s)
			}
			c.Dict = d.Dict()
			for _, code := range src.Codes {
				c.Codes = append(c.Codes, remap[code])
			}
			return
		}
		c.Codes = append(c.Codes, src.Codes...)
	default:
		c.Uncode()
		for i := range src.Len() {
			c.Strings = append(c.Strings, src.Str(i))
		}
	}
}

// DictBuilder builds a dictionary of distinct symbols, handing out their codes.
type DictBuilder struct {
	dict  []string
	index map[string]uint32
}

// NewDictBuilder starts from dict (its values distinct); appending copies it.
func NewDictBuilder(dict []string) *DictBuilder {
	d := &DictBuilder{dict: dict[:len(dict):len(dict)], index: make(map[string]uint32, len(dict))}
	for k, s := range dict {
		d.index[s] = uint32(k)
	}
	return d
}

// Code is s's code, added to the dictionary when new.
func (d *DictBuilder) Code(s string) uint32 {
	code, ok := d.index[s]
	if !ok {
		code = uint32(len(d.dict))
		d.index[s] = code
		d.dict = append(d.dict, s)
	}
	return code
}

// AppendCodes appends the codes of src's values (a symbol or string column,
// coded or not) to codes, adding the values the dictionary lacks. A coded src
// costs one lookup per value its rows use, not one per row; values of its
// dictionary that no row uses are not added (a view of a long-lived store
// shares a dictionary larger than its rows need).
func (d *DictBuilder) AppendCodes(codes []uint32, src *Column) []uint32 {
	codes = slices.Grow(codes, src.Len())
	if src.Dict != nil {
		return d.appendCoded(codes, src, nil, true)
	}
	last, lastCode := "", uint32(0)
	for i, s := range src.Strings {
		// Runs of one value (a label column) cost a comparison, not a lookup.
		if i == 0 || s != last {
			last, lastCode = s, d.Code(s)
		}
		codes = append(codes, lastCode)
	}
	return codes
}

// appendCoded appends the codes of coded src's rows at idx (every row with
// all), each value of src's dictionary looked up on its first use.
func (d *DictBuilder) appendCoded(codes []uint32, src *Column, idx []int, all bool) []uint32 {
	remap := make([]uint32, len(src.Dict)) // code+1; 0: not looked up yet
	code := func(c uint32) uint32 {
		r := remap[c]
		if r == 0 {
			r = d.Code(src.Dict[c]) + 1
			remap[c] = r
		}
		return r - 1
	}
	if all {
		for _, c := range src.Codes {
			codes = append(codes, code(c))
		}
		return codes
	}
	for _, i := range idx {
		codes = append(codes, code(src.Codes[i]))
	}
	return codes
}

// Dict is the dictionary so far (never nil). Its values are never changed,
// only appended to: a slice of it taken earlier (Column.Slice) stays as it was.
func (d *DictBuilder) Dict() []string {
	if d.dict == nil {
		return []string{}
	}
	return d.dict[:len(d.dict):len(d.dict)] // appending to it copies
}

// Append appends one Go value, converting it to the column type when that loses nothing
// (an int64 into a float column, a time.Time into a timestamp column, ...).
func (c *Column) Append(v any) error {
	switch c.Type {
	case TypeSymbol, TypeString:
		if s, ok := v.(string); ok {
			c.Uncode()
			c.Strings = append(c.Strings, s)
			return nil
		}
	case TypeFloat:
		switch x := v.(type) {
		case float64:
			c.Floats = append(c.Floats, x)
			return nil
		case int64:
			c.Floats = append(c.Floats, float64(x))
			return nil
		case int:
			c.Floats = append(c.Floats, float64(x))
			return nil
		}
	case TypeInt:
		switch x := v.(type) {
		case int64:
			c.Ints = append(c.Ints, x)
			return nil
		case int:
			c.Ints = append(c.Ints, int64(x))
			return nil
		}
	case TypeTimestamp:
		switch x := v.(type) {
		case time.Time:
			c.Ints = append(c.Ints, x.UnixNano())
			return nil
		case int64:
			c.Ints = append(c.Ints, x)
			return nil
		}
	case TypeBool:
		if b, ok := v.(bool); ok {
			c.Bools = append(c.Bools, b)
			return nil
		}
	}
	return fmt.Errorf("column %q of type %s: cannot append %T", c.Name, c.Type, v)
}

// Take returns a new column with the rows at idx, in that order. A coded
// column's dictionary is the values those rows use, in first-use order: a
// store copied again and again (a live DAP's rolls) keeps what its rows
// need, not every symbol it ever held.
func (c *Column) Take(idx []int) Column {
	out := Column{Name: c.Name, Type: c.Type}
	switch c.Type {
	case TypeSymbol, TypeString:
		if c.Dict != nil {
			d := NewDictBuilder(nil)
			out.Codes = d.appendCoded(make([]uint32, 0, len(idx)), c, idx, false)
			out.Dict = d.Dict()
			break
		}
		out.Strings = make([]string, len(idx))
		for k, i := range idx {
			out.Strings[k] = c.Strings[i]
		}
	case TypeFloat:
		out.Floats = make([]float64, len(idx))
		for k, i := range idx {
			out.Floats[k] = c.Floats[i]
		}
	case TypeInt, TypeTimestamp:
		out.Ints = make([]int64, len(idx))
		for k, i := range idx {
			out.Ints[k] = c.Ints[i]
		}
	case TypeBool:
		out.Bools = make([]bool, len(idx))
		for k, i := range idx {
			out.Bools[k] = c.Bools[i]
		}
	}
	return out
}

// Slice returns rows [lo, hi) sharing c's storage.
func (c *Column) Slice(lo, hi int) Column {
	out := Column{Name: c.Name, Type: c.Type}
	switch c.Type {
	case TypeSymbol, TypeString:
		if c.Dict != nil {
			out.Dict, out.Codes = c.Dict[:len(c.Dict):len(c.Dict)], c.Codes[lo:hi:hi]
			break
		}
		out.Strings = c.Strings[lo:hi:hi]
	case TypeFloat:
		out.Floats = c.Floats[lo:hi:hi]
	case TypeInt, TypeTimestamp:
		out.Ints = c.Ints[lo:hi:hi]
	case TypeBool:
		out.Bools = c.Bools[lo:hi:hi]
	}
	return out
}

// NumRows is the number of rows (0 for a table without columns).
func (t *Table) NumRows() int {
	if len(t.Columns) == 0 {
		return 0
	}
	return t.Columns[0].Len()
}

// Schema returns the names and types of the columns.
func (t *Table) Schema() []ColumnSpec {
	s := make([]ColumnSpec, len(t.Columns))
	for i, c := range t.Columns {
		s[i] = ColumnSpec{Name: c.Name, Type: c.Type}
	}
	return s
}

// Index returns the position of the named column, or -1.
func (t *Table) Index(name string) int {
	for i := range t.Columns {
		if t.Columns[i].Name == name {
			return i
		}
	}
	return -1
}

// Col returns the named column, or nil.
func (t *Table) Col(name string) *Column {
	if i := t.Index(name); i >= 0 {
		return &t.Columns[i]
	}
	return nil
}

// AppendRow appends one row given as one Go value per column (see Column.Append).
// On error the table is left unchanged.
func (t *Table) AppendRow(vals ...any) error {
	if len(vals) != len(t.Columns) {
		return fmt.Errorf("append row: %d values for %d columns", len(vals), len(t.Columns))
	}
	for i := range t.Columns {
		if err := t.Columns[i].Append(vals[i]); err != nil {
			for j := 0; j < i; j++ { // undo, so that the columns keep equal lengths
				c := &t.Columns[j]
				*c = c.Slice(0, c.Len()-1)
			}
			return err
		}
	}
	return nil
}

// AppendRowFrom appends row i of src, which must have the same schema.
func (t *Table) AppendRowFrom(src *Table, i int) {
	for k := range t.Columns {
		t.Columns[k].AppendFrom(&src.Columns[k], i)
	}
}

// Truncate removes every row and keeps the columns' storage for new ones.
func (t *Table) Truncate() {
	for k := range t.Columns {
		c := &t.Columns[k]
		c.Strings, c.Floats, c.Ints, c.Bools = c.Strings[:0], c.Floats[:0], c.Ints[:0], c.Bools[:0]
		c.Codes, c.Dict, c.FirstSeen = c.Codes[:0], nil, false // uncoded: a coded column's dictionary may be shared
	}
}

// Take returns a new table with the rows at idx, in that order.
func (t *Table) Take(idx []int) Table {
	out := Table{Columns: make([]Column, len(t.Columns))}
	for k := range t.Columns {
		out.Columns[k] = t.Columns[k].Take(idx)
	}
	return out
}

// Slice returns rows [lo, hi) sharing t's storage.
func (t *Table) Slice(lo, hi int) Table {
	out := Table{Columns: make([]Column, len(t.Columns))}
	for k := range t.Columns {
		out.Columns[k] = t.Columns[k].Slice(lo, hi)
	}
	return out
}

// Validate checks what a decoder cannot: known types, unique names, the slice that matches
// each type and only it, equal lengths, codes within their dictionaries. Code that indexes a
// table from the network calls it first.
func (t *Table) Validate() error { return t.validate(true) }

// smallTableColumns: up to this many columns, validate finds a repeated
// name by comparing names pairwise, not with a map.
const smallTableColumns = 16

// validate is Validate, the codes checked against their dictionaries only
// with codes: DecodeMsgpack checked them as it read each column (decodeColumn),
// and a second pass over a large answer's codes, long out of cache, cost
// the Agg 2-3% of its CPU.
func (t *Table) validate(codes bool) error {
	// Names compared pairwise while there are few (a map for each table
	// decoded was two of a small answer's allocations).
	var seen map[string]bool
	if len(t.Columns) > smallTableColumns {
		seen = make(map[string]bool, len(t.Columns))
	}
	n := -1
	for i := range t.Columns {
		c := &t.Columns[i]
		if !c.Type.Valid() {
			return fmt.Errorf("%w: column %q has unknown type %d", ErrMalformedTable, c.Name, c.Type)
		}
		dup := seen[c.Name]
		if seen == nil {
			for k := range i {
				dup = dup || t.Columns[k].Name == c.Name
			}
		}
		if dup {
			return fmt.Errorf("%w: duplicate column %q", ErrMalformedTable, c.Name)
		}
		if seen != nil {
			seen[c.Name] = true
		}
		used := 0
		for _, l := range []int{len(c.Strings), len(c.Floats), len(c.Ints), len(c.Bools), len(c.Codes)} {
			if l > 0 {
				used++
			}
		}
		if used > 1 || (used == 1 && c.Len() == 0) || (c.Dict != nil && c.Type != TypeSymbol) {
			return fmt.Errorf("%w: column %q of type %s holds values of another type", ErrMalformedTable, c.Name, c.Type)
		}
		if c.Dict != nil && codes {
			if code, ok := checkCodes(c.Codes, len(c.Dict)); !ok {
				return fmt.Errorf("%w: column %q: code %d outside its dictionary of %d", ErrMalformedTable, c.Name, code, len(c.Dict))
			}
		}
		if n >= 0 && c.Len() != n {
			return fmt.Errorf("%w: column %q has %d rows, expected %d", ErrMalformedTable, c.Name, c.Len(), n)
		}
		n = c.Len()
	}
	return nil
}

// ---- msgpack ----
//
// Table: [version, [column...]]. Column: [name, type, rows, payload], payload by type:
//   symbol:    [dictionary []string, codes bin] codes little-endian, 1, 2 or 4 bytes each;
//   string:    array of strings;
//   float:     bin, 8 bytes little-endian IEEE 754 per row;
//   int:       bin, zig-zag varints;
//   timestamp: bin, zig-zag varints of the difference to the previous row (time columns are
//              mostly sorted, so most rows take 1-3 bytes);
//   bool:      bin, one byte 0 or 1 per row.
// Every length is checked against the bytes actually present before anything is allocated,
// so a hostile "rows" count cannot make the decoder allocate more than the input size.

// EncodeMsgpack implements msgpack.CustomEncoder.
func (t Table) EncodeMsgpack(enc *msgpack.Encoder) error {
	if err := encodeTableHead(enc, len(t.Columns)); err != nil {
		return err
	}
	for i := range t.Columns {
		if err := encodeColumn(enc, &t.Columns[i]); err != nil {
			return err
		}
	}
	return nil
}

func encodeColumn(enc *msgpack.Encoder, c *Column) error {
	if err := enc.EncodeArrayLen(4); err != nil {
		return err
	}
	if err := enc.EncodeString(c.Name); err != nil {
		return err
	}
	if err := enc.EncodeUint(uint64(c.Type)); err != nil {
		return err
	}
	if err := enc.EncodeInt(int64(c.Len())); err != nil {
		return err
	}
	switch c.Type {
	case TypeSymbol:
		var dict []string
		var b []byte
		if c.Dict != nil {
			s := recodeScratches.Get().(*recodeScratch)
			defer s.put() // once dict and b are written
			ok := false
			if c.FirstSeen {
				dict, b, ok = writeFirstSeen(c.Dict, c.Codes, s)
			}
			if !ok {
				dict, b = recode(c.Dict, c.Codes, s)
			}
			if b == nil {
				// No rows, on a fresh scratch: an empty bin, as any other
				// column of no rows (EncodeBytes writes nil for nil), not
				// bytes that depend on the pool's state.
				b = []byte{}
			}
		} else {
			dict, b = dictEncode(c.Strings)
		}
		if err := enc.EncodeArrayLen(2); err != nil {
			return err
		}
		if err := encodeStrings(enc, dict); err != nil {
			return err
		}
		return enc.EncodeBytes(b)
	case TypeString:
		return encodeStrings(enc, c.Strings)
	case TypeFloat:
		if err := enc.EncodeBytesLen(8 * len(c.Floats)); err != nil {
			return err
		}
		if buf, ok := enc.Writer().(*bytes.Buffer); ok {
			// Straight into the buffer, not through a binWriter's.
			if nativeLittleEndian {
				buf.Write(floatBytes(c.Floats))
				return nil
			}
			b := growRoom(buf, 8*len(c.Floats))
			for i, f := range c.Floats {
				binary.LittleEndian.PutUint64(b[8*i:], math.Float64bits(f))
			}
			buf.Write(b)
			return nil
		}
		w := newBinWriter(enc, 8*len(c.Floats))
		for fs := c.Floats; len(fs) > 0; {
			k := min(len(fs), (cap(w.b)-len(w.b))/8)
			if k == 0 {
				_ = w.flush()
				continue
			}
			for _, f := range fs[:k] {
				w.b = binary.LittleEndian.AppendUint64(w.b, math.Float64bits(f))
			}
			fs = fs[k:]
		}
		return w.flush()
	case TypeInt:
		return WriteVarints(enc, c.Ints, false)
	case TypeTimestamp:
		return WriteVarints(enc, c.Ints, true)
	case TypeBool:
		if err := enc.EncodeBytesLen(len(c.Bools)); err != nil {
			return err
		}
		if buf, ok := enc.Writer().(*bytes.Buffer); ok {
			b := growRoom(buf, len(c.Bools))
			putBools(b, c.Bools)
			buf.Write(b)
			return nil
		}
		w := newBinWriter(enc, len(c.Bools))
		for bs := c.Bools; len(bs) > 0; {
			k := min(len(bs), cap(w.b)-len(w.b))
			if k == 0 {
				_ = w.flush()
				continue
			}
			n := len(w.b)
			w.b = w.b[:n+k]
			putBools(w.b[n:], bs[:k])
			bs = bs[k:]
		}
		return w.flush()
	}
	return fmt.Errorf("encode column %q: unknown type %d", c.Name, c.Type)
}

// nativeLittleEndian: the machine holds a float64 as the wire does (8 bytes
// little-endian IEEE 754: amd64, arm64), so that a float column is copied
// as bytes, not converted value by value.
var nativeLittleEndian = binary.NativeEndian.Uint16([]byte{1, 0}) == 1

// floatBytes is the memory of f as bytes (f's own, not a copy).
func floatBytes(f []float64) []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(f))), 8*len(f))
}

// growRoom is the next n bytes of buf's free room, to be filled and then
// written (buf.Write(b): b is buf's own room, copied nowhere else).
func growRoom(buf *bytes.Buffer, n int) []byte {
	buf.Grow(n)
	return buf.AvailableBuffer()[:n]
}

// putBools writes each of vals as a byte 0 or 1 into b (as long), without
// a branch per value: which values are true follows no pattern.
func putBools(b []byte, vals []bool) {
	b = b[:len(vals)]
	for i, v := range vals {
		var x byte
		if v {
			x = 1
		}
		b[i] = x
	}
}

// ReadVarints fills out from b, len(out) zigzag varints (the differences to
// the one before when delta, wrapping as WriteVarints wraps) and nothing
// more. The values are those binary.Uvarint reads, non-minimal encodings
// included; while 8 bytes are left, without its loop.
func ReadVarints(out []int64, b []byte, delta bool) error {
	var prev int64
	i := 0
	for ; i < len(out) && len(b) >= 8; i++ {
		// Values of 1 to 5 bytes (a time's delta in ns is 5) by a branch on
		// each byte: a column's values mostly take as many bytes, so that
		// the branches are predicted and the next value's place is known
		// before this one is read (uvarint8's length, computed from the
		// bytes, made each read wait for the one before). Longer ones from
		// one load (uvarint8), cheaper than binary.Uvarint's loop.
		x := binary.LittleEndian.Uint64(b)
		var ux uint64
		switch {
		case x&0x80 == 0:
			ux, b = x&0x7f, b[1:]
		case x&0x8000 == 0:
			ux, b = x&0x7f|(x>>1)&0x3f80, b[2:]
		case x&0x800000 == 0:
			ux, b = x&0x7f|(x>>1)&0x3f80|(x>>2)&0x1fc000, b[3:]
		case x&0x80000000 == 0:
			ux, b = x&0x7f|(x>>1)&0x3f80|(x>>2)&0x1fc000|(x>>3)&0xfe00000, b[4:]
		case x&0x8000000000 == 0:
			ux, b = x&0x7f|(x>>1)&0x3f80|(x>>2)&0x1fc000|(x>>3)&0xfe00000|(x>>4)&0x7f0000000, b[5:]
		default:
			var k int
			if ux, k = uvarint8(x); k == 0 {
				if ux, k = binary.Uvarint(b); k <= 0 {
					return fmt.Errorf("bad varint at row %d", i)
				}
			}
			b = b[k:]
		}
		v := int64(ux>>1) ^ -int64(ux&1)
		if delta {
			v += prev
			prev = v
		}
		out[i] = v
	}
	for ; i < len(out); i++ {
		x, k := binary.Uvarint(b)
		if k <= 0 {
			return fmt.Errorf("bad varint at row %d", i)
		}
		b = b[k:]
		v := int64(x>>1) ^ -int64(x&1)
		if delta {
			v += prev
			prev = v
		}
		out[i] = v
	}
	if len(b) != 0 {
		return fmt.Errorf("%d trailing bytes", len(b))
	}
	return nil
}

// uvarint8 reads the uvarint at the start of x, 8 bytes of input in
// little-endian order, and its length in bytes; 0 when it is longer than 8.
// The 7-bit groups are gathered pairwise: 8 into 4 of 14 bits, 2 of 28, one.
func uvarint8(x uint64) (uint64, int) {
	last := ^x & 0x8080808080808080 // the stop bits: the bytes without a continuation bit
	if last == 0 {
		return 0, 0
	}
	n := bits.TrailingZeros64(last)>>3 + 1
	x &= 0x7f7f7f7f7f7f7f7f & (^uint64(0) >> (64 - 8*n))
	x = x&0x007f007f007f007f | (x&0x7f007f007f007f00)>>1
	x = x&0x00003fff00003fff | (x&0x3fff00003fff0000)>>2
	x = x&0x000000000fffffff | (x&0x0fffffff00000000)>>4
	return x, n
}

// varintsLen is the size of vals as zigzag varints (deltas when delta).
func varintsLen(vals []int64, delta bool) int {
	n, prev := 0, int64(0)
	for _, v := range vals {
		d := v
		if delta {
			d, prev = v-prev, v
		}
		ux := uint64(d)<<1 ^ uint64(d>>63)
		n += (bits.Len64(ux|1) + 6) / 7
	}
	return n
}

// WriteVarints encodes vals as one msgpack bin of zigzag varints, each the
// difference to the one before when delta (a timestamp column, a partial's
// times: wrapping on overflow, as the decoder wraps back). The bytes go to
// the encoder's writer in small pieces: a large column is not built in a
// buffer of its own first and then copied.
func WriteVarints(enc *msgpack.Encoder, vals []int64, delta bool) error {
	if buf, ok := enc.Writer().(*bytes.Buffer); ok {
		writeVarintsTo(buf, vals, delta)
		return nil
	}
	n := varintsLen(vals, delta)
	if err := enc.EncodeBytesLen(n); err != nil {
		return err
	}
	w := newBinWriter(enc, n)
	prev := int64(0)
	for len(vals) > 0 {
		// As many values as surely fit in the buffer, without a check each.
		k := min(len(vals), (cap(w.b)-len(w.b))/binary.MaxVarintLen64)
		if k == 0 {
			_ = w.flush()
			continue
		}
		for _, v := range vals[:k] {
			d := v
			if delta {
				d, prev = v-prev, v
			}
			w.b = binary.AppendVarint(w.b, d)
		}
		vals = vals[k:]
	}
	if err := w.flush(); err != nil {
		return err
	}
	if w.n != n {
		return fmt.Errorf("encode varints: wrote %d bytes, announced %d", w.n, n)
	}
	return nil
}

// writeVarintsTo is WriteVarints into a buffer (every table encoded by this
// package): the values are written straight into its free room, block by
// block, without a first pass to count their bytes; the bin's header, whose
// size depends on that count, goes in the room left for the largest (bin 32)
// and the values are moved up by the bytes it did not need. Each value is
// binary.AppendVarint's bytes, written by index into room made for the
// block's longest: append's check of the room on every byte was a sixth of
// a DAP's encoding of a large partial (BenchmarkLargePortion/encode).
func writeVarintsTo(buf *bytes.Buffer, vals []int64, delta bool) {
	start := buf.Len()
	buf.Write(make([]byte, 5))
	prev := int64(0)
	for len(vals) > 0 {
		k := min(len(vals), 4096)
		buf.Grow(k * binary.MaxVarintLen64)
		b := buf.AvailableBuffer()
		b = b[:cap(b)] // room for k of the longest
		at := 0
		for _, v := range vals[:k] {
			d := v
			if delta {
				d, prev = v-prev, v
			}
			ux := uint64(d)<<1 ^ uint64(d>>63) // zigzag, as binary.AppendVarint
			// Up to 5 bytes (a time's delta in ns is 5) written out, each
			// byte's store independent of the one before: a column's
			// values mostly take as many bytes, so the branches are
			// predicted; a loop's step a byte was the cost.
			switch {
			case ux < 1<<7:
				b[at] = byte(ux)
				at++
				continue
			case ux < 1<<14:
				_ = b[at+1]
				b[at], b[at+1] = byte(ux)|0x80, byte(ux>>7)
				at += 2
				continue
			case ux < 1<<21:
				_ = b[at+2]
				b[at], b[at+1], b[at+2] = byte(ux)|0x80, byte(ux>>7)|0x80, byte(ux>>14)
				at += 3
				continue
			case ux < 1<<28:
				_ = b[at+3]
				b[at], b[at+1], b[at+2], b[at+3] = byte(ux)|0x80, byte(ux>>7)|0x80, byte(ux>>14)|0x80, byte(ux>>21)
				at += 4
				continue
			case ux < 1<<35:
				_ = b[at+4]
				b[at], b[at+1], b[at+2], b[at+3], b[at+4] = byte(ux)|0x80, byte(ux>>7)|0x80, byte(ux>>14)|0x80, byte(ux>>21)|0x80, byte(ux>>28)
				at += 5
				continue
			}
			for ux >= 0x80 {
				b[at] = byte(ux) | 0x80
				ux >>= 7
				at++
			}
			b[at] = byte(ux)
			at++
		}
		buf.Write(b[:at]) // b is buf's own room: nothing is copied elsewhere
		vals = vals[k:]
	}
	all := buf.Bytes()
	n := len(all) - start - 5
	var head []byte
	switch {
	case n < 1<<8:
		head = []byte{0xc4, byte(n)}
	case n < 1<<16:
		head = []byte{0xc5, byte(n >> 8), byte(n)}
	default:
		head = []byte{0xc6, byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)}
	}
	copy(all[start+len(head):], all[start+5:])
	copy(all[start:], head)
	buf.Truncate(len(all) - (5 - len(head)))
}

// binWriter streams a msgpack bin's content to an encoder's writer through a
// small buffer, after its length was written (EncodeBytesLen).
type binWriter struct {
	w   io.Writer
	b   []byte
	n   int // bytes written
	err error
}

// newBinWriter buffers at most 8 KiB, and no more than the n bytes the bin
// holds: a small table's columns (a few bytes each) did not need 8 KiB each,
// which was half the bytes a small request allocated.
func newBinWriter(enc *msgpack.Encoder, n int) *binWriter {
	return &binWriter{w: enc.Writer(), b: make([]byte, 0, min(max(n, binary.MaxVarintLen64), 8<<10))}
}

// room flushes the buffer unless k more bytes fit.
func (w *binWriter) room(k int) {
	if cap(w.b)-len(w.b) < k {
		_ = w.flush()
	}
}

func (w *binWriter) flush() error {
	if len(w.b) > 0 && w.err == nil {
		var k int
		k, w.err = w.w.Write(w.b)
		w.n += k
	}
	w.b = w.b[:0]
	return w.err
}

// SizeHint is about the size of the table's msgpack form, an upper bound for
// tables of numbers and symbols: a buffer sized once by it is not regrown.
func (t *Table) SizeHint() int {
	n := 64
	for i := range t.Columns {
		n += t.Columns[i].sizeHint()
	}
	return n
}

// sizeHint is the column's share of Table.SizeHint.
func (c *Column) sizeHint() int {
	if c.Type != TypeString {
		return specSizeHint(c.Name, c.Type, c.Len())
	}
	n := 32 + len(c.Name)
	for i := range c.Len() {
		n += len(c.Str(i)) + 5
	}
	return n
}

// specSizeHint is sizeHint of a column of rows values of typ, without its
// values (a string column is guessed at 16 bytes a value).
func specSizeHint(name string, typ ColumnType, rows int) int {
	n := 32 + len(name)
	switch typ {
	case TypeSymbol:
		n += 2*rows + 1024 // codes, and a dictionary of a few distinct values
	case TypeString:
		n += 16 * rows
	case TypeFloat:
		n += 8 * rows
	case TypeInt, TypeTimestamp:
		n += 5 * rows
	case TypeBool:
		n += rows
	}
	return n
}

// EncodeTableMsgpack is Encode(&t) (the same bytes) with the columns written
// side by side on up to workers goroutines, into a buffer of about hint bytes
// (EncodeColumnsMsgpack). A large table's buffer may be one given back
// (ReleaseBuffer): give it back in turn once sent.
func EncodeTableMsgpack(t Table, workers, hint int) ([]byte, error) {
	workers = max(1, min(workers, len(t.Columns), t.NumRows()/parallelEncodeRows))
	if workers == 1 && hint < int(freeBuffers.min) {
		return encodeSmallTable(&t)
	}
	return encodeTableColumns(t, workers, hint)
}

// encodeSmallTable is encodeSized(t) for a small table, written by its own
// encoder (Table.EncodeMsgpack, the same bytes) on a pooled encoder: neither
// t nor the encoder's state goes to the heap through an interface (two of a
// small answer's allocations).
func encodeSmallTable(t *Table) ([]byte, error) {
	b, err := encodeInto(0, t.EncodeMsgpack)
	if err != nil {
		return nil, fmt.Errorf("messages: encode table: %w", err)
	}
	return b, nil
}

// encodeTableColumns is EncodeTableMsgpack's side by side writing.
func encodeTableColumns(t Table, workers, hint int) ([]byte, error) {
	sizes := make([]int, len(t.Columns))
	for k := range t.Columns {
		sizes[k] = t.Columns[k].sizeHint()
	}
	return encodeColumns(len(t.Columns), sizes, func(k int, _ *Column) *Column { return &t.Columns[k] }, workers, hint)
}

// EncodeColumnsMsgpack writes the msgpack form of a table of rows rows and
// the given schema (Encode's bytes for that table) whose columns are made
// one at a time by column(k, c): it fills c, its storage reused from the
// columns it made before on the same goroutine, with column k's rows (a
// merge gathers them). The table is never built whole; the columns are
// made and written side by side on up to workers goroutines, into a buffer
// of about hint bytes: the Agg writes a large answer on its critical path.
func EncodeColumnsMsgpack(schema []ColumnSpec, rows int, column func(k int, c *Column), workers, hint int) ([]byte, error) {
	workers = max(1, min(workers, len(schema), rows/parallelEncodeRows))
	sizes := make([]int, len(schema))
	for k, s := range schema {
		sizes[k] = specSizeHint(s.Name, s.Type, rows)
	}
	return encodeColumns(len(schema), sizes, func(k int, c *Column) *Column {
		column(k, c)
		c.Name, c.Type = schema[k].Name, schema[k].Type
		return c
	}, workers, hint)
}

// encodeColumns writes a table of n columns, column k made by column(k, c)
// (c is the calling goroutine's own scratch column) and about sizes[k] bytes.
// The columns go in runs of about equal size, a goroutine a run; the first
// run is written into the answer's buffer and the others are appended to it,
// so that only their share of the answer is copied.
func encodeColumns(n int, sizes []int, column func(k int, c *Column) *Column, workers, hint int) ([]byte, error) {
	total := 0
	for _, z := range sizes {
		total += z
	}
	bounds := make([]int, 0, workers+1)
	bounds = append(bounds, 0)
	acc := 0
	for k, z := range sizes {
		acc += z
		if len(bounds) < workers && acc >= total*len(bounds)/workers && k+1 < n {
			bounds = append(bounds, k+1)
		}
	}
	bounds = append(bounds, n)
	parts := make([][]byte, len(bounds)-1)
	errs := make([]error, len(parts))
	write := func(w int) {
		lo, hi := bounds[w], bounds[w+1]
		size := 0
		for k := lo; k < hi; k++ {
			size += sizes[k]
		}
		var buf *bytes.Buffer
		if w == 0 {
			buf = bytes.NewBuffer(freeBuffers.get(max(size, hint, 64))[:0])
		} else {
			buf = bytes.NewBuffer(getScratchBuf(size)) // appended to the answer, then kept
		}
		enc := msgpack.GetEncoder()
		enc.Reset(buf)
		defer msgpack.PutEncoder(enc)
		if w == 0 {
			errs[w] = encodeTableHead(enc, n)
		}
		scratch := getScratch()
		for k := lo; k < hi && errs[w] == nil; k++ {
			errs[w] = encodeColumn(enc, column(k, scratch))
		}
		putScratch(scratch)
		parts[w] = buf.Bytes()
	}
	var wg sync.WaitGroup
	for w := 1; w < len(parts); w++ {
		wg.Go(func() { write(w) })
	}
	write(0)
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("messages: encode table: %w", err)
	}
	b := parts[0]
	for _, p := range parts[1:] {
		b = append(b, p...)
		putScratchBuf(p)
	}
	return b, nil
}

// scratchColumns keep the scratch columns of encodeColumns' callers (a
// merge gathers each column of a large answer into one) for the next answer:
// allocated afresh, each would be cleared first and collected after, a few
// MB an answer. A free list, not a sync.Pool: a large answer runs several
// GCs, and a pool is emptied by two. It holds at most 2 x maxScratchBytes:
// a service under a memory limit keeps little for it.
var scratchColumns = make(chan *Column, 2)

// maxScratchBytes: a scratch column that grew beyond it (an answer of more
// than about a million rows) is not kept.
const maxScratchBytes = 8 << 20

func getScratch() *Column {
	select {
	case c := <-scratchColumns:
		return c
	default:
		return new(Column)
	}
}

func putScratch(c *Column) {
	if 16*cap(c.Strings)+8*cap(c.Floats)+8*cap(c.Ints)+cap(c.Bools)+4*cap(c.Codes) > maxScratchBytes {
		return
	}
	clear(c.Strings[:cap(c.Strings)]) // the list keeps no string alive
	*c = Column{Strings: c.Strings[:0], Floats: c.Floats[:0], Ints: c.Ints[:0], Bools: c.Bools[:0], Codes: c.Codes[:0]}
	select {
	case scratchColumns <- c:
	default:
	}
}

// scratchBufs keep the buffers encodeColumns' later runs of columns are
// written into before they are appended to the answer, as scratchColumns do.
var scratchBufs = make(chan []byte, 2)

func getScratchBuf(size int) []byte {
	select {
	case b := <-scratchBufs:
		if cap(b) >= size {
			return b[:0]
		}
	default:
	}
	return make([]byte, 0, size)
}

func putScratchBuf(b []byte) {
	if cap(b) > maxScratchBytes {
		return
	}
	select {
	case scratchBufs <- b[:0]:
	default:
	}
}

// encodeTableHead writes what precedes a table's columns: [version, [ and
// the number of columns.
func encodeTableHead(enc *msgpack.Encoder, columns int) error {
	if err := enc.EncodeArrayLen(2); err != nil {
		return err
	}
	if err := enc.EncodeInt(TableVersion); err != nil {
		return err
	}
	return enc.EncodeArrayLen(columns)
}

// parallelEncodeRows: a table with fewer rows is written on one goroutine
// (its rows cost less than starting others).
const parallelEncodeRows = 16 << 10

func encodeStrings(enc *msgpack.Encoder, ss []string) error {
	if err := enc.EncodeArrayLen(len(ss)); err != nil {
		return err
	}
	for _, s := range ss {
		if err := enc.EncodeString(s); err != nil {
			return err
		}
	}
	return nil
}

// dictEncode returns the distinct values in first-seen order and the codes,
// one per value, little endian in the smallest width for the dictionary's
// size (1, 2 or 4 bytes).
//
// It is on the path of every large answer (each DAP and the Agg encode every
// symbol value), so it avoids hashing each value: equal symbols of a column
// almost always share their bytes (a store's values, or a decoded column's
// dictionary), so a small cache keyed by the string's data pointer answers
// most values with one comparison, and the map only sees each distinct
// string's first occurrence and values that do not share bytes.
func dictEncode(vals []string) (dict []string, codes []byte) {
	type slot struct {
		p    *byte
		n    int
		code uint32
	}
	var cache [256]slot
	index := make(map[string]uint32)
	width := 1
	codes = make([]byte, 0, len(vals))
	for i, v := range vals {
		p := unsafe.StringData(v)
		// Fibonacci hashing of the address: literals packed byte by byte
		// in one section land in different slots too.
		h := (uint64(uintptr(unsafe.Pointer(p)))*0x9E3779B97F4A7C15 + uint64(len(v))) >> 56
		var code uint32
		if e := &cache[h]; e.p == p && e.n == len(v) && p != nil {
			code = e.code
		} else {
			var ok bool
			if code, ok = index[v]; !ok {
				code = uint32(len(dict))
				index[v] = code
				dict = append(dict, v)
				if w := codeWidth(len(dict)); w != width {
					// The dictionary outgrew the width: widen the codes so far.
					codes = widenCodes(codes[:i*width], width, w, len(vals))
					width = w
				}
			}
			*e = slot{p: p, n: len(v), code: code}
		}
		codes = appendCode(codes, width, code)
	}
	return dict, codes
}

// recode is dictEncode of a coded column, without hashing a value: the
// values its codes use, in first-seen order, and their codes. dict's values
// are distinct (DecodeCoded's, or a DictBuilder's), so the result is
// dictEncode's of the same values. Both are in s's storage, valid until s
// is used again or given back (recodeScratch.put).
func recode(dict []string, codes []uint32, s *recodeScratch) (used []string, b []byte) {
	u := usedCodes{dict: dict, used: s.used[:0]}
	dense := len(dict) <= 4*len(codes)+1024
	if dense {
		u.remap = slices.Grow(s.remap[:0], len(dict))[:len(dict)]
		clear(u.remap)
	} else {
		// A slice of a large dictionary (a DAP store's, of many distinct
		// symbols): a table by code would cost more than the rows.
		u.sparse = make(map[uint32]uint32)
	}
	if dense && codeWidth(len(dict)) == 1 {
		// At most 256 values used: one byte a code, known before the first
		// (the usual symbol column: a loop without a width to check, and a
		// value's first use the only call).
		b = slices.Grow(s.b[:0], len(codes))[:len(codes)]
		remap := u.remap
		for i, code := range codes {
			k := remap[code]
			if k == 0 {
				k = u.add(code)
			}
			b[i] = byte(k - 1)
		}
		s.keep(u.remap, u.used, b)
		return u.used, b
	}
	width := 1
	b = slices.Grow(s.b[:0], len(codes))
	for i, code := range codes {
		k := u.code(code)
		if w := codeWidth(len(u.used)); w != width {
			b = widenCodes(b[:i*width], width, w, len(codes))
			width = w
		}
		b = appendCode(b, width, k)
	}
	s.keep(u.remap, u.used, b)
	return u.used, b
}

// writeFirstSeen is recode of codes that claim to be numbered already as
// recode numbers them (Column.FirstSeen): they are written as they are, in
// the width of dict's values, each checked on the way to be at most the
// number of values used before it (a value's first use must be that number).
// Codes that pass are recode's own (its numbering is then the identity), and
// so are the bytes; ok is false where they do not, or where fewer values are
// used than dict holds and their width is not dict's, for recode to write.
// Like recode's, the results are in s's storage.
func writeFirstSeen(dict []string, codes []uint32, s *recodeScratch) (used []string, b []byte, ok bool) {
	width := codeWidth(len(dict))
	b = slices.Grow(s.b[:0], width*len(codes))[:width*len(codes)]
	s.b = b // kept for recode too, where the claim is false
	// next: the values used so far, the code of a value used for the first time.
	next := uint32(0)
	switch width {
	case 1:
		b := b[:len(codes)]
		for i, code := range codes {
			if code >= next {
				if code != next {
					return nil, nil, false
				}
				next++
			}
			b[i] = byte(code)
		}
	case 2:
		for i, code := range codes {
			if code >= next {
				if code != next {
					return nil, nil, false
				}
				next++
			}
			binary.LittleEndian.PutUint16(b[2*i:], uint16(code))
		}
	default:
		for i, code := range codes {
			if code >= next {
				if code != next {
					return nil, nil, false
				}
				next++
			}
			binary.LittleEndian.PutUint32(b[4*i:], code)
		}
	}
	if int(next) > len(dict) || codeWidth(int(next)) != width {
		return nil, nil, false
	}
	return dict[:next], b, true
}

// recodeScratch is recode's storage, reused from one symbol column's
// encoding to the next (recodeScratches): a small answer's four symbol
// columns took three slices each, answer after answer. One encodeColumn
// owns it from get to put, and has written what recode gave it by then.
type recodeScratch struct {
	remap []uint32
	used  []string
	b     []byte
}

// maxRecodeScratch bounds the values of a slice a recodeScratch keeps when
// it is given back: a large column's are left to the GC.
const maxRecodeScratch = 64 << 10

var recodeScratches = sync.Pool{New: func() any { return new(recodeScratch) }}

// keep holds recode's slices for the next use of s.
func (s *recodeScratch) keep(remap []uint32, used []string, b []byte) {
	s.remap, s.used, s.b = remap, used, b
}

// put gives s back, its strings let go.
func (s *recodeScratch) put() {
	clear(s.used)
	if cap(s.remap) > maxRecodeScratch || cap(s.used) > maxRecodeScratch || cap(s.b) > 4*maxRecodeScratch {
		return
	}
	recodeScratches.Put(s)
}

// usedCodes numbers a dictionary's values in the order first used (recode).
type usedCodes struct {
	dict, used []string
	remap      []uint32          // by code: 1 + the code in used; 0: not used yet
	sparse     map[uint32]uint32 // remap's values when remap is nil
}

// code is code's number in used.
func (u *usedCodes) code(code uint32) uint32 {
	var k uint32
	if u.remap != nil {
		k = u.remap[code]
	} else {
		k = u.sparse[code]
	}
	if k == 0 {
		k = u.add(code)
	}
	return k - 1
}

// add numbers code, used for the first time: 1 + its number in used.
func (u *usedCodes) add(code uint32) uint32 {
	u.used = append(u.used, u.dict[code])
	k := uint32(len(u.used))
	if u.remap != nil {
		u.remap[code] = k
	} else {
		u.sparse[code] = k
	}
	return k
}

// checkCodes reports whether every code is below n, and else the largest.
func checkCodes(codes []uint32, n int) (uint32, bool) {
	var top uint32 // a max without a branch a code
	for _, code := range codes {
		top = max(top, code)
	}
	return top, len(codes) == 0 || int(top) < n
}

// appendCode appends code in width bytes, little endian.
func appendCode(b []byte, width int, code uint32) []byte {
	switch width {
	case 1:
		return append(b, byte(code))
	case 2:
		return binary.LittleEndian.AppendUint16(b, uint16(code))
	}
	return binary.LittleEndian.AppendUint32(b, code)
}

// codeWidth is the width in bytes of the codes of a dictionary of n values.
func codeWidth(n int) int {
	switch {
	case n <= 1<<8:
		return 1
	case n <= 1<<16:
		return 2
	default:
		return 4
	}
}

// widenCodes rewrites codes from width from to width to, with room for rows codes.
func widenCodes(codes []byte, from, to, rows int) []byte {
	out := make([]byte, 0, rows*to)
	for i := 0; i < len(codes); i += from {
		var code uint32
		switch from {
		case 1:
			code = uint32(codes[i])
		case 2:
			code = uint32(binary.LittleEndian.Uint16(codes[i:]))
		default:
			code = binary.LittleEndian.Uint32(codes[i:])
		}
		out = appendCode(out, to, code)
	}
	return out
}

// DecodeMsgpack implements msgpack.CustomDecoder.
func (t *Table) DecodeMsgpack(dec *msgpack.Decoder) error {
	n, err := dec.DecodeArrayLen()
	if err != nil {
		return fmt.Errorf("%w: %v", ErrMalformedTable, err)
	}
	if n != 2 {
		return fmt.Errorf("%w: expected [version, columns], got %d elements", ErrMalformedTable, n)
	}
	v, err := dec.DecodeInt()
	if err != nil {
		return fmt.Errorf("%w: version: %v", ErrMalformedTable, err)
	}
	if v != TableVersion {
		return fmt.Errorf("%w: unsupported version %d (want %d)", ErrMalformedTable, v, TableVersion)
	}
	ncols, err := dec.DecodeArrayLen()
	if err != nil {
		return fmt.Errorf("%w: columns: %v", ErrMalformedTable, err)
	}
	// Sized once for the usual table; a claimed count above that grows as
	// columns actually arrive, as before.
	cols := make([]Column, 0, min(ncols, 64))
	for i := 0; i < ncols; i++ {
		c, err := decodeColumn(dec)
		if err != nil {
			return err
		}
		cols = append(cols, c)
	}
	out := Table{Columns: cols}
	if err := out.validate(false); err != nil { // each column's codes checked as read
		return err
	}
	*t = out
	return nil
}

func decodeColumn(dec *msgpack.Decoder) (Column, error) {
	var c Column
	r, _ := dec.Buffered().(*sliceReader)
	coded := r != nil && r.coded
	bad := func(format string, args ...any) (Column, error) {
		return Column{}, fmt.Errorf("%w: column %q: %s", ErrMalformedTable, c.Name, fmt.Sprintf(format, args...))
	}
	n, err := dec.DecodeArrayLen()
	if err != nil || n != 4 {
		return bad("expected [name, type, rows, payload] (%d, %v)", n, err)
	}
	if c.Name, err = decodeStringRecent(dec); err != nil {
		return bad("name: %v", err)
	}
	typ, err := dec.DecodeUint8()
	if err != nil {
		return bad("type: %v", err)
	}
	c.Type = ColumnType(typ)
	rows, err := dec.DecodeInt()
	if err != nil || rows < 0 {
		return bad("row count (%d, %v)", rows, err)
	}
	switch c.Type {
	case TypeSymbol:
		if k, err := dec.DecodeArrayLen(); err != nil || k != 2 {
			return bad("symbol payload must be [dictionary, codes]")
		}
		dict, err := decodeStrings(dec, -1)
		if err != nil {
			return bad("dictionary: %v", err)
		}
		b, err := binView(dec)
		if err != nil {
			return bad("codes: %v", err)
		}
		width := 4
		switch {
		case len(dict) <= 1<<8:
			width = 1
		case len(dict) <= 1<<16:
			width = 2
		}
		if rows > len(b)/width || len(b) != rows*width { // rows first: rows*width may overflow
			return bad("%d code bytes for %d rows of width %d", len(b), rows, width)
		}
		codes := freeCodes.get(rows)
		var top uint32 // the largest code, checked once against the dictionary
		switch width {
		case 1:
			for i, x := range b[:rows] {
				codes[i] = uint32(x)
				top = max(top, uint32(x))
			}
		case 2:
			for i := range codes {
				codes[i] = uint32(binary.LittleEndian.Uint16(b[2*i:]))
				top = max(top, codes[i])
			}
		default:
			for i := range codes {
				codes[i] = binary.LittleEndian.Uint32(b[4*i:])
				top = max(top, codes[i])
			}
		}
		if rows > 0 && int(top) >= len(dict) {
			return bad("code %d outside dictionary of %d", top, len(dict))
		}
		if coded {
			if !distinct(dict) {
				return bad("dictionary repeats a value")
			}
			c.Dict, c.Codes = dict, codes
			break
		}
		c.Strings = make([]string, rows)
		for i, code := range codes {
			c.Strings[i] = dict[code]
		}
		freeCodes.put(codes)
	case TypeString:
		if c.Strings, err = decodeStrings(dec, rows); err != nil {
			return bad("%v", err)
		}
	case TypeFloat:
		b, err := binView(dec)
		if err != nil || rows > len(b)/8 || len(b) != 8*rows { // rows first: 8*rows may overflow
			return bad("float payload: %d bytes for %d rows (%v)", len(b), rows, err)
		}
		c.Floats = freeFloats.get(rows)
		if nativeLittleEndian {
			copy(floatBytes(c.Floats), b)
			break
		}
		for i := range c.Floats {
			c.Floats[i] = math.Float64frombits(binary.LittleEndian.Uint64(b[8*i:]))
		}
	case TypeInt, TypeTimestamp:
		b, err := binView(dec)
		if err != nil || len(b) < rows { // a varint takes at least one byte
			return bad("int payload: %d bytes for %d rows (%v)", len(b), rows, err)
		}
		c.Ints = freeInts.get(rows)
		if err := ReadVarints(c.Ints, b, c.Type == TypeTimestamp); err != nil {
			return bad("%v", err)
		}
	case TypeBool:
		b, err := binView(dec)
		if err != nil || len(b) != rows {
			return bad("bool payload: %d bytes for %d rows (%v)", len(b), rows, err)
		}
		c.Bools = freeBools.get(rows)
		for i, x := range b {
			if x > 1 {
				return bad("bool byte %d", x)
			}
			c.Bools[i] = x == 1
		}
	default:
		return bad("unknown type %d", typ)
	}
	return c, nil
}

// distinct reports whether no value of dict repeats.
func distinct(dict []string) bool {
	if len(dict) < 2 {
		return true
	}
	seen := make(map[string]struct{}, len(dict))
	for _, s := range dict {
		if _, ok := seen[s]; ok {
			return false
		}
		seen[s] = struct{}{}
	}
	return true
}

// decodeStrings reads an array of strings; want >= 0 requires that many. The slice grows as
// strings actually arrive, never by the announced count.
func decodeStrings(dec *msgpack.Decoder, want int) ([]string, error) {
	n, err := dec.DecodeArrayLen()
	if err != nil {
		return nil, err
	}
	if n < 0 || (want >= 0 && n != want) {
		return nil, fmt.Errorf("%d strings, expected %d", n, want)
	}
	out := make([]string, 0, min(n, 1024))
	// A small dictionary's values (a symbol column's) repeat from table to
	// table: from recentStrings. A string column's rows, or a large
	// dictionary's, would mostly miss it: as before.
	recent := want < 0 && n <= maxRecentDict
	for i := 0; i < n; i++ {
		var s string
		var err error
		if recent {
			s, err = decodeStringRecent(dec)
		} else {
			s, err = dec.DecodeString()
		}
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, nil
}

// ---- JSON ----

// MarshalJSON writes the table as an array of row objects, keys in column order.
func (t Table) MarshalJSON() ([]byte, error) { return EncodeTableJSON(t, 1) }

// jsonColumns is what writing rows as JSON needs of a table's columns,
// computed once: each name as an object key with its colon, and a coded
// column's dictionary already quoted, so that a symbol is copied, not
// checked for characters to escape, row after row.
type jsonColumns struct {
	keys   [][]byte
	quoted [][][]byte // by column; nil unless the column is coded
}

func (t *Table) jsonColumns() *jsonColumns {
	jc := &jsonColumns{keys: make([][]byte, len(t.Columns)), quoted: make([][][]byte, len(t.Columns))}
	for k := range t.Columns {
		c := &t.Columns[k]
		jc.keys[k] = append(appendJSONString(nil, c.Name), ':')
		if c.Dict != nil {
			jc.quoted[k] = make([][]byte, len(c.Dict))
			for code, s := range c.Dict {
				jc.quoted[k][code] = appendJSONString(nil, s)
			}
		}
	}
	return jc
}

// appendJSONRows appends rows [lo, hi) as JSON objects separated by commas.
func (t *Table) appendJSONRows(b []byte, jc *jsonColumns, lo, hi int) []byte {
	days := make([]jsonDay, len(t.Columns)) // a timestamp column's day, written once per day
	for i := lo; i < hi; i++ {
		if i > lo {
			b = append(b, ',')
		}
		b = append(b, '{')
		for k := range t.Columns {
			if k > 0 {
				b = append(b, ',')
			}
			b = append(b, jc.keys[k]...)
			c := &t.Columns[k]
			switch {
			case jc.quoted[k] != nil:
				b = append(b, jc.quoted[k][c.Codes[i]]...)
			case c.Type == TypeTimestamp:
				b = append(b, '"')
				b = days[k].appendTimestamp(b, c.Ints[i])
				b = append(b, '"')
			default:
				b = appendJSONValue(b, c, i)
			}
		}
		b = append(b, '}')
	}
	return b
}

// EncodeTableJSON is t.MarshalJSON with the rows written side by side on up
// to workers goroutines, each a range of rows into a buffer of its own, and
// then joined: the JSON form of a large answer costs several times its
// msgpack form, and one core wrote it row after row. The goroutines end
// before it returns.
func EncodeTableJSON(t Table, workers int) ([]byte, error) {
	if err := t.Validate(); err != nil {
		return nil, err
	}
	n := t.NumRows()
	workers = max(1, min(workers, n/parallelEncodeRows))
	jc := t.jsonColumns()
	// Each buffer is sized from the first rows' bytes, with a margin, so that
	// it is not regrown on the way.
	sample := min(n, 256)
	perRow := 16 * len(t.Columns)
	if sample > 0 {
		perRow = (len(t.appendJSONRows(nil, jc, 0, sample))/sample + 1) * 9 / 8
	}
	// The first range is written into the answer's buffer, sized for all of
	// it, and the others are appended to it: one copy of (workers-1)/workers
	// of the answer, not of all of it.
	parts := make([][]byte, workers)
	var wg sync.WaitGroup
	for w := range workers {
		lo, hi := n*w/workers, n*(w+1)/workers
		write := func() {
			var b []byte
			if w == 0 {
				b = append(make([]byte, 0, 64+n*perRow), '[')
			} else {
				b = append(make([]byte, 0, 64+(hi-lo)*perRow), ',')
			}
			parts[w] = t.appendJSONRows(b, jc, lo, hi)
		}
		if workers == 1 {
			write()
		} else {
			wg.Go(write)
		}
	}
	wg.Wait()
	b := parts[0]
	for _, p := range parts[1:] {
		b = append(b, p...)
	}
	return append(b, ']'), nil
}

func appendJSONValue(b []byte, c *Column, i int) []byte {
	switch c.Type {
	case TypeSymbol, TypeString:
		return appendJSONString(b, c.Str(i))
	case TypeFloat:
		f := c.Floats[i]
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return append(b, "null"...) // JSON has no NaN or infinity
		}
		return strconv.AppendFloat(b, f, 'g', -1, 64)
	case TypeInt:
		return strconv.AppendInt(b, c.Ints[i], 10)
	case TypeTimestamp:
		var d jsonDay
		b = append(b, '"')
		b = d.appendTimestamp(b, c.Ints[i])
		return append(b, '"')
	case TypeBool:
		return strconv.AppendBool(b, c.Bools[i])
	}
	return append(b, "null"...)
}

// jsonDay is the day of the timestamp a column last wrote, and its date as
// written ("2006-01-02T"): the rows of an answer are mostly of a few days.
type jsonDay struct {
	day  int64
	set  bool
	date [11]byte
}

const nsPerDay = 86400 * 1e9

// appendTimestamp appends ns (Unix ns) in TimeFormat, UTC, without
// time.AppendFormat's layout parsing (it was half of writing a large answer
// as JSON) and computing the date only when the day changes. Every int64 of
// nanoseconds is a year of four digits (1677-2262).
func (d *jsonDay) appendTimestamp(b []byte, ns int64) []byte {
	day, rem := ns/nsPerDay, ns%nsPerDay
	if rem < 0 {
		day, rem = day-1, rem+nsPerDay
	}
	if !d.set || d.day != day {
		y, mo, dd := time.Unix(day*86400, 0).UTC().Date()
		putDigits(d.date[0:4], y)
		d.date[4] = '-'
		putDigits(d.date[5:7], int(mo))
		d.date[7] = '-'
		putDigits(d.date[8:10], dd)
		d.date[10] = 'T'
		d.day, d.set = day, true
	}
	var clock [19]byte // 15:04:05.000000000Z
	secs, nanos := int(rem/1e9), int(rem%1e9)
	putDigits(clock[0:2], secs/3600)
	clock[2] = ':'
	putDigits(clock[3:5], secs/60%60)
	clock[5] = ':'
	putDigits(clock[6:8], secs%60)
	clock[8] = '.'
	putDigits(clock[9:18], nanos)
	clock[18] = 'Z'
	b = append(b, d.date[:]...)
	return append(b, clock[:]...)
}

// putDigits writes v in decimal into all of b, with leading zeros.
func putDigits(b []byte, v int) {
	for k := len(b) - 1; k >= 0; k-- {
		b[k] = byte('0' + v%10)
		v /= 10
	}
}

// appendTimestamp is jsonDay.appendTimestamp without a day to reuse.
func appendTimestamp(b []byte, ns int64) []byte {
	var d jsonDay
	return d.appendTimestamp(b, ns)
}

// appendJSONString quotes s, taking the fast path when nothing needs escaping.
func appendJSONString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' || c >= utf8.RuneSelf {
			q, _ := json.Marshal(s) // a string always marshals
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// UnmarshalJSON reads an array of row objects. The JSON form carries no types, so they are
// inferred per column: all booleans -> bool; all numbers -> int if every one is an integer
// literal, else float (null counts as a float NaN); all strings -> timestamp if every one is
// an RFC 3339 time, else string. Symbols therefore come back as strings: use DecodeTableJSON
// with the schema when the exact types matter.
func (t *Table) UnmarshalJSON(data []byte) error {
	out, err := DecodeTableJSON(data, nil)
	if err != nil {
		return err
	}
	*t = out
	return nil
}

// DecodeTableJSON reads an array of row objects into a table with the given schema (column
// order and types), or with inferred types when schema is nil (see Table.UnmarshalJSON).
func DecodeTableJSON(data []byte, schema []ColumnSpec) (Table, error) {
	names, rows, err := readJSONRows(data)
	if err != nil {
		return Table{}, err
	}
	if schema == nil {
		schema = make([]ColumnSpec, len(names))
		for k, name := range names {
			schema[k] = ColumnSpec{Name: name, Type: inferJSONType(rows, k)}
		}
	} else {
		order := make(map[string]int, len(names))
		for k, name := range names {
			order[name] = k
		}
		if len(rows) > 0 && len(schema) != len(names) {
			return Table{}, fmt.Errorf("%w: rows have %d keys, schema has %d columns", ErrMalformedTable, len(names), len(schema))
		}
		perm := make([]int, len(schema))
		for k, s := range schema {
			j, ok := order[s.Name]
			if !ok && len(rows) > 0 {
				return Table{}, fmt.Errorf("%w: rows lack column %q", ErrMalformedTable, s.Name)
			}
			perm[k] = j
		}
		for r, row := range rows {
			re := make([]any, len(schema))
			for k, j := range perm {
				re[k] = row[j]
			}
			rows[r] = re
		}
	}
	t := NewTable(schema)
	for r, row := range rows {
		for k := range t.Columns {
			v, err := fromJSONValue(row[k], t.Columns[k].Type)
			if err != nil {
				return Table{}, fmt.Errorf("%w: row %d column %q: %v", ErrMalformedTable, r, t.Columns[k].Name, err)
			}
			if err := t.Columns[k].Append(v); err != nil {
				return Table{}, fmt.Errorf("%w: row %d: %v", ErrMalformedTable, r, err)
			}
		}
	}
	return t, t.Validate()
}

// readJSONRows tokenises the array of objects. Keys come in the first row's order; every
// row must carry the same keys; values must be scalars.
func readJSONRows(data []byte) (names []string, rows [][]any, err error) {
	if err := CheckJSON(data, PayloadLimits); err != nil {
		return nil, nil, fmt.Errorf("%w: %w", ErrMalformedTable, err)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	bad := func(format string, args ...any) ([]string, [][]any, error) {
		return nil, nil, fmt.Errorf("%w: %s", ErrMalformedTable, fmt.Sprintf(format, args...))
	}
	if tok, err := dec.Token(); err != nil || tok != json.Delim('[') {
		return bad("expected an array of row objects")
	}
	index := map[string]int{}
	for dec.More() {
		if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
			return bad("row %d is not an object", len(rows))
		}
		first := len(rows) == 0
		row := make([]any, len(names))
		set := make([]bool, len(names))
		for dec.More() {
			tok, err := dec.Token()
			if err != nil {
				return bad("row %d: %v", len(rows), err)
			}
			key, _ := tok.(string) // inside an object the decoder only yields string keys
			val, err := dec.Token()
			if err != nil {
				return bad("row %d key %q: %v", len(rows), key, err)
			}
			if _, isDelim := val.(json.Delim); isDelim {
				return bad("row %d key %q: value must be a scalar", len(rows), key)
			}
			k, ok := index[key]
			if !ok {
				if !first {
					return bad("row %d has unknown key %q", len(rows), key)
				}
				k = len(names)
				index[key] = k
				names = append(names, key)
				row = append(row, nil)
				set = append(set, false)
			}
			if set[k] {
				return bad("row %d repeats key %q", len(rows), key)
			}
			row[k], set[k] = val, true
		}
		for k, ok := range set {
			if !ok {
				return bad("row %d lacks key %q", len(rows), names[k])
			}
		}
		if _, err := dec.Token(); err != nil { // '}'
			return bad("row %d: %v", len(rows), err)
		}
		rows = append(rows, row)
	}
	if _, err := dec.Token(); err != nil { // ']'
		return bad("%v", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return bad("trailing data after the array")
	}
	return names, rows, nil
}

func inferJSONType(rows [][]any, k int) ColumnType {
	var bools, nums, ints, strs, times, nulls int
	for _, row := range rows {
		switch v := row[k].(type) {
		case bool:
			bools++
		case json.Number:
			nums++
			if _, err := strconv.ParseInt(string(v), 10, 64); err == nil {
				ints++
			}
		case string:
			strs++
			if _, err := time.Parse(time.RFC3339Nano, v); err == nil {
				times++
			}
		case nil:
			nulls++
		}
	}
	switch n := len(rows); {
	case n > 0 && bools == n:
		return TypeBool
	case n > 0 && ints == n:
		return TypeInt
	case n > 0 && nums+nulls == n:
		return TypeFloat
	case n > 0 && times == n:
		return TypeTimestamp
	}
	return TypeString // also for mixed columns, which then fail to decode with a clear error
}

func fromJSONValue(v any, typ ColumnType) (any, error) {
	switch typ {
	case TypeSymbol, TypeString, TypeBool:
		return v, nil // Column.Append checks the Go type
	case TypeFloat:
		if v == nil {
			return math.NaN(), nil
		}
		if n, ok := v.(json.Number); ok {
			return strconv.ParseFloat(string(n), 64)
		}
	case TypeInt:
		if n, ok := v.(json.Number); ok {
			return strconv.ParseInt(string(n), 10, 64)
		}
	case TypeTimestamp:
		if s, ok := v.(string); ok {
			return time.Parse(time.RFC3339Nano, s)
		}
	}
	return nil, fmt.Errorf("%T is not a %s", v, typ)
}
