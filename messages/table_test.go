package messages

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"
)

func sampleTable(t testing.TB) Table {
	tb := NewTable([]ColumnSpec{
		{"time", TypeTimestamp}, {"sym", TypeSymbol}, {"note", TypeString},
		{"price", TypeFloat}, {"size", TypeInt}, {"block", TypeBool},
	})
	t0 := time.Date(2024, 1, 2, 9, 30, 0, 0, time.UTC)
	rows := [][]any{
		{t0, "VOD.L", "a \"quoted\" <note>", 0.72, int64(100), false},
		{t0.Add(1500 * time.Millisecond), "BP.L", "", 4.85, int64(-3), true},
		{time.Date(1970, 1, 1, 0, 0, 0, 1, time.UTC), "VOD.L", "é", -1e300, int64(math.MaxInt64), false},
	}
	for _, r := range rows {
		if err := tb.AppendRow(r...); err != nil {
			t.Fatal(err)
		}
	}
	return tb
}

func TestTableJSONShape(t *testing.T) {
	tb := sampleTable(t)
	tb.Columns[3].Floats[2] = math.NaN()
	b, err := tb.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	want := `[{"time":"2024-01-02T09:30:00.000000000Z","sym":"VOD.L","note":"a \"quoted\" \u003cnote\u003e","price":0.72,"size":100,"block":false},` +
		`{"time":"2024-01-02T09:30:01.500000000Z","sym":"BP.L","note":"","price":4.85,"size":-3,"block":true},` +
		`{"time":"1970-01-01T00:00:00.000000001Z","sym":"VOD.L","note":"é","price":null,"size":9223372036854775807,"block":false}]`
	if string(b) != want {
		t.Fatalf("JSON\n got %s\nwant %s", b, want)
	}
	empty := NewTable([]ColumnSpec{{"a", TypeInt}})
	if b, _ := empty.MarshalJSON(); string(b) != "[]" {
		t.Errorf("empty table: %s", b)
	}
}

func TestTableJSONRoundTrip(t *testing.T) {
	tb := sampleTable(t)
	b, err := tb.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeTableJSON(b, tb.Schema())
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, tb) {
		t.Fatalf("with schema\n got %+v\nwant %+v", got, tb)
	}
	// Without a schema the types are inferred; only the symbol column loses its type.
	var inferred Table
	if err := inferred.UnmarshalJSON(b); err != nil {
		t.Fatal(err)
	}
	want := tb
	want.Columns = append([]Column(nil), tb.Columns...)
	want.Columns[1].Type = TypeString
	if !reflect.DeepEqual(inferred, want) {
		t.Fatalf("inferred\n got %+v\nwant %+v", inferred, want)
	}
}

func TestTableJSONMalformed(t *testing.T) {
	for _, c := range []string{``, `{}`, `[1]`, `[{"a":1},{"b":1}]`, `[{"a":1},{"a":1,"b":2}]`, `[{"a":1,"a":2}]`,
		`[{"a":[1]}]`, `[{"a":1}] x`, `[{"a":1}`, `[{"a":1,"b":true},{"a":"x","b":1}]`} {
		if _, err := DecodeTableJSON([]byte(c), nil); !errors.Is(err, ErrMalformedTable) {
			t.Errorf("%s: err %v, want ErrMalformedTable", c, err)
		}
	}
	schema := []ColumnSpec{{"a", TypeInt}}
	for _, c := range []string{`[{"a":1.5}]`, `[{"a":"1"}]`, `[{"b":1}]`} {
		if _, err := DecodeTableJSON([]byte(c), schema); !errors.Is(err, ErrMalformedTable) {
			t.Errorf("%s with schema: err %v, want ErrMalformedTable", c, err)
		}
	}
}

func TestTableMsgpackRoundTrip(t *testing.T) {
	big := NewTable([]ColumnSpec{{"sym", TypeSymbol}, {"time", TypeTimestamp}})
	for i := 0; i < 70000; i++ { // > 65536 distinct symbols: 4-byte codes
		if err := big.AppendRow(fmt.Sprintf("S%d", i%66000), int64(1e18)-int64(i)*7); err != nil {
			t.Fatal(err)
		}
	}
	for _, tb := range []Table{sampleTable(t), big, NewTable([]ColumnSpec{{"x", TypeFloat}}), {}} {
		b, err := msgpack.Marshal(tb)
		if err != nil {
			t.Fatal(err)
		}
		var got Table
		if err := msgpack.Unmarshal(b, &got); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got.Schema(), tb.Schema()) || got.NumRows() != tb.NumRows() {
			t.Fatalf("schema/rows differ: %v %d vs %v %d", got.Schema(), got.NumRows(), tb.Schema(), tb.NumRows())
		}
		for k := range tb.Columns {
			for i := 0; i < tb.NumRows(); i++ {
				if got.Columns[k].Compare(i, &tb.Columns[k], i) != 0 {
					t.Fatalf("column %q row %d: %v vs %v", tb.Columns[k].Name, i, got.Columns[k].Value(i), tb.Columns[k].Value(i))
				}
			}
		}
	}
	// Columnar and dictionary-encoded: a symbol row costs one byte, a sorted time a few.
	narrow := NewTable([]ColumnSpec{{"sym", TypeSymbol}, {"time", TypeTimestamp}})
	for i := 0; i < 10000; i++ {
		_ = narrow.AppendRow([]string{"VOD.L", "BP.L"}[i%2], int64(1.7e18)+int64(i)*1000)
	}
	if b, _ := msgpack.Marshal(narrow); len(b) > 10000*4 {
		t.Errorf("10000 rows of (symbol, time) took %d bytes, want <= 4 per row", len(b))
	}
}

