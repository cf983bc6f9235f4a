package messages

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"
)

// Reflection twins: the same fields and tags without the hand codec's
// methods, so the library encodes and decodes them by reflection, as a
// build before the hand codecs did.
type (
	reflRCSubmission      RCSubmission
	reflPortionDispatch   PortionDispatch
	reflPortionCompletion PortionCompletion
	reflPartialResult     PartialResult
	reflAggExpectation    AggExpectation
	reflAggDone           AggDone
	reflRCAnnouncement    RCAnnouncement
	// reflLogEntry's Submission keeps its hand codec: an entry written by
	// reflection holds a reflection-written submission, which is the same.
	reflLogEntry LogEntry
)

// wireCase is one hand-coded type: hand makes a new value of it, twin views
// a value of it as its reflection twin (the same memory).
type wireCase struct {
	hand func() any
	twin func(any) any
}

var wireCases = []wireCase{
	{func() any { return new(RCSubmission) }, func(v any) any { return (*reflRCSubmission)(v.(*RCSubmission)) }},
	{func() any { return new(PortionDispatch) }, func(v any) any { return (*reflPortionDispatch)(v.(*PortionDispatch)) }},
	{func() any { return new(PortionCompletion) }, func(v any) any { return (*reflPortionCompletion)(v.(*PortionCompletion)) }},
	{func() any { return new(PartialResult) }, func(v any) any { return (*reflPartialResult)(v.(*PartialResult)) }},
	{func() any { return new(AggExpectation) }, func(v any) any { return (*reflAggExpectation)(v.(*AggExpectation)) }},
	{func() any { return new(AggDone) }, func(v any) any { return (*reflAggDone)(v.(*AggDone)) }},
	{func() any { return new(RCAnnouncement) }, func(v any) any { return (*reflRCAnnouncement)(v.(*RCAnnouncement)) }},
	{func() any { return new(LogEntry) }, func(v any) any { return (*reflLogEntry)(v.(*LogEntry)) }},
}

// wireFiller sets every field of a value, recursively, to random values:
// a field that a hand codec forgets then differs from what reflection
// reads. zero is the chance of leaving a field zero (omitempty's case).
type wireFiller struct {
	rng  *rand.Rand
	zero float64
}

var (
	rawMessageType = reflect.TypeFor[msgpack.RawMessage]()
	rawMsgpackType = reflect.TypeFor[RawMsgpack]()
)

func (f *wireFiller) fill(v reflect.Value) {
	if f.rng.Float64() < f.zero {
		v.SetZero()
		return
	}
	switch v.Type() {
	case rawMessageType, rawMsgpackType:
		// An embedded value must be msgpack itself.
		b, err := msgpack.Marshal(map[string]any{f.str(): f.rng.Int64(), "x": []any{f.str(), 1.5, nil}})
		if err != nil {
			panic(err)
		}
		v.SetBytes(b)
		return
	}
	switch v.Kind() {
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		bits := v.Type().Bits()
		v.SetUint(f.rng.Uint64() >> (64 - 1 - f.rng.IntN(bits))) // every width up to the type's
	case reflect.Int, reflect.Int64:
		n := int64(f.rng.Uint64() >> (64 - 1 - f.rng.IntN(63)))
		if f.rng.IntN(2) == 0 {
			n = -n
		}
		if f.rng.IntN(20) == 0 {
			n = []int64{math.MinInt64, math.MaxInt64, -1, -32, -33, 127, 128}[f.rng.IntN(7)]
		}
		v.SetInt(n)
	case reflect.String:
		v.SetString(f.str())
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				f.fill(v.Field(i))
			}
		}
	case reflect.Pointer:
		p := reflect.New(v.Type().Elem())
		f.fill(p.Elem())
		v.Set(p)
	case reflect.Map:
		n := f.rng.IntN(20)
		m := reflect.MakeMapWithSize(v.Type(), n)
		for range n {
			k := reflect.New(v.Type().Key()).Elem()
			e := reflect.New(v.Type().Elem()).Elem()
			k.SetString(f.str())
			f.fill(e)
			m.SetMapIndex(k, e)
		}
		v.Set(m)
	case reflect.Slice:
		n := 1 + f.rng.IntN(20)
		s := reflect.MakeSlice(v.Type(), n, n)
		for i := range n {
			f.fillAll(s.Index(i))
		}
		v.Set(s)
	default:
		panic(fmt.Sprintf("wireFiller: no rule for %s", v.Type()))
	}
}

