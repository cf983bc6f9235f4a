package merge

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/sg-project/sg/messages"
)

// reflectEncodePartial is EncodePartial as it was before the hand encoder:
// the reflection encoder's bytes, which older Aggs read.
func reflectEncodePartial(t testing.TB, p Partial) []byte {
	t.Helper()
	p = p.forWire()
	b, err := messages.EncodeSized(&p, 0)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// reflectDecodePartial is DecodePartial as it was before the hand decoder.
func reflectDecodePartial(b []byte) (p Partial, err error) {
	defer func() {
		if r := recover(); r != nil {
			p, err = Partial{}, fmt.Errorf("%w: decoder panic: %v", ErrInvalidPartial, r)
		}
	}()
	if p, err = decodePartialReflect(b); err != nil {
		return Partial{}, err
	}
	if err := p.timesFromColumn(); err != nil {
		return Partial{}, err
	}
	if err := p.validate(true); err != nil {
		return Partial{}, err
	}
	p.validated = true
	return p, nil
}

// codecPartials are partials of every form: rows with and without times,
// times in a column of the rows or not, symbol columns plain and coded,
// empty tables, tables without columns, reference tables (times 0), an
// older version, and aggregated ones of every function.
func codecPartials(t testing.TB) []Partial {
	t.Helper()
	schema := []messages.ColumnSpec{{Name: "time", Type: messages.TypeTimestamp}, {Name: "sym", Type: messages.TypeSymbol},
		{Name: "note", Type: messages.TypeString}, {Name: "px", Type: messages.TypeFloat}, {Name: "q", Type: messages.TypeInt},
		{Name: "b", Type: messages.TypeBool}}
	syms := []string{"VOD.L", "BP.L", "RIO.L", "", "HSBA.L"}
	var out []Partial
	for seed := range uint64(12) {
		rng := rand.New(rand.NewPCG(seed, 3))
		n := rng.IntN(40)
		if seed < 2 {
			n = 0
		}
		tb := messages.NewTable(schema)
		times := make([]int64, n)
		for i := range n {
			times[i] = int64(rng.IntN(1<<40)) - 1<<39
			_ = tb.AppendRow(times[i], syms[rng.IntN(len(syms))], fmt.Sprint(rng.IntN(9)), rng.NormFloat64(), int64(rng.Uint64()), rng.IntN(2) == 0)
		}
		p := Partial{Version: PartialVersion, Rows: tb, Times: times}
		out = append(out, p)
		other := make([]int64, n) // times not in a column: a reference table's 0s
		out = append(out, Partial{Version: PartialVersion, Rows: tb, Times: other})
		if n == 0 {
			out = append(out, Partial{Version: PartialVersion, Rows: tb})
		}
		// Version 2: times sent whole (one in a column too, which it may not name).
		out = append(out, Partial{Version: 2, Rows: tb, Times: other}, Partial{Version: 2, Rows: tb, Times: times})
		if b, err := EncodePartial(p); err == nil { // coded symbol columns
			if q, err := reflectDecodePartial(b); err == nil {
				out = append(out, q)
			}
		}
		idx := identity(n)
		args := messages.GetDataArgs{Table: "t", GroupBy: []string{"sym"}, Agg: []messages.AggSpec{
			{Name: "n", Func: "count"}, {Name: "lo", Func: "min", Column: "note"}, {Name: "f", Func: "first", Column: "px"},
			{Name: "s", Func: "sum", Column: "q"}, {Name: "a", Func: "avg", Column: "px"}, {Name: "m", Func: "max", Column: "b"}}}
		keys := []*messages.Column{tb.Col("sym")}
		inputs := []*messages.Column{nil, tb.Col("note"), tb.Col("px"), tb.Col("q"), tb.Col("px"), tb.Col("b")}
		ap, err := AggregatePartial(&args, keys, inputs, times, idx)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, ap)
		args.GroupBy = nil
		if ap, err = AggregatePartial(&args, nil, inputs, times, idx); err != nil {
			t.Fatal(err)
		}
		out = append(out, ap)
	}
	keys2 := messages.NewTable([]messages.ColumnSpec{{Name: "k", Type: messages.TypeSymbol}})
	_ = keys2.AppendRow("x")
	_ = keys2.AppendRow("y")
	out = append(out,
		Partial{Version: PartialVersion},
		Partial{Version: PartialVersion, Aggregated: true},
		Partial{Version: PartialVersion, Aggregated: true, Groups: 1, Aggs: []AggState{{Name: "n", Func: messages.AggCount, Count: []int64{3}}}},
		Partial{Version: PartialVersion, Aggregated: true, Groups: 2, Keys: keys2, Aggs: []AggState{{Name: "s", Func: messages.AggSum, Type: messages.TypeFloat,
			FloatSum: [][]float64{nil, {1.5, -1e300}}, Special: []float64{math.Inf(1), 0}},
			{Name: "i", Func: messages.AggSum, Type: messages.TypeInt, IntSum: []int64{math.MinInt64, math.MaxInt64}}}},
	)
	return out
}