func TestTableMsgpackMalformed(t *testing.T) {
	good, err := msgpack.Marshal(sampleTable(t))
	if err != nil {
		t.Fatal(err)
	}
	for n := 0; n < len(good); n++ {
		var tb Table
		if err := msgpack.Unmarshal(good[:n], &tb); err == nil {
			t.Fatalf("truncated to %d bytes: no error", n)
		}
	}
	// A hostile row count must fail before allocating for it.
	hostile, _ := msgpack.Marshal([]any{TableVersion, []any{[]any{"x", uint8(TypeFloat), 1 << 40, []byte{1}}}})
	var tb Table
	if err := msgpack.Unmarshal(hostile, &tb); !errors.Is(err, ErrMalformedTable) {
		t.Errorf("hostile row count: %v", err)
	}
	// Columns of different lengths.
	uneven, _ := msgpack.Marshal([]any{TableVersion, []any{
		[]any{"a", uint8(TypeBool), 1, []byte{1}}, []any{"b", uint8(TypeBool), 2, []byte{0, 1}}}})
	if err := msgpack.Unmarshal(uneven, &tb); !errors.Is(err, ErrMalformedTable) {
		t.Errorf("uneven columns: %v", err)
	}
	// A symbol code outside the dictionary.
	badCode, _ := msgpack.Marshal([]any{TableVersion, []any{[]any{"s", uint8(TypeSymbol), 1, []any{[]string{"a"}, []byte{1}}}}})
	if err := msgpack.Unmarshal(badCode, &tb); !errors.Is(err, ErrMalformedTable) {
		t.Errorf("bad symbol code: %v", err)
	}
	// Coded too: the codes are checked once, as the column is read.
	if err := DecodeCoded(badCode, &tb, PayloadLimits); !errors.Is(err, ErrMalformed) {
		t.Errorf("bad symbol code, coded: %v", err)
	}
}

func TestTableHelpers(t *testing.T) {
	tb := sampleTable(t)
	if tb.NumRows() != 3 || tb.Index("price") != 3 || tb.Col("nope") != nil {
		t.Fatalf("NumRows %d Index %d", tb.NumRows(), tb.Index("price"))
	}
	tk := tb.Take([]int{2, 0})
	if tk.Columns[1].Strings[0] != "VOD.L" || tk.Columns[4].Ints[1] != 100 || tk.NumRows() != 2 {
		t.Fatalf("Take: %+v", tk)
	}
	sl := tb.Slice(1, 2)
	if sl.NumRows() != 1 || sl.Columns[3].Floats[0] != 4.85 {
		t.Fatalf("Slice: %+v", sl)
	}
	// A failed AppendRow leaves the columns of equal length.
	if err := tb.AppendRow(time.Now(), "X", "n", "not a float", int64(1), true); err == nil {
		t.Fatal("AppendRow accepted a string for a float column")
	}
	if err := tb.Validate(); err != nil || tb.NumRows() != 3 {
		t.Fatalf("after failed append: %v, %d rows", err, tb.NumRows())
	}
}

func FuzzDecodeTableMsgpack(f *testing.F) {
	b, _ := msgpack.Marshal(sampleTable(f))
	f.Add(b)
	for _, b := range hostileMsgpack {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var (
			tb  Table
			err error
		)
		checkAlloc(t, "table msgpack", data, func() { err = DecodeLimited(data, &tb, PayloadLimits) })
		if err != nil {
			return
		}
		if err := tb.Validate(); err != nil {
			t.Fatalf("decoded an invalid table: %v", err)
		}
		js, err := tb.MarshalJSON()
		if err != nil {
			t.Fatalf("decoded table does not marshal: %v", err)
		}
		// Coded, the same table: the same JSON, and encoded again the
		// same bytes as the table of strings.
		var coded Table
		if err := DecodeCoded(data, &coded, PayloadLimits); err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("coded: error %v is not ErrMalformed", err)
			}
			return
		}
		if err := coded.Validate(); err != nil {
			t.Fatalf("decoded an invalid coded table: %v", err)
		}
		if cjs, err := coded.MarshalJSON(); err != nil || !bytes.Equal(cjs, js) {
			t.Fatalf("the coded table's JSON differs (%v):\n%s\n%s", err, cjs, js)
		}
		plain, err1 := Encode(&tb)
		again, err2 := Encode(&coded)
		if err1 != nil || err2 != nil || !bytes.Equal(plain, again) {
			t.Fatalf("the coded table encodes differently (%v, %v)", err1, err2)
		}
	})
}

