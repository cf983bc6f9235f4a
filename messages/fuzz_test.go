package messages

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/vmihailenco/msgpack/v5"
)

// Decoding bytes from the network must never panic, and never allocate more
// than allocBound(len(input)) (limits.go), whatever lengths the bytes claim.
// Run one target with e.g.
//
//	GOMEMLIMIT=1GiB go test -run '^$' -fuzz '^FuzzDecodeInternal$' -fuzztime 15s ./messages/
//
// .ci/run runs each for a few seconds. Inputs that once failed are kept in
// testdata/fuzz/<target>/ and run by every plain go test.

// fuzzSamples is one valid value of every internal message type.
func fuzzSamples() []any {
	tb := NewTable([]ColumnSpec{{Name: "time", Type: TypeTimestamp}, {Name: "sym", Type: TypeSymbol}, {Name: "s", Type: TypeString}})
	_ = tb.AppendRow(time.Unix(1, 0), "a", "x")
	ss := append(envSamples(), &LiveUpdate{V: LiveVersion, Table: "t", Rows: tb}, &PingArgs{Labels: LabelSelector{"region": {"eu"}}})
	ss = append(ss, argsJSONSamples()...) // a kept corpus entry whose selector is below what follows picks what it did
	return append(ss, &Refusal{V: RefusalVersion, RequestID: "req", Service: "dap", ServiceID: "d", PortionID: 7, Attempt: 1,
		Code: CodeBadRequest, Reason: "malformed portion dispatch"})
}

// hostileMsgpack are seeds every msgpack target starts from: huge length
// fields, deep nesting, truncation.
var hostileMsgpack = [][]byte{
	hugeTables,
	{0xdf, 0xff, 0xff, 0xff, 0xff},
	{0xdb, 0xff, 0xff, 0xff, 0xff},
	{0xc6, 0xff, 0xff, 0xff, 0xff},
	{0xc9, 0xff, 0xff, 0xff, 0xff, 0x01},
	{0x81, 0xa1, 'v', 0xdc, 0xff, 0xff},
	append([]byte{0x81, 0xa4, 'r', 'o', 'w', 's'}, append([]byte{0x92, 0x01, 0xdd, 0xff, 0xff, 0xff, 0xff}, 0x94)...),
	bytes.Repeat([]byte{0x91}, 40),
}

// FuzzDecodeInternal feeds every internal message decoder (DecodeValid of
// each type, chosen by the first byte) with arbitrary bytes.
func FuzzDecodeInternal(f *testing.F) {
	ss := fuzzSamples()
	for i, s := range ss {
		b, err := Encode(s)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(byte(i), b)
		f.Add(byte(i), b[:len(b)/2])
	}
	for i, b := range hostileMsgpack {
		f.Add(byte(i), b)
	}
	f.Fuzz(func(t *testing.T, sel byte, data []byte) {
		s := ss[int(sel)%len(ss)]
		var (
			v   any
			err error
		)
		checkAlloc(t, "internal message", data, func() { v, err = envDecodeAs(s, data) })
		if err != nil {
			if !errors.Is(err, ErrMalformed) && !errors.Is(err, ErrInvalid) && !errors.Is(err, ErrVersion) {
				t.Fatalf("%T: error %v is neither ErrMalformed, ErrInvalid nor ErrVersion", s, err)
			}
			return
		}
		// Whatever decodes and validates must encode again.
		if _, err := Encode(v); err != nil {
			t.Fatalf("%T decoded but does not encode: %v", v, err)
		}
	})
}

// wireFuzzCase is one hand decoder for FuzzWireDecode and the reflection
// decoder it replaced: decode returns what each makes of the bytes.
type wireFuzzCase struct {
	name   string
	sample any // a valid value, for the seed corpus
	hand   func([]byte) (any, error)
	refl   func([]byte) (any, error)
	encode func(any) ([]byte, error) // the hand encoder
}