// fillAll fills a slice element with no zero field: sg never sends an
// empty element (slices.go), which both decoders refuse.
func (f *wireFiller) fillAll(v reflect.Value) {
	z := f.zero
	f.zero = 0
	f.fill(v)
	f.zero = z
}

// str is a random string of every msgpack length class now and then.
func (f *wireFiller) str() string {
	n := f.rng.IntN(32)
	switch f.rng.IntN(30) {
	case 0:
		n = 32 + f.rng.IntN(300) // str 8 and 16
	case 1:
		n = 70000 // str 32
	}
	b := make([]byte, n)
	for i := range b {
		b[i] = byte('a' + f.rng.IntN(26))
	}
	return string(b)
}

// decodeTwin decodes data by reflection, as a build before the hand codecs.
func decodeTwin(data []byte, twin any) error { return DecodeLimited(data, twin, PayloadLimits) }

// Bytes written by either codec read the same with either: a random value
// of every hand-coded type, encoded by the hand codec and by reflection,
// decodes to one value whichever decoder reads it.
func TestWireCompatibleWithReflection(t *testing.T) {
	rng := rand.New(rand.NewPCG(10, 1))
	for _, c := range wireCases {
		typ := reflect.TypeOf(c.hand()).Elem()
		t.Run(typ.Name(), func(t *testing.T) {
			for i := range 300 {
				f := wireFiller{rng: rng, zero: 0.25}
				switch i {
				case 0:
					f.zero = 0 // every field set
				case 1:
					f.zero = 1 // every field zero
				}
				v := c.hand()
				f.fill(reflect.ValueOf(v).Elem())
				f.zero = 0.25
				checkWireCase(t, c, v, i == 0)
				if t.Failed() {
					t.Fatalf("iteration %d, value %+v", i, v)
				}
			}
		})
	}
}

func checkWireCase(t *testing.T, c wireCase, v any, allSet bool) {
	t.Helper()
	hand, err := Encode(v)
	if err != nil {
		t.Fatal(err)
	}
	refl, err := msgpack.Marshal(c.twin(v))
	if err != nil {
		t.Fatal(err)
	}
	var got [4]any // by encoder x decoder: RR, RH, HR, HH
	for i, data := range [][]byte{refl, hand} {
		r := c.hand()
		if err := decodeTwin(data, c.twin(r)); err != nil {
			t.Fatalf("reflection decoder on %s bytes: %v", []string{"reflection", "hand"}[i], err)
		}
		h := c.hand()
		if err := Decode(data, h); err != nil {
			t.Fatalf("hand decoder on %s bytes: %v", []string{"reflection", "hand"}[i], err)
		}
		got[2*i], got[2*i+1] = r, h
	}
	names := []string{"reflection -> reflection", "reflection -> hand", "hand -> reflection", "hand -> hand"}
	for i := 1; i < 4; i++ {
		if !reflect.DeepEqual(got[0], got[i]) {
			t.Errorf("%s differs from %s:\n got %+v\nwant %+v", names[i], names[0], got[i], got[0])
		}
	}
	if allSet && !reflect.DeepEqual(got[0], v) {
		t.Errorf("with every field set, a round trip changes the value:\n got %+v\nwant %+v", got[0], v)
	}
}