func TestColumnSpecJSON(t *testing.T) {
	in := []ColumnSpec{{Name: "sym", Type: TypeSymbol}, {Name: "price", Type: TypeFloat}, {Name: "time", Type: TypeTimestamp}}
	b, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != `[{"name":"sym","type":"symbol"},{"name":"price","type":"float"},{"name":"time","type":"timestamp"}]` {
		t.Fatalf("JSON %s", b)
	}
	var out []ColumnSpec
	if err := json.Unmarshal(b, &out); err != nil || len(out) != 3 || out[2] != in[2] {
		t.Fatalf("round trip %v %v", out, err)
	}
	if err := json.Unmarshal([]byte(`[{"name":"x","type":"decimal"}]`), &out); err == nil {
		t.Fatal("want an error for an unknown type")
	}
}

// TestSymbolDictionaryWidths: symbol columns round-trip whatever the
// dictionary's size (1-, 2- and 4-byte codes, widened as it grows past 256
// and 65536 values) and whether equal values share their bytes or not.
func TestSymbolDictionaryWidths(t *testing.T) {
	for _, distinct := range []int{1, 256, 257, 65536, 65537} {
		for _, shared := range []bool{true, false} {
			values := make([]string, distinct)
			for i := range values {
				values[i] = fmt.Sprintf("s%d", i)
			}
			rows := 2*distinct + 100
			c := Column{Name: "sym", Type: TypeSymbol, Strings: make([]string, rows)}
			for i := range rows {
				v := values[(i*7919)%distinct]
				if !shared {
					v = string([]byte(v)) // a copy of its own
				}
				c.Strings[i] = v
			}
			c.Strings[rows-1] = "" // the empty symbol is a value like any other
			tbl := Table{Columns: []Column{c}}
			data, err := Encode(&tbl)
			if err != nil {
				t.Fatal(err)
			}
			var got Table
			if err := Decode(data, &got); err != nil {
				t.Fatalf("%d distinct (shared %v): %v", distinct, shared, err)
			}
			if !slices.Equal(got.Columns[0].Strings, c.Strings) {
				t.Fatalf("%d distinct (shared %v): the column does not round-trip", distinct, shared)
			}
			// Coded, and encoded again without hashing: the same bytes.
			var coded Table
			if err := DecodeCoded(data, &coded, PayloadLimits); err != nil || !coded.Columns[0].Coded() {
				t.Fatalf("%d distinct (shared %v): coded: %v", distinct, shared, err)
			}
			if again, err := Encode(&coded); err != nil || !bytes.Equal(again, data) {
				t.Fatalf("%d distinct (shared %v): the coded column encodes differently (%v)", distinct, shared, err)
			}
		}
	}
}

// TestAppendTimestampMatchesFormat: the JSON timestamp writer is
// time.AppendFormat with TimeFormat in UTC, for any int64 of nanoseconds.
func TestAppendTimestampMatchesFormat(t *testing.T) {
	vals := []int64{0, 1, -1, math.MaxInt64, math.MinInt64, 1_700_000_000_123_456_789, -62_135_596_800_000_000_0}
	for i := range 10000 {
		vals = append(vals, int64(uint64(i)*0x9E3779B97F4A7C15))
	}
	// Runs within a day and across midnight, before and after 1970, as a
	// column writes them with one jsonDay.
	for _, start := range []int64{0, -1, 1_700_000_000_123_456_789, -nsPerDay - 7, math.MinInt64, math.MaxInt64 - 3*nsPerDay} {
		for k := range int64(200) {
			vals = append(vals, start+k*(nsPerDay/64)+k)
		}
	}
	var day jsonDay
	for _, v := range vals {
		want := time.Unix(0, v).UTC().AppendFormat(nil, TimeFormat)
		if got := appendTimestamp(nil, v); string(got) != string(want) {
			t.Fatalf("%d: %s, want %s", v, got, want)
		}
		if got := day.appendTimestamp(nil, v); string(got) != string(want) {
			t.Fatalf("%d after the day of the one before: %s, want %s", v, got, want)
		}
	}
}