func wireFuzzCases() []wireFuzzCase {
	var cs []wireFuzzCase
	samples := map[reflect.Type]any{}
	for _, s := range envSamples() {
		samples[reflect.TypeOf(s)] = s
	}
	for _, c := range wireCases {
		c := c
		typ := reflect.TypeOf(c.hand())
		cs = append(cs, wireFuzzCase{name: typ.Elem().Name(), sample: samples[typ],
			hand:   func(b []byte) (any, error) { v := c.hand(); return v, Decode(b, v) },
			refl:   func(b []byte) (any, error) { v := c.hand(); return v, decodeTwin(b, c.twin(v)) },
			encode: func(v any) ([]byte, error) { return Encode(v) }})
	}
	cs = append(cs, wireFuzzCase{name: "GetDataArgs", sample: sampleArgs(),
		hand:   func(b []byte) (any, error) { return DecodeGetDataArgsMsgpack(b) },
		refl:   func(b []byte) (any, error) { return decodeGetDataArgsRefl(b) },
		encode: func(v any) ([]byte, error) { return Encode(v) }})
	type req = envelope[RequestHeader, msgpack.RawMessage]
	type resp = envelope[ResponseHeader, msgpack.RawMessage]
	cs = append(cs, wireFuzzCase{name: "request", sample: &req{Header: RequestHeader{V: 1, API: "getData", Opts: Opts{TimeoutMS: 5}}, Payload: envArgs()},
		hand: func(b []byte) (any, error) {
			var e wireEnvelope[RequestHeader]
			err := DecodeLimited(b, &e, MessageLimits)
			return &req{Header: e.header, Payload: e.payload}, err
		},
		refl: func(b []byte) (any, error) { var e req; return &e, DecodeLimited(b, &e, MessageLimits) },
		encode: func(v any) ([]byte, error) {
			e := v.(*req)
			return encodeWire(&wireEnvelope[RequestHeader]{header: e.Header, payload: e.Payload}, 0), nil
		}})
	cs = append(cs, wireFuzzCase{name: "response", sample: &resp{Header: ResponseHeader{V: 1, RequestID: "r", Status: Errorf(CodeTimeout, CodeErr, "x")}, Payload: envArgs()},
		hand: func(b []byte) (any, error) {
			var e wireEnvelope[ResponseHeader]
			err := DecodeLimited(b, &e, PayloadLimits)
			return &resp{Header: e.header, Payload: e.payload}, err
		},
		refl: func(b []byte) (any, error) { var e resp; return &e, DecodeLimited(b, &e, PayloadLimits) },
		encode: func(v any) ([]byte, error) {
			e := v.(*resp)
			return encodeWire(&wireEnvelope[ResponseHeader]{header: e.Header, payload: e.Payload}, 0), nil
		}})
	return cs
}

// hasNaN reports whether a value holds a NaN filter value, which no
// DeepEqual matches.
func hasNaN(v any) bool {
	a, ok := v.(GetDataArgs)
	if !ok {
		return false
	}
	for _, f := range a.Filter {
		vals, _ := f.Value.([]any)
		for _, x := range append(vals, f.Value) {
			if g, ok := x.(float64); ok && g != g {
				return true
			}
		}
	}
	return false
}

// FuzzWireDecode holds each hand decoder (wire.go) to its bounds and to the
// reflection decoder it replaced: within allocBound whatever the bytes
// claim, only ErrMalformed, the same value wherever both accept the bytes,
// and what it accepts encodes and decodes again to the same value.
func FuzzWireDecode(f *testing.F) {
	cs := wireFuzzCases()
	for i, c := range cs {
		b, err := c.encode(c.sample)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(byte(i), b)
		f.Add(byte(i), b[:len(b)/2])
	}
	for i, b := range hostileMsgpack {
		f.Add(byte(i), b)
	}
	// The messages with JSON arguments (argsj), for their decoders' cases.
	for _, s := range argsJSONSamples() {
		for i, c := range cs {
			if reflect.TypeOf(c.sample) == reflect.TypeOf(s) {
				b, err := c.encode(s)
				if err != nil {
					f.Fatal(err)
				}
				f.Add(byte(i), b)
				f.Add(byte(i), b[:len(b)-3])
			}
		}
	}
	f.Fuzz(func(t *testing.T, sel byte, data []byte) {
		c := cs[int(sel)%len(cs)]
		var (
			got any
			err error
		)
		checkAlloc(t, c.name, data, func() { got, err = c.hand(data) })
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("%s: error %v is not ErrMalformed", c.name, err)
			}
			return
		}
		if ref, err := c.refl(data); err == nil && !hasNaN(got) && !reflect.DeepEqual(got, ref) {
			t.Fatalf("%s: the hand and reflection decoders differ on % x:\n hand %+v\n refl %+v", c.name, data, got, ref)
		}
		b, err := c.encode(got)
		if err != nil {
			t.Fatalf("%s decoded but does not encode: %v", c.name, err)
		}
		again, err := c.hand(b)
		if err != nil {
			t.Fatalf("%s: re-decode of its own encoding: %v", c.name, err)
		}
		if !hasNaN(got) && !reflect.DeepEqual(got, again) {
			t.Fatalf("%s: round trip changes the value:\n got %+v\nwant %+v", c.name, again, got)
		}
	})
}