// The client envelopes: the hand codec against the reflection envelope of
// request.go's earlier msgpack path.
func TestWireEnvelopeCompatibleWithReflection(t *testing.T) {
	rng := rand.New(rand.NewPCG(10, 2))
	t.Run("request", func(t *testing.T) { checkEnvelopes[RequestHeader](t, rng) })
	t.Run("response", func(t *testing.T) { checkEnvelopes[ResponseHeader](t, rng) })
}

func checkEnvelopes[H envelopeHeader](t *testing.T, rng *rand.Rand) {
	for i := range 300 {
		f := wireFiller{rng: rng, zero: 0.25}
		switch i {
		case 0:
			f.zero = 0
		case 1:
			f.zero = 1
		}
		var e envelope[H, msgpack.RawMessage]
		f.fill(reflect.ValueOf(&e).Elem())
		hand := encodeWire(&wireEnvelope[H]{header: e.Header, payload: e.Payload}, 0)
		refl, err := msgpack.Marshal(&e)
		if err != nil {
			t.Fatal(err)
		}
		type result struct {
			H H
			P []byte
		}
		var got [4]result
		for j, data := range [][]byte{refl, hand} {
			var r envelope[H, msgpack.RawMessage]
			if err := decodeTwin(data, &r); err != nil {
				t.Fatalf("reflection decoder: %v", err)
			}
			var h wireEnvelope[H]
			if err := DecodeLimited(data, &h, PayloadLimits); err != nil {
				t.Fatalf("hand decoder: %v", err)
			}
			got[2*j], got[2*j+1] = result{r.Header, r.Payload}, result{h.header, h.payload}
		}
		for j := 1; j < 4; j++ {
			if !reflect.DeepEqual(got[0], got[j]) {
				t.Fatalf("iteration %d: decoder/encoder pair %d differs:\n got %+v\nwant %+v", i, j, got[j], got[0])
			}
		}
		if i == 0 && !reflect.DeepEqual(got[0], result{e.Header, e.Payload}) {
			t.Fatalf("with every field set, a round trip changes the envelope:\n got %+v\nwant %+v", got[0], e)
		}
	}
}