// TestLargeTableRoundTrip: a table whose columns are written in many pieces
// (WriteVarints, binWriter) decodes to the same values.
func TestLargeTableRoundTrip(t *testing.T) {
	tbl := tradeTable(30_000)
	tbl.Columns[4].Ints[7] = math.MinInt64 // extreme ints and time deltas
	tbl.Columns[4].Ints[8] = math.MaxInt64
	tbl.Columns[0].Ints[9] = math.MinInt64
	data, err := Encode(&tbl)
	if err != nil {
		t.Fatal(err)
	}
	var got Table
	if err := Decode(data, &got); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, tbl) {
		t.Fatal("a large table does not round-trip")
	}
}

// EncodeTableJSON gives the bytes MarshalJSON gives, on any number of
// workers, and refuses what MarshalJSON refuses.
func TestEncodeTableJSONMatchesMarshalJSON(t *testing.T) {
	for _, tbl := range []Table{sampleTable(t), tradeTable(parallelEncodeRows - 1), tradeTable(3*parallelEncodeRows + 7), {}} {
		want, err := tbl.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		for _, workers := range []int{0, 1, 2, 3, 16} {
			got, err := EncodeTableJSON(tbl, workers)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, want) {
				t.Fatalf("%d rows on %d workers: %d bytes differ from MarshalJSON's %d", tbl.NumRows(), workers, len(got), len(want))
			}
		}
	}
	bad := tradeTable(2 * parallelEncodeRows)
	bad.Columns[2].Name = bad.Columns[1].Name
	if _, err := EncodeTableJSON(bad, 2); err == nil {
		t.Fatal("a table with two columns of one name encoded")
	}
}

// codedSample is sampleTable decoded with its symbol column coded.
func codedSample(t *testing.T) (plain, coded Table) {
	plain = sampleTable(t)
	data, err := Encode(&plain)
	if err != nil {
		t.Fatal(err)
	}
	if err := DecodeCoded(data, &coded, PayloadLimits); err != nil {
		t.Fatal(err)
	}
	if c := coded.Col("sym"); !c.Coded() || len(c.Strings) != 0 || len(c.Dict) != 2 {
		t.Fatalf("sym decoded as %+v, want coded with a dictionary of 2", c)
	}
	if coded.Col("note").Coded() {
		t.Fatal("a string column came coded")
	}
	return plain, coded
}

// rowsOf is a table's rows as Go values, whatever its columns' forms.
func rowsOf(tb *Table) [][]any {
	out := make([][]any, tb.NumRows())
	for i := range out {
		for k := range tb.Columns {
			out[i] = append(out[i], tb.Columns[k].Value(i))
		}
	}
	return out
}