// FuzzCheckMsgpack holds the pre-scan to the library: what the library
// decodes whole (into any) the scan accepts, unless it nests deeper than
// the limit; what the scan accepts decodes within allocBound.
func FuzzCheckMsgpack(f *testing.F) {
	for _, s := range fuzzSamples() {
		b, _ := Encode(s)
		f.Add(b)
	}
	for _, b := range hostileMsgpack {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		lim := Limits{MaxDepth: maxScanDepth}
		scanErr := CheckMsgpack(data, lim)
		if scanErr != nil && !errors.Is(scanErr, ErrMalformed) {
			t.Fatalf("scan error %v is not ErrMalformed", scanErr)
		}
		if scanErr != nil {
			if strings.Contains(scanErr.Error(), "nested deeper") {
				return
			}
			var v any
			dec := msgpack.NewDecoder(bytesReader(data))
			// Only safe to try when no length is large: the library would allocate it.
			if len(data) < 64 && !hasHugeLength(data) {
				if err := dec.Decode(&v); err == nil && dec.Buffered().(interface{ Len() int }).Len() == 0 {
					t.Fatalf("the library decodes % x whole, the scan refuses it: %v", data, scanErr)
				}
			}
			return
		}
		var v any
		checkAlloc(t, "any", data, func() { _ = DecodeLimited(data, &v, lim) })
	})
}