// The hand encoder writes the reflection encoder's bytes, by EncodePartial
// and by EncodePartialTo, for partials of every form.
func TestEncodePartialIsReflectionEncoding(t *testing.T) {
	for i, p := range codecPartials(t) {
		want := reflectEncodePartial(t, p)
		got, err := EncodePartial(p)
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != string(want) {
			t.Fatalf("partial %d: EncodePartial\n%x\nthe reflection encoder\n%x", i, got, want)
		}
		enc := msgpack.GetEncoder()
		var buf bytesBuffer
		enc.Reset(&buf)
		if err := EncodePartialTo(enc, p); err != nil {
			t.Fatal(err)
		}
		msgpack.PutEncoder(enc)
		if string(buf) != string(want) {
			t.Fatalf("partial %d: EncodePartialTo\n%x\nthe reflection encoder\n%x", i, buf, want)
		}
	}
}

type bytesBuffer []byte

func (b *bytesBuffer) Write(p []byte) (int, error) { *b = append(*b, p...); return len(p), nil }

// sameDecode fails unless DecodePartial and the reflection decoder agree on
// data: the same partial, or both ErrInvalidPartial.
func sameDecode(t testing.TB, data []byte) (Partial, error) {
	t.Helper()
	got, gerr := DecodePartial(data)
	want, werr := reflectDecodePartial(data)
	switch {
	case (gerr == nil) != (werr == nil):
		t.Fatalf("%x: DecodePartial %v, the reflection decoder %v", data, gerr, werr)
	case gerr != nil:
		if !errors.Is(gerr, ErrInvalidPartial) || !errors.Is(werr, ErrInvalidPartial) {
			t.Fatalf("%x: errors %v and %v, want ErrInvalidPartial", data, gerr, werr)
		}
	default:
		// %#v, not reflect.DeepEqual: a NaN is itself, nil and empty differ.
		if g, w := fmt.Sprintf("%#v", got), fmt.Sprintf("%#v", want); g != w {
			t.Fatalf("%x: DecodePartial\n%s\nthe reflection decoder\n%s", data, g, w)
		}
	}
	return got, gerr
}

// DecodePartial's hand decoder gives the reflection decoder's partial or
// error class: on partials of every form, every truncation of them, and
// random byte flips. Every partial encoded is read by the hand decoder
// itself.
func TestDecodePartialIsReflectionDecoding(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	hand := 0
	for i, p := range codecPartials(t) {
		b, err := EncodePartial(p)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := sameDecode(t, b); err != nil && p.Version == PartialVersion {
			t.Fatalf("partial %d: %v", i, err)
		}
		var q Partial
		if err := decodePartialWire(b, &q); err != nil {
			t.Fatalf("partial %d: not read by the hand decoder: %v", i, err)
		}
		hand++
		for n := range len(b) {
			sameDecode(t, b[:n])
		}
		for range 200 {
			c := append([]byte(nil), b...)
			for range 1 + rng.IntN(3) {
				c[rng.IntN(len(c))] = byte(rng.Uint32())
			}
			sameDecode(t, c)
		}
	}
	// Every partial above was read by the hand decoder (or the test stopped):
	// this guards the corpus, which must stay wide enough to mean something.
	if hand < 80 {
		t.Fatalf("the corpus holds only %d partials, want 80 or more", hand)
	}
}