// TestCodedColumn: a dictionary-coded symbol column reads, compares, slices,
// takes and appends as the same column of strings does, whatever the other
// side's form, and keeps its codes where that is exact.
func TestCodedColumn(t *testing.T) {
	plain, coded := codedSample(t)
	if !reflect.DeepEqual(rowsOf(&coded), rowsOf(&plain)) {
		t.Fatalf("coded rows %v, want %v", rowsOf(&coded), rowsOf(&plain))
	}
	pc, cc := plain.Col("sym"), coded.Col("sym")
	for i := range 3 {
		for j := range 3 {
			if got, want := cc.Compare(i, cc, j), pc.Compare(i, pc, j); got != want {
				t.Errorf("Compare(%d, %d) coded %d, strings %d", i, j, got, want)
			}
			if got, want := cc.Compare(i, pc, j), pc.Compare(i, pc, j); got != want {
				t.Errorf("Compare(%d, %d) coded with strings %d, want %d", i, j, got, want)
			}
		}
	}
	idx := []int{2, 0, 2}
	if taken := coded.Take(idx); !taken.Col("sym").Coded() || !reflect.DeepEqual(rowsOf(&taken), rowsOf(new(plain.Take(idx)))) {
		t.Errorf("Take: %v", rowsOf(&taken))
	}
	if sl := coded.Slice(1, 3); !sl.Col("sym").Coded() || !reflect.DeepEqual(rowsOf(&sl), rowsOf(new(plain.Slice(1, 3)))) {
		t.Errorf("Slice: %v", rowsOf(&sl))
	}
	// Same dictionary: codes appended; another form: strings.
	same := coded.Slice(0, 1)
	same.AppendRowFrom(&coded, 2)
	if !same.Col("sym").Coded() || same.Col("sym").Str(1) != "VOD.L" {
		t.Errorf("AppendRowFrom, same dictionary: %+v", same.Col("sym"))
	}
	mixed := coded.Slice(0, 1)
	mixed.AppendRowFrom(&plain, 1)
	if mixed.Col("sym").Coded() || !slices.Equal(mixed.Col("sym").Strings, []string{"VOD.L", "BP.L"}) {
		t.Errorf("AppendRowFrom, strings into coded: %+v", mixed.Col("sym"))
	}
	set := coded.Slice(0, 3)
	set.Col("sym").SetFrom(0, pc, 1)
	if got := set.Col("sym"); got.Str(0) != "BP.L" || cc.Str(0) != "VOD.L" {
		t.Errorf("SetFrom: %v, the source column now %v", got.Value(0), cc.Value(0))
	}
	// Another dictionary: the codes are mapped, the dictionary grows by
	// what it lacks, and the first column's dictionary is not written.
	other := Column{Name: "sym", Type: TypeSymbol, Dict: []string{"RIO.L", "VOD.L"}, Codes: []uint32{1, 0, 0}}
	app := cc.Slice(0, 3)
	app.AppendColumn(&other)
	want := []string{"VOD.L", "BP.L", "VOD.L", "VOD.L", "RIO.L", "RIO.L"}
	if !app.Coded() || len(app.Dict) != 3 || app.Len() != 6 {
		t.Fatalf("AppendColumn of another dictionary: %+v", app)
	}
	for i, w := range want {
		if app.Str(i) != w {
			t.Errorf("AppendColumn row %d: %q, want %q", i, app.Str(i), w)
		}
	}
	if len(cc.Dict) != 2 {
		t.Errorf("AppendColumn grew the source's dictionary: %v", cc.Dict)
	}
	empty := Column{Name: "sym", Type: TypeSymbol}
	empty.AppendColumn(cc)
	if !empty.Coded() || empty.Len() != 3 || empty.Str(2) != "VOD.L" {
		t.Errorf("AppendColumn into an empty column: %+v", empty)
	}
	// JSON and msgpack: the same as the table of strings.
	pj, _ := plain.MarshalJSON()
	if cj, err := coded.MarshalJSON(); err != nil || !bytes.Equal(cj, pj) {
		t.Errorf("JSON %s (%v), want %s", cj, err, pj)
	}
	if cj, err := EncodeTableJSON(coded, 2); err != nil || !bytes.Equal(cj, pj) {
		t.Errorf("EncodeTableJSON %s (%v), want %s", cj, err, pj)
	}
	// Uncode: a column of strings.
	u := cc.Slice(0, 3)
	u.Uncode()
	if u.Coded() || !slices.Equal(u.Strings, pc.Strings) {
		t.Errorf("Uncode: %+v", u)
	}
	// Truncate leaves no dictionary behind.
	tr := coded.Slice(0, 3)
	tr.Truncate()
	if tr.Col("sym").Coded() || tr.NumRows() != 0 || tr.Validate() != nil {
		t.Errorf("Truncate: %+v", tr.Col("sym"))
	}
}