// FuzzCheckJSON holds the JSON pre-scan to encoding/json: valid JSON passes
// unless it nests too deep or has too many values; what the scan calls
// unbalanced is invalid.
func FuzzCheckJSON(f *testing.F) {
	f.Add([]byte(`{"header":{"api":"getMeta"},"payload":{"a":[1,"]",{"b":null}]}}`))
	f.Add([]byte(strings.Repeat("[", 40) + strings.Repeat("]", 40)))
	f.Add([]byte(`"\"[`))
	f.Add([]byte(`[}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		err := CheckJSON(data, MessageLimits)
		switch {
		case err == nil:
			var v any
			checkAlloc(t, "JSON any", data, func() { _ = json.Unmarshal(data, &v) })
		case !errors.Is(err, ErrMalformed):
			t.Fatalf("scan error %v is not ErrMalformed", err)
		case json.Valid(data) && !strings.Contains(err.Error(), "nested deeper") && !strings.Contains(err.Error(), "more than"):
			t.Fatalf("valid JSON %q refused: %v", data, err)
		}
	})
}

// FuzzDecodePingArgs covers both encodings of the ping arguments.
func FuzzDecodePingArgs(f *testing.F) {
	mp, _ := Encode(&PingArgs{Labels: LabelSelector{"region": {"eu"}}})
	f.Add(false, mp)
	f.Add(true, []byte(`{"labels":{"region":["eu","us"],"desk":"fx"}}`))
	for _, b := range hostileMsgpack {
		f.Add(false, b)
	}
	f.Fuzz(func(t *testing.T, isJSON bool, data []byte) {
		if isJSON {
			checkAlloc(t, "ping JSON", data, func() { _, _ = DecodePingArgsJSON(data) })
		} else {
			checkAlloc(t, "ping msgpack", data, func() { _, _ = DecodePingArgsMsgpack(data) })
		}
	})
}

// FuzzDecodeTableJSON covers the JSON rows of a table (FuzzDecodeTableMsgpack
// the columnar msgpack form).
func FuzzDecodeTableJSON(f *testing.F) {
	tb := NewTable([]ColumnSpec{{Name: "time", Type: TypeTimestamp}, {Name: "sym", Type: TypeSymbol},
		{Name: "px", Type: TypeFloat}, {Name: "n", Type: TypeInt}, {Name: "ok", Type: TypeBool}, {Name: "s", Type: TypeString}})
	_ = tb.AppendRow(time.Unix(1, 0), "a", 1.5, int64(2), true, "x")
	_ = tb.AppendRow(time.Unix(2, 0), "b", 2.5, int64(-3), false, "y")
	js, _ := json.Marshal(tb)
	f.Add(js)
	f.Add([]byte(`[{"a":[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]}]`))
	f.Fuzz(func(t *testing.T, data []byte) {
		var (
			out Table
			err error
		)
		checkAlloc(t, "table JSON", data, func() { out, err = DecodeTableJSON(data, nil) })
		if err == nil {
			if err := out.Validate(); err != nil {
				t.Fatalf("decoded table is invalid: %v", err)
			}
		}
	})
}

// FuzzDecodeRequest covers content detection and both envelope encodings.
func FuzzDecodeRequest(f *testing.F) {
	f.Add("", []byte(`{"header":{"api":"getData","opts":{"timeout":5},"scope":{"assembly":"eu","tier":"rdb"}},"payload":{"table":"t"}}`))
	f.Add("json", []byte(`{"header":{"api":"ping"}}`))
	mp, _ := Request{Header: RequestHeader{V: 1, API: "sql"}, Payload: envArgs(), Content: ContentMsgpack}.Encode()
	f.Add("", mp)
	f.Add("msgpack", mp)
	f.Add("xml", []byte("<a/>"))
	f.Fuzz(func(t *testing.T, ct string, data []byte) {
		h := nats.Header{}
		if ct != "" {
			h.Set(HdrContentType, ct)
		}
		var (
			r   Request
			err error
		)
		checkAlloc(t, "request", data, func() { r, err = DecodeRequest(h, data) })
		if err != nil {
			return
		}
		if _, err := r.Encode(); err != nil && r.Content == ContentMsgpack {
			t.Fatalf("decoded request does not encode: %v", err)
		}
	})
}

// FuzzDecodeResponse covers the response envelope.
func FuzzDecodeResponse(f *testing.F) {
	j, _ := newResponse("r", Request{Header: RequestHeader{API: "getData"}, Content: ContentJSON}, StatusOK, []byte(`[1]`)).Encode()
	m, _ := newResponse("r", Request{Header: RequestHeader{API: "getData"}}, Errorf(CodeTimeout, CodeErr, "x"), envArgs()).Encode()
	f.Add(j)
	f.Add(m)
	f.Fuzz(func(t *testing.T, data []byte) {
		checkAlloc(t, "response", data, func() { _, _ = DecodeResponse(nil, data) })
	})
}

// parseHeaderLines turns "k: v" lines into a header, so the fuzzer can
// shape headers freely.
func parseHeaderLines(s string) nats.Header {
	h := nats.Header{}
	for line := range strings.SplitSeq(s, "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok {
			h.Add(strings.TrimSpace(k), strings.TrimSpace(v))
		}
	}
	return h
}

// FuzzReadHeaders covers ReadRouting and ReadStatus.
func FuzzReadHeaders(f *testing.F) {
	f.Add("Sg-Request-Id: r1\nSg-Api: getData\nSg-Agg-Id: agg-1\nSg-Rc-Id: rc-1\nSg-Log-Corr: c\nSg-Attempt: 3\nSg-Rc: 45\nSg-Ac: ERR\nSg-Content-Type: json")
	f.Add("Sg-Attempt: 4294967296\nSg-Rc: -1")
	f.Add("Sg-Attempt: 18446744073709551616\nSg-Content-Type: xml\nSg-Ac: zz\nSg-Rc: TIMEOUT")
	f.Add("Sg-Portion-Id: 7\nSg-Attempt: 2")
	f.Add("Sg-Portion-Id: 007")
	f.Fuzz(func(t *testing.T, s string) {
		h := parseHeaderLines(s)
		r, err := ReadRouting(h)
		if err == nil {
			h2 := nats.Header{}
			r.Write(h2)
			if r2, err := ReadRouting(h2); err != nil || r2 != r {
				t.Fatalf("routing does not round trip: %+v -> %+v, %v", r, r2, err)
			}
		}
		if st, err := ReadStatus(h); err == nil {
			h2 := nats.Header{}
			st.Write(h2)
			if _, err := ReadStatus(h2); err != nil {
				t.Fatalf("status does not round trip: %+v: %v", st, err)
			}
		}
	})
}

// FuzzReassembler feeds arbitrary chunk headers and data, then checks that
// whatever completes has exactly the announced size.
func FuzzReassembler(f *testing.F) {
	payload := randomPayload(3000, 7)
	msgs, _ := SplitChunksBody("s", nil, Body{payload}, 1000)
	var seed strings.Builder
	for k, v := range msgs[0].Header {
		seed.WriteString(k + ": " + v[0] + "\n")
	}
	f.Add(seed.String(), msgs[0].Data, "Sg-Chunk-Index: 1\nSg-Chunk-Count: 2\nSg-Chunk-Total: 3", []byte("abc"))
	f.Add("Sg-Chunk-Index: 0\nSg-Chunk-Count: 2\nSg-Chunk-Total: 3", []byte("a"), "Sg-Chunk-Index: 1\nSg-Chunk-Count: 2\nSg-Chunk-Total: 3", []byte("bc"))
	f.Fuzz(func(t *testing.T, h1 string, d1 []byte, h2 string, d2 []byte) {
		r := NewReassembler(1 << 16)
		for _, c := range []struct {
			h string
			d []byte
		}{{h1, d1}, {h2, d2}, {h1, d1}} {
			var (
				done bool
				err  error
			)
			h := parseHeaderLines(c.h)
			checkAlloc(t, "chunk", c.d, func() { done, err = r.Add(h, c.d) })
			if err != nil {
				return
			}
			if done {
				p, err := r.Payload()
				if err != nil || int64(len(p)) != r.first.total {
					t.Fatalf("done with %d bytes, announced %d: %v", len(p), r.first.total, err)
				}
			}
		}
	})
}

func bytesReader(b []byte) *bytes.Reader { return bytes.NewReader(b) }

// hasHugeLength reports whether some byte could start a length field above
// 64 KiB (str/bin/ext/array/map 32): the library must not see it unscanned.
func hasHugeLength(b []byte) bool {
	for _, c := range b {
		switch c {
		case 0xc6, 0xc9, 0xdb, 0xdd, 0xdf, 0xc5, 0xc8, 0xda, 0xdc, 0xde:
			return true
		}
	}
	return false
}

// scopeFromArgsRefl is ScopeFromArgs's msgpack branch before the hand
// decoders: the reference FuzzScopeFromArgs holds it to.
func scopeFromArgsRefl(args []byte) (s Scope, ok bool, err error) {
	if len(args) == 0 {
		return s, false, nil
	}
	var w struct {
		Scope msgpack.RawMessage `msgpack:"scope"`
	}
	if DecodeLimited(args, &w, MessageLimits) != nil {
		return s, false, nil
	}
	if len(w.Scope) == 0 || w.Scope[0] == 0xc0 {
		return s, false, nil
	}
	if b := w.Scope[0]; !(b >= 0x80 && b <= 0x8f) && b != 0xde && b != 0xdf {
		return s, false, invalid("request arguments", "scope must be a map, got msgpack type 0x%02x", b)
	}
	if err := DecodeLimited(w.Scope, &s, MessageLimits); err != nil {
		return s, false, invalid("request arguments", "scope: %v", err)
	}
	return s, true, nil
}

// FuzzScopeFromArgs holds the msgpack scope lookup to the reflection one it
// replaced, and to allocBound.
func FuzzScopeFromArgs(f *testing.F) {
	for _, v := range []any{
		map[string]any{"table": "t", "scope": map[string]any{"assembly": "eu", "tier": "hdb", "x": []int{1}}},
		map[string]any{"scope": nil, "limit": 3},
		map[string]any{"scope": "eu"},
		map[string]any{"scope": map[string]any{"tier": 5}},
	} {
		b, _ := msgpack.Marshal(v)
		f.Add(b)
	}
	for _, b := range hostileMsgpack {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var (
			s   Scope
			ok  bool
			err error
		)
		checkAlloc(t, "scope", data, func() { s, ok, err = ScopeFromArgs(ContentMsgpack, data) })
		if err != nil && !errors.Is(err, ErrInvalid) {
			t.Fatalf("error %v is not ErrInvalid", err)
		}
		if len(data) > 0 && (data[0]&0xf0 == 0x90 || data[0] == 0xdc || data[0] == 0xdd) {
			return // the reflection decoder read an array as the struct's fields in order; sg never sends one
		}
		rs, rok, rerr := scopeFromArgsRefl(data)
		if s != rs || ok != rok || (err == nil) != (rerr == nil) {
			t.Fatalf("% x: hand (%+v, %v, %v), reflection (%+v, %v, %v)", data, s, ok, err, rs, rok, rerr)
		}
	})
}