// A struct written with more than 15 fields widens its map header; the
// library reads it.
func TestWireMapWidens(t *testing.T) {
	w := wireWriter{}
	f := w.openMap()
	want := map[string]any{}
	for i := range 40 {
		k := fmt.Sprintf("k%d", i)
		f.int(k, int64(i)*1000-7)
		want[k] = int64(i)*1000 - 7
	}
	f.close()
	var got map[string]any
	if err := msgpack.Unmarshal(w.b, &got); err != nil {
		t.Fatal(err)
	}
	for k, v := range got {
		got[k] = reflect.ValueOf(v).Convert(reflect.TypeFor[int64]()).Interface()
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
}

// A hand-coded message inside a reflection-coded one (a dispatch in a
// PeerPortion) decodes under Decode and under the library's own Unmarshal.
func TestWireInsideReflection(t *testing.T) {
	for _, s := range envSamples() {
		p, ok := s.(*PeerPortion)
		if !ok {
			continue
		}
		b, err := Encode(p)
		if err != nil {
			t.Fatal(err)
		}
		var viaDecode, viaLib PeerPortion
		if err := Decode(b, &viaDecode); err != nil {
			t.Fatal(err)
		}
		if err := msgpack.Unmarshal(b, &viaLib); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(&viaDecode, p) || !reflect.DeepEqual(&viaLib, p) {
			t.Fatalf("peer portion:\n decode %+v\n   lib %+v\n  want %+v", viaDecode, viaLib, p)
		}
		return
	}
	t.Fatal("no PeerPortion sample")
}

// What the hand decoders refuse, as the pre-scan and the reflection decoder did.
func TestWireDecodeRefuses(t *testing.T) {
	enc := func(m map[string]any) []byte {
		b, err := msgpack.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	deep := bytes.Repeat([]byte{0x81, 0xa1, 'x'}, MaxDepth+1)
	deep = append(append([]byte{0x81, 0xa1, 'z'}, deep...), 0xc0)
	for _, c := range []struct {
		name string
		data []byte
	}{
		{"truncated", enc(map[string]any{"v": 1, "req": "r"})[:6]},
		{"map claims 2^32-1 entries", []byte{0xdf, 0xff, 0xff, 0xff, 0xff}},
		{"string claims 2^32-1 bytes", []byte{0x81, 0xa3, 'r', 'e', 'q', 0xdb, 0xff, 0xff, 0xff, 0xff}},
		{"labels claim 65535 entries", []byte{0x81, 0xa6, 'l', 'a', 'b', 'e', 'l', 's', 0xde, 0xff, 0xff, 0x00}},
		{"unknown key nests too deep", deep},
		{"v out of range", enc(map[string]any{"v": 300})},
		{"negative attempt", enc(map[string]any{"att": -1})},
		{"string where an integer goes", enc(map[string]any{"att": "1"})},
		{"array where a map goes", []byte{0x91, 0x01}},
		{"trailing byte", append(enc(map[string]any{"v": 1}), 0xc0)},
		{"byte 0xc1", []byte{0x81, 0xa1, 'q', 0xc1}},
	} {
		var m PortionDispatch
		err := Decode(c.data, &m)
		if !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: %v, want ErrMalformed", c.name, err)
		}
	}
	// The element cap holds for values the decoder skips too.
	many := append([]byte{0x81, 0xa1, 'x', 0xdd}, 0, 0, 0, 0)
	const n = 100
	many[len(many)-1] = n
	many = append(many, bytes.Repeat([]byte{0xc0}, n)...)
	var m AggDone
	if err := DecodeLimited(many, &m, Limits{MaxElements: n}); !errors.Is(err, ErrMalformed) {
		t.Errorf("%d skipped values under a cap of %d: %v", n, n, err)
	}
	if err := DecodeLimited(many, &m, Limits{MaxElements: n + 3}); err != nil {
		t.Errorf("%d skipped values under a cap of %d: %v", n, n+3, err)
	}
}

// getDataArgsWire is the reflection form GetDataArgs had before its hand
// codec: the reference its bytes are held to. It has GetDataArgs's fields
// (a test checks) plus the version, copied across by name.
type getDataArgsWire struct {
	V        int                 `msgpack:"v"`
	Table    string              `msgpack:"t"`
	StartTS  time.Time           `msgpack:"s,omitempty"`
	EndTS    time.Time           `msgpack:"e,omitempty"`
	Labels   map[string][]string `msgpack:"l,omitempty"`
	Filter   []Filter            `msgpack:"f,omitempty"`
	Columns  []string            `msgpack:"c,omitempty"`
	GroupBy  []string            `msgpack:"g,omitempty"`
	Agg      []AggSpec           `msgpack:"a,omitempty"`
	SortCols []string            `msgpack:"o,omitempty"`
	Limit    int                 `msgpack:"n,omitempty"`
	Where    *Where              `msgpack:"w,omitempty"`
}

// copyByName copies the fields of src into the fields of dst of the same
// name (converting a named map type to its underlying type and back).
func copyByName(dst, src reflect.Value) {
	for i := range src.NumField() {
		name := src.Type().Field(i).Name
		d := dst.FieldByName(name)
		if !d.IsValid() {
			continue
		}
		d.Set(src.Field(i).Convert(d.Type()))
	}
}

func TestGetDataArgsWireHasEveryField(t *testing.T) {
	w := reflect.TypeFor[getDataArgsWire]()
	a := reflect.TypeFor[GetDataArgs]()
	for i := range a.NumField() {
		if _, ok := w.FieldByName(a.Field(i).Name); !ok {
			t.Errorf("GetDataArgs.%s is not in getDataArgsWire: add it there and to the hand codec (getdata_wire.go)", a.Field(i).Name)
		}
	}
	if w.NumField() != a.NumField()+1 {
		t.Errorf("getDataArgsWire has %d fields, GetDataArgs %d plus the version", w.NumField(), a.NumField())
	}
}

// encodeGetDataArgsRefl and decodeGetDataArgsRefl are the reflection codec
// of GetDataArgs before its hand codec.
func encodeGetDataArgsRefl(a GetDataArgs) ([]byte, error) {
	w := getDataArgsWire{V: GetDataArgsVersion}
	copyByName(reflect.ValueOf(&w).Elem(), reflect.ValueOf(a))
	return msgpack.Marshal(&w)
}

func decodeGetDataArgsRefl(b []byte) (GetDataArgs, error) {
	var w getDataArgsWire
	if err := DecodeLimited(b, &w, MessageLimits); err != nil {
		return GetDataArgs{}, err
	}
	if w.V != GetDataArgsVersion {
		return GetDataArgs{}, fmt.Errorf("%w: v%d", ErrVersion, w.V)
	}
	utc := func(t time.Time) time.Time {
		if t.IsZero() {
			return time.Time{}
		}
		return t.UTC()
	}
	w.StartTS, w.EndTS = utc(w.StartTS), utc(w.EndTS)
	var a GetDataArgs
	copyByName(reflect.ValueOf(&a).Elem(), reflect.ValueOf(w))
	return a, nil
}

// randomTime covers the 4-, 8- and 12-byte timestamp forms.
func randomTime(rng *rand.Rand) time.Time {
	switch rng.IntN(3) {
	case 0:
		return time.Unix(rng.Int64N(1<<32), 0).UTC()
	case 1:
		return time.Unix(rng.Int64N(1<<34), rng.Int64N(1e9)).UTC()
	}
	return time.Unix(-rng.Int64N(1<<40), rng.Int64N(1e9)).UTC()
}

func randomFilterValue(rng *rand.Rand, f *wireFiller, list bool) any {
	switch rng.IntN(6) {
	case 0:
		return f.str()
	case 1:
		return int64(rng.Uint64()>>1) >> rng.IntN(63) * []int64{1, -1}[rng.IntN(2)]
	case 2:
		return rng.NormFloat64() * 1e6
	case 3:
		return rng.IntN(2) == 0
	case 4:
		return randomTime(rng)
	}
	if list {
		return f.str()
	}
	out := make([]any, 1+rng.IntN(4))
	for i := range out {
		out[i] = randomFilterValue(rng, f, true)
	}
	return out
}

func TestGetDataArgsWireCompatibleWithReflection(t *testing.T) {
	rng := rand.New(rand.NewPCG(10, 3))
	for i := range 300 {
		f := wireFiller{rng: rng, zero: 0.25}
		switch i {
		case 0:
			f.zero = 0
		case 1:
			f.zero = 1
		}
		var a GetDataArgs
		v := reflect.ValueOf(&a).Elem()
		for j := range v.NumField() {
			field := v.Field(j)
			if f.rng.Float64() < f.zero {
				continue
			}
			switch field.Interface().(type) {
			case time.Time:
				field.Set(reflect.ValueOf(randomTime(rng)))
			case []Filter:
				fs := make([]Filter, 1+rng.IntN(5))
				for k := range fs {
					fs[k] = Filter{Op: FilterOp(f.str()), Column: f.str(), Value: randomFilterValue(rng, &f, false)}
				}
				field.Set(reflect.ValueOf(fs))
			case *Where:
				ff := Filter{Op: FilterGt, Column: f.str(), Value: randomFilterValue(rng, &f, false)}
				field.Set(reflect.ValueOf(&Where{V: WhereVersion, Root: Cond{Op: CondOr, Args: []Cond{
					{Op: CondFilter, Filter: &ff}, {Op: CondNot, Args: []Cond{{Op: CondFilter, Filter: &ff}}}}}}))
			default:
				f.fill(field)
			}
		}
		hand, err := Encode(a)
		if err != nil {
			t.Fatal(err)
		}
		refl, err := encodeGetDataArgsRefl(a)
		if err != nil {
			t.Fatal(err)
		}
		var got [4]GetDataArgs
		for j, data := range [][]byte{refl, hand} {
			if got[2*j], err = decodeGetDataArgsRefl(data); err != nil {
				t.Fatalf("iteration %d: reflection decoder: %v", i, err)
			}
			if got[2*j+1], err = DecodeGetDataArgsMsgpack(data); err != nil {
				t.Fatalf("iteration %d: hand decoder: %v", i, err)
			}
		}
		for j := 1; j < 4; j++ {
			if !reflect.DeepEqual(got[0], got[j]) {
				t.Fatalf("iteration %d: encoder/decoder pair %d differs:\n got %+v\nwant %+v", i, j, got[j], got[0])
			}
		}
		if i == 0 && !reflect.DeepEqual(got[0], a) {
			t.Fatalf("with every field set, a round trip changes the arguments:\n got %+v\nwant %+v", got[0], a)
		}
	}
}

// WithEncoded hands fn what Encode returns, for hand-coded and reflected
// types and payloads above the pooled buffers alike, and passes fn's error on.
func TestWithEncoded(t *testing.T) {
	for _, v := range []any{
		&PortionCompletion{V: PortionVersion, RequestID: "r1", PortionID: 7, DAPID: "d1", Outcome: OutcomeOK},
		&PartialResult{V: PortionVersion, RequestID: "r1", PortionID: 7, DAPID: "d1", Payload: bytes.Repeat([]byte("x"), 2*maxPooledBuffer)},
		&PositionReport{V: JobVersion, RCID: "rc-1", ClientRequestID: "c1"},
	} {
		want, err := Encode(v)
		if err != nil {
			t.Fatal(err)
		}
		var got []byte
		if err := WithEncoded(v, func(data []byte) error { got = bytes.Clone(data); return nil }); err != nil || !bytes.Equal(got, want) {
			t.Errorf("%T: %d bytes, %v; Encode gives %d", v, len(got), err, len(want))
		}
	}
	stop := errors.New("stop")
	if err := WithEncoded(&PortionCompletion{RequestID: "r1"}, func([]byte) error { return stop }); err != stop {
		t.Errorf("fn's error: %v", err)
	}
}

// TestAppendPartialResultMatchesEncode: a partial result written with its
// payload in place is Encode's bytes, appended after what b held.
func TestAppendPartialResultMatchesEncode(t *testing.T) {
	payload, err := Encode(map[string]int{"rows": 3})
	if err != nil {
		t.Fatal(err)
	}
	for _, more := range []bool{false, true} {
		pr := PartialResult{V: PortionVersion, RequestID: "r1", PortionID: 1, Attempt: 2, DAPID: "dap-1", Status: StatusOK, Window: 4, More: more}
		got, size, err := AppendPartialResult([]byte("head"), &pr, func(enc *msgpack.Encoder) error { return enc.Encode(map[string]int{"rows": 3}) })
		if err != nil {
			t.Fatal(err)
		}
		pr.Payload = payload
		want, err := Encode(&pr)
		if err != nil {
			t.Fatal(err)
		}
		if string(got[:4]) != "head" || !bytes.Equal(got[4:], want) || size != len(payload) {
			t.Fatalf("more %v: %x (payload %d bytes), want %x (%d)", more, got, size, want, len(payload))
		}
	}
	pr := PartialResult{Payload: payload}
	if _, _, err := AppendPartialResult(nil, &pr, func(*msgpack.Encoder) error { return nil }); err == nil {
		t.Fatal("a payload given and written both: accepted")
	}
}