// TestCodedColumnHostile: codes outside the dictionary, a dictionary that
// repeats a value, or codes beside strings are refused, by the decoder and by
// Validate.
func TestCodedColumnHostile(t *testing.T) {
	repeated := Table{Columns: []Column{{Name: "sym", Type: TypeSymbol, Dict: []string{"a", "a"}, Codes: []uint32{0, 1}}}}
	data, err := Encode(&repeated) // recode keeps both: what a hostile sender could send
	if err != nil {
		t.Fatal(err)
	}
	var tb Table
	if err := DecodeCoded(data, &tb, PayloadLimits); !errors.Is(err, ErrMalformed) {
		t.Errorf("a dictionary repeating a value: %v, want ErrMalformed", err)
	}
	if err := Decode(data, &tb); err != nil || !slices.Equal(tb.Columns[0].Strings, []string{"a", "a"}) {
		t.Errorf("a dictionary repeating a value, as strings: %v %v", tb.Columns[0].Strings, err)
	}
	for name, c := range map[string]Column{
		"code outside":      {Name: "s", Type: TypeSymbol, Dict: []string{"a"}, Codes: []uint32{0, 1}},
		"codes and strings": {Name: "s", Type: TypeSymbol, Dict: []string{"a"}, Codes: []uint32{0}, Strings: []string{"a"}},
		"coded float":       {Name: "s", Type: TypeFloat, Dict: []string{}, Floats: []float64{1}},
	} {
		tb := Table{Columns: []Column{c}}
		if err := tb.Validate(); !errors.Is(err, ErrMalformedTable) {
			t.Errorf("%s: Validate %v, want ErrMalformedTable", name, err)
		}
	}
	// A code outside the dictionary on the wire (1-byte codes, dictionary of 1).
	bad, err := msgpack.Marshal([]any{TableVersion, []any{[]any{"s", uint8(TypeSymbol), 2, []any{[]string{"a"}, []byte{0, 1}}}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := DecodeCoded(bad, &tb, PayloadLimits); !errors.Is(err, ErrMalformed) {
		t.Errorf("a code outside the dictionary: %v, want ErrMalformed", err)
	}
}

// TestDictBuilderAppendCodes: a builder codes columns of strings and coded
// ones into one dictionary; a dictionary handed out earlier does not change
// as the builder grows.
func TestDictBuilderAppendCodes(t *testing.T) {
	d := NewDictBuilder(nil)
	codes := d.AppendCodes(nil, &Column{Type: TypeSymbol, Strings: []string{"a", "a", "b", "a"}})
	first := d.Dict()
	codes = d.AppendCodes(codes, &Column{Type: TypeSymbol, Dict: []string{"c", "b"}, Codes: []uint32{0, 1, 0}})
	if !slices.Equal(codes, []uint32{0, 0, 1, 0, 2, 1, 2}) || !slices.Equal(d.Dict(), []string{"a", "b", "c"}) {
		t.Fatalf("codes %v, dictionary %v", codes, d.Dict())
	}
	if !slices.Equal(first, []string{"a", "b"}) {
		t.Fatalf("an earlier dictionary became %v", first)
	}
}

// TestRecodeSliceOfLargeDictionary: a few rows coded in a large dictionary
// (a DAP store's) encode as the same rows of strings do.
func TestRecodeSliceOfLargeDictionary(t *testing.T) {
	dict := make([]string, 100_000)
	for i := range dict {
		dict[i] = strconv.Itoa(i)
	}
	coded := Table{Columns: []Column{{Name: "s", Type: TypeSymbol, Dict: dict, Codes: []uint32{99_999, 7, 99_999, 300}}}}
	plain := Table{Columns: []Column{{Name: "s", Type: TypeSymbol, Strings: []string{"99999", "7", "99999", "300"}}}}
	cb, err := Encode(&coded)
	if err != nil {
		t.Fatal(err)
	}
	pb, err := Encode(&plain)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(cb, pb) {
		t.Fatalf("coded %x, strings %x", cb, pb)
	}
}

// TestEncodeTableMsgpackMatchesEncode: the columns written side by side give
// Encode's bytes, for any number of workers, coded columns included.
func TestEncodeTableMsgpackMatchesEncode(t *testing.T) {
	plain := tradeTable(3 * parallelEncodeRows)
	data, err := Encode(&plain)
	if err != nil {
		t.Fatal(err)
	}
	var coded Table
	if err := DecodeCoded(data, &coded, PayloadLimits); err != nil {
		t.Fatal(err)
	}
	small := sampleTable(t)
	for _, tb := range []Table{plain, coded, small, {}} {
		want, err := Encode(&tb)
		if err != nil {
			t.Fatal(err)
		}
		for _, workers := range []int{1, 2, 3, 64} {
			for _, hint := range []int{0, len(want)} {
				got, err := EncodeTableMsgpack(tb, workers, hint)
				if err != nil || !bytes.Equal(got, want) {
					t.Fatalf("%d rows, %d workers, hint %d: %d bytes (%v), want %d", tb.NumRows(), workers, hint, len(got), err, len(want))
				}
			}
		}
	}
}

// A large table encoded on one goroutine (an Agg's frame) is written into
// the buffer of the one before, given back (ReleaseBuffer), not a new one.
func TestEncodeTableMsgpackReusesBuffer(t *testing.T) {
	tb := tradeTable(parallelEncodeRows - 1) // one goroutine, whatever workers says
	want, err := Encode(&tb)
	if err != nil {
		t.Fatal(err)
	}
	first, err := EncodeTableMsgpack(tb, 2, tb.SizeHint())
	if err != nil || !bytes.Equal(first, want) {
		t.Fatalf("%d bytes (%v), want Encode's %d", len(first), err, len(want))
	}
	ReleaseBuffer(first)
	again, err := EncodeTableMsgpack(tb, 2, tb.SizeHint())
	if err != nil || !bytes.Equal(again, want) {
		t.Fatalf("into a reused buffer: %d bytes (%v), want Encode's %d", len(again), err, len(want))
	}
	if &again[:1][0] != &first[:1][0] {
		t.Fatal("the buffer given back was not reused")
	}
}

// TestWriteVarintsIntoBuffer: written into a bytes.Buffer (no size counted
// first) the bin is the bytes the streaming path writes, for every header
// size, after what the buffer held.
func TestWriteVarintsIntoBuffer(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{0, 1, 100, 255, 256, 5000, 40_000, 70_000} {
		vals := make([]int64, n)
		for i := range vals {
			switch rng.IntN(4) {
			case 0:
				vals[i] = rng.Int64()
			case 1:
				vals[i] = math.MinInt64
			default:
				vals[i] = int64(i) * 7
			}
		}
		for _, delta := range []bool{false, true} {
			var streamed struct{ bytes.Buffer } // not a *bytes.Buffer: the streaming path
			enc := msgpack.NewEncoder(&streamed)
			if err := WriteVarints(enc, vals, delta); err != nil {
				t.Fatal(err)
			}
			buf := bytes.NewBufferString("head")
			if err := WriteVarints(msgpack.NewEncoder(buf), vals, delta); err != nil {
				t.Fatal(err)
			}
			if got := buf.Bytes(); string(got[:4]) != "head" || !bytes.Equal(got[4:], streamed.Bytes()) {
				t.Fatalf("%d values, delta %v: %d bytes into a buffer, %d streamed", n, delta, len(got)-4, streamed.Len())
			}
		}
	}
}

// A column's storage given back (ReleaseColumn) is reused by the next
// decodes, which write every value of it: a table decoded into reused
// storage is the table decoded afresh, whatever the storage held before.
func TestDecodeIntoReleasedColumns(t *testing.T) {
	big, small := tradeTable(30_000), tradeTable(20_000)
	small.Columns[0].Ints[5] = -7 // not big's values where storage is reused
	for i := range small.Columns[3].Floats {
		small.Columns[3].Floats[i] = -small.Columns[3].Floats[i]
	}
	encBig, err := Encode(&big)
	if err != nil {
		t.Fatal(err)
	}
	encSmall, err := Encode(&small)
	if err != nil {
		t.Fatal(err)
	}
	var fresh Table
	if err := DecodeCoded(encSmall, &fresh, PayloadLimits); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		var a Table
		if err := DecodeCoded(encBig, &a, PayloadLimits); err != nil {
			t.Fatal(err)
		}
		released := map[*int64]bool{}
		for k := range a.Columns {
			if c := a.Columns[k].Ints; len(c) > 0 {
				released[&c[0]] = true
			}
			ReleaseColumn(&a.Columns[k])
		}
		var b Table
		if err := DecodeCoded(encSmall, &b, PayloadLimits); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(b, fresh) {
			t.Fatal("a table decoded into released storage differs from one decoded afresh")
		}
		if !released[&b.Columns[0].Ints[0]] {
			t.Error("the released storage was not reused")
		}
		for k := range b.Columns {
			ReleaseColumn(&b.Columns[k])
		}
	}
}

// TestFloatColumnBytes: a float column is written as 8 bytes little-endian
// IEEE 754 a value and read back bit for bit (NaN payloads, -0, infinities,
// subnormals), whether copied as the machine's bytes or converted.
func TestFloatColumnBytes(t *testing.T) {
	vals := []float64{0, math.Copysign(0, -1), math.Inf(1), math.Inf(-1), math.Float64frombits(0x7ff8_dead_beef_0001),
		math.Float64frombits(0xfff0_0000_0000_0001), math.SmallestNonzeroFloat64, -math.MaxFloat64, 1.5, -2.25}
	tb := NewTable([]ColumnSpec{{Name: "f", Type: TypeFloat}})
	tb.Columns[0].Floats = vals
	var want []byte
	for _, f := range vals {
		want = binary.LittleEndian.AppendUint64(want, math.Float64bits(f))
	}
	data, err := Encode(&tb)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(data, want) {
		t.Fatalf("the column's bytes are not the values' little-endian bits: % x", data)
	}
	var got Table
	if err := Decode(data, &got); err != nil {
		t.Fatal(err)
	}
	for i, f := range got.Columns[0].Floats {
		if math.Float64bits(f) != math.Float64bits(vals[i]) {
			t.Fatalf("row %d: read %#x, wrote %#x", i, math.Float64bits(f), math.Float64bits(vals[i]))
		}
	}
}

// firstSeenColumn is a coded column of rows rows over a dictionary of n
// values whose codes are first-seen (Column.FirstSeen): every value used,
// each first used in code order, then at random.
func firstSeenColumn(rng *rand.Rand, n, rows int) Column {
	c := Column{Name: "sym", Type: TypeSymbol, Dict: make([]string, n), Codes: make([]uint32, 0, rows), FirstSeen: true}
	for i := range c.Dict {
		c.Dict[i] = "v" + strconv.Itoa(i)
	}
	next := uint32(0)
	for i := range rows {
		if int(next) < n && (next == 0 || rng.IntN(3) == 0 || rows-i <= n-int(next)) {
			c.Codes = append(c.Codes, next)
			next++
			continue
		}
		c.Codes = append(c.Codes, uint32(rng.IntN(int(next))))
	}
	return c
}

// TestFirstSeenEncodesAsRecode: a coded column that says its codes are
// first-seen (Column.FirstSeen) is written as it is, and one whose claim is
// false is numbered again (recode): either way the bytes are those of the
// column without the claim, and of its strings (dictEncode), for
// dictionaries of every code width and the widths' edges, all values used
// or not, no rows, and claims false in every way the codes can make them.
func TestFirstSeenEncodesAsRecode(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 5))
	type sample struct {
		name string
		c    Column
		true bool // the claim holds: written as it is
	}
	var samples []sample
	for _, n := range []int{0, 1, 2, 255, 256, 257, 65536, 65537, 70000} {
		rows := n + rng.IntN(n+10)
		if n == 0 {
			rows = 0
		}
		c := firstSeenColumn(rng, n, rows)
		samples = append(samples, sample{fmt.Sprintf("%d values", n), c, true})
		if n < 2 {
			continue
		}
		// Fewer values used than the dictionary holds: in the width of
		// the values used, the claim holds for them; in another, recode.
		used := n - 1 - rng.IntN(min(n-1, 40))
		cut := Column{Name: c.Name, Type: c.Type, Dict: c.Dict, FirstSeen: true}
		for _, code := range c.Codes {
			if int(code) < used {
				cut.Codes = append(cut.Codes, code)
			}
		}
		samples = append(samples, sample{fmt.Sprintf("%d of %d values used", used, n), cut, codeWidth(used) == codeWidth(n)})
		// A value first used before one coded below it: swap two codes'
		// first uses, or start with a code other than 0.
		swapped := c
		swapped.Codes = slices.Clone(c.Codes)
		a := uint32(rng.IntN(n - 1))
		b := a + 1
		for i, code := range swapped.Codes {
			switch code {
			case a:
				swapped.Codes[i] = b
			case b:
				swapped.Codes[i] = a
			}
		}
		samples = append(samples, sample{fmt.Sprintf("%d values, %d and %d swapped", n, a, b), swapped, false})
		late := c
		late.Codes = slices.Clone(c.Codes)
		late.Codes[0] = uint32(n - 1)
		samples = append(samples, sample{fmt.Sprintf("%d values, %d first", n, n-1), late, false})
	}
	// Codes in order beyond their dictionary of 200 values, in its width
	// and beyond it: recode panics on them, as before the claim; the claim
	// alone must not pass them.
	for _, codes := range []int{201, 250, 300} {
		over := make([]uint32, codes)
		for i := range over {
			over[i] = uint32(i)
		}
		if _, _, ok := writeFirstSeen(make([]string, 200), over, new(recodeScratch)); ok {
			t.Errorf("codes 0 to %d pass as first-seen over 200 values", codes-1)
		}
	}
	for _, s := range samples {
		if _, _, ok := writeFirstSeen(s.c.Dict, s.c.Codes, new(recodeScratch)); ok != s.true {
			t.Errorf("%s: written as they are %v, want %v", s.name, ok, s.true)
		}
		claimed := Table{Columns: []Column{s.c}}
		got, err := Encode(&claimed)
		if err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		unclaimed := Table{Columns: []Column{s.c}}
		unclaimed.Columns[0].FirstSeen = false
		want, err := Encode(&unclaimed)
		if err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("%s: %d bytes with the claim, %d without", s.name, len(got), len(want))
		}
		plain := Table{Columns: []Column{s.c}}
		plain.Columns[0].Uncode()
		if strs, err := Encode(&plain); err != nil || !bytes.Equal(got, strs) {
			t.Fatalf("%s: %d bytes, %d as strings (%v)", s.name, len(got), len(strs), err)
		}
		if s.c.Len() > parallelEncodeRows {
			if side, err := EncodeTableMsgpack(claimed, 2, 0); err != nil || !bytes.Equal(side, want) {
				t.Fatalf("%s: %d bytes side by side (%v), want %d", s.name, len(side), err, len(want))
			}
		}
	}
}