// FuzzPartialCodec: on any bytes, DecodePartial agrees with the reflection
// decoder (sameDecode), and what decodes encodes by hand to the reflection
// encoder's bytes. Run with e.g.
//
//	go test -run '^$' -fuzz '^FuzzPartialCodec$' -fuzztime 30s ./services/agg/merge/
func FuzzPartialCodec(f *testing.F) {
	for _, p := range codecPartials(f) {
		b, err := EncodePartial(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := sameDecode(t, data)
		if err != nil {
			return
		}
		got, err := EncodePartial(p)
		if err != nil {
			return // e.g. a value the table encoder refuses: the same either way
		}
		if want := reflectEncodePartial(t, p); string(got) != string(want) {
			t.Fatalf("%x decodes to a partial encoded\n%x\nby hand, and\n%x\nby reflection", data, got, want)
		}
	})
}

// BenchmarkPartialCodec compares the hand codec with the reflection codec
// on a small partial (one row) and a large one (40,000 rows): a large
// answer's partials must not cost more.
func BenchmarkPartialCodec(b *testing.B) {
	schema := []messages.ColumnSpec{{Name: "time", Type: messages.TypeTimestamp}, {Name: "sym", Type: messages.TypeSymbol},
		{Name: "px", Type: messages.TypeFloat}, {Name: "q", Type: messages.TypeInt}, {Name: "b", Type: messages.TypeBool}}
	syms := []string{"VOD.L", "BP.L", "RIO.L", "HSBA.L"}
	for _, rows := range []int{1, 40000} {
		rng := rand.New(rand.NewPCG(1, 2))
		tb := messages.NewTable(schema)
		times := make([]int64, rows)
		for i := range rows {
			times[i] = int64(i) * 1e6
			_ = tb.AppendRow(times[i], syms[rng.IntN(len(syms))], rng.Float64(), int64(rng.IntN(1000)), rng.IntN(2) == 0)
		}
		p := Partial{Version: PartialVersion, Rows: tb, Times: times}
		data, err := EncodePartial(p)
		if err != nil {
			b.Fatal(err)
		}
		name := fmt.Sprintf("rows=%d/", rows)
		b.Run(name+"encode=hand", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_, _ = EncodePartial(p)
			}
		})
		b.Run(name+"encode=reflect", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				q := p.forWire() // as EncodePartial was
				_, _ = messages.EncodeSized(&q, q.Rows.SizeHint()+5*len(q.Times)+q.Keys.SizeHint())
			}
		})
		b.Run(name+"decode=hand", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				q, _ := DecodePartial(data)
				q.Release()
			}
		})
		b.Run(name+"decode=reflect", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				q, _ := reflectDecodePartial(data)
				q.Release()
			}
		})
	}
	// An aggregated partial of 10,000 groups: its states' arrays (counts,
	// sums, float sums) are read value by value, not as a table's columns.
	rng := rand.New(rand.NewPCG(3, 4))
	tb := messages.NewTable([]messages.ColumnSpec{{Name: "time", Type: messages.TypeTimestamp}, {Name: "g", Type: messages.TypeInt},
		{Name: "px", Type: messages.TypeFloat}, {Name: "q", Type: messages.TypeInt}})
	const rows = 40000
	times := make([]int64, rows)
	for i := range rows {
		times[i] = int64(i) * 1e6
		_ = tb.AppendRow(times[i], int64(rng.IntN(10000)), rng.NormFloat64(), int64(rng.IntN(1000)))
	}
	args := messages.GetDataArgs{Table: "t", GroupBy: []string{"g"}, Agg: []messages.AggSpec{
		{Name: "n", Func: "count"}, {Name: "s", Func: "sum", Column: "q"}, {Name: "a", Func: "avg", Column: "px"},
		{Name: "f", Func: "first", Column: "px"}}}
	agg, err := AggregatePartial(&args, []*messages.Column{tb.Col("g")},
		[]*messages.Column{nil, tb.Col("q"), tb.Col("px"), tb.Col("px")}, times, identity(rows))
	if err != nil {
		b.Fatal(err)
	}
	data, err := EncodePartial(agg)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := sameDecode(b, data); err != nil {
		b.Fatal(err)
	}
	if err := decodePartialWire(data, &Partial{}); err != nil {
		b.Fatalf("the aggregated partial is not read by the hand decoder: %v", err)
	}
	for _, c := range []struct {
		name   string
		decode func([]byte) (Partial, error)
	}{{"hand", DecodePartial}, {"reflect", reflectDecodePartial}} {
		b.Run("groups=10000/decode="+c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_, _ = c.decode(data)
			}
		})
	}
}