// TestFirstSeenDropped: Column's methods that change a coded column's codes
// drop its claim to be first-seen, which they would not keep in general.
func TestFirstSeenDropped(t *testing.T) {
	mk := func() *Column {
		return &Column{Name: "s", Type: TypeSymbol, Dict: []string{"a", "b"}, Codes: []uint32{0, 1}, FirstSeen: true}
	}
	for name, change := range map[string]func(c *Column){
		"AppendFrom":   func(c *Column) { c.AppendFrom(&Column{Type: TypeSymbol, Dict: c.Dict, Codes: []uint32{1}}, 0) },
		"SetFrom":      func(c *Column) { c.SetFrom(0, &Column{Type: TypeSymbol, Dict: c.Dict, Codes: []uint32{1}}, 0) },
		"AppendColumn": func(c *Column) { c.AppendColumn(&Column{Type: TypeSymbol, Dict: []string{"c"}, Codes: []uint32{0}}) },
		"Uncode":       func(c *Column) { c.Uncode() },
	} {
		c := mk()
		change(c)
		if c.FirstSeen {
			t.Errorf("%s kept the claim: %+v", name, c)
		}
	}
	tb := Table{Columns: []Column{*mk()}}
	tb.Truncate()
	if tb.Columns[0].FirstSeen {
		t.Errorf("Truncate kept the claim")
	}
}
