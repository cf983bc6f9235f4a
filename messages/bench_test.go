package messages

import (
	"bytes"
	"fmt"
	"reflect"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/sg-project/sg/services/cputime"
)

// BenchmarkHop encodes and decodes each message of a small request's path, one
// hop per sub-benchmark: GW -> RC (RCSubmission), RC -> DAP (PortionDispatch),
// RC -> Agg (AggExpectation), DAP -> Agg (PartialResult), DAP -> RC
// (PortionCompletion), Agg -> GW -> client (the response envelope).
//
//	go test ./messages -run '^$' -bench Hop -benchmem
func BenchmarkHop(b *testing.B) {
	tbl := NewTable([]ColumnSpec{{Name: "time", Type: TypeTimestamp}, {Name: "sym", Type: TypeSymbol}, {Name: "px", Type: TypeFloat}})
	if err := tbl.AppendRow(int64(1), "A.eu", 1.5); err != nil {
		b.Fatal(err)
	}
	payload, err := Encode(&tbl)
	if err != nil {
		b.Fatal(err)
	}
	for _, v := range []any{
		&RCSubmission{V: 1, RequestID: "req", GWID: "gw-1", Header: RequestHeader{V: 1, API: "getData"}, Args: envArgs(),
			ReplyTo: "sg.gw.gw-1.answer.req", Content: ContentMsgpack, Deadline: envDeadline, ReceivedAt: 1},
		&PortionDispatch{V: 1, RequestID: "req", PortionID: 1, Attempt: 1, RCID: "rc-1", API: "getData", Args: envArgs(),
			Labels: LabelSet{"region": "eu"}, Range: Unbounded, PurviewVersion: 3, ReferenceVintage: 19, AggID: "agg-1", Deadline: envDeadline},
		&AggExpectation{V: 1, RequestID: "req", Seq: 1, API: "getData", Args: envArgs(), Expect: []PortionRef{{1, 1}},
			Sealed: true, ReplyTo: "sg.gw.gw-1.answer.req", Content: ContentMsgpack, Deadline: envDeadline},
		&PartialResult{V: 1, RequestID: "req", PortionID: 1, Attempt: 1, DAPID: "d", Status: StatusOK, Payload: payload},
		&PortionCompletion{V: 1, RequestID: "req", PortionID: 1, Attempt: 1, DAPID: "d", Outcome: OutcomeOK, Code: CodeOK,
			PurviewVersion: 4, ReferenceVintage: 19},
	} {
		typ := reflect.TypeOf(v).Elem()
		b.Run(typ.Name(), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				data, err := Encode(v)
				if err != nil {
					b.Fatal(err)
				}
				out := reflect.New(typ).Interface()
				if err := Decode(data, out); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	b.Run("AggDone", func(b *testing.B) {
		b.ReportAllocs()
		v := &AggDone{V: AggDoneVersion, AggID: "agg-1", Done: []AggDoneEntry{{RequestID: "req", Status: StatusOK}}}
		for b.Loop() {
			data, err := Encode(v)
			if err != nil {
				b.Fatal(err)
			}
			var out AggDone
			if err := Decode(data, &out); err != nil {
				b.Fatal(err)
			}
		}
	})
	// The arguments of a small getData, as the GW encodes them and each
	// service decodes them.
	b.Run("GetDataArgs", func(b *testing.B) {
		b.ReportAllocs()
		a := GetDataArgs{Table: "trade", Limit: 1, StartTS: time.Unix(1_700_000_000, 0).UTC(),
			EndTS: time.Unix(1_700_000_060, 0).UTC(), Labels: LabelSelector{"region": {"eu"}}}
		for b.Loop() {
			data, err := Encode(a)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := DecodeGetDataArgsMsgpack(data); err != nil {
				b.Fatal(err)
			}
		}
	})
	// A JSON caller's: each service decodes the caller's JSON (Args.GetData),
	// where the GW used to encode them once to msgpack for the rest.
	b.Run("GetDataArgsJSON", func(b *testing.B) {
		b.ReportAllocs()
		data := []byte(`{"table":"trade","limit":1,"startTS":"2023-11-14T22:13:20Z","endTS":"2023-11-14T22:14:20Z","labels":{"region":["eu"]}}`)
		for b.Loop() {
			if _, err := JSONArgs(data).GetData(); err != nil {
				b.Fatal(err)
			}
		}
	})
	// The hops that carry a JSON caller's arguments (argsj).
	for _, v := range argsJSONSamples()[:3] {
		typ := reflect.TypeOf(v).Elem()
		b.Run(typ.Name()+"JSON", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				data, err := Encode(v)
				if err != nil {
					b.Fatal(err)
				}
				out := reflect.New(typ).Interface()
				if err := Decode(data, out); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	b.Run("Request", func(b *testing.B) {
		b.ReportAllocs()
		r := Request{Header: RequestHeader{V: RequestVersion, API: "getData", Opts: Opts{TimeoutMS: 5000}},
			Payload: envArgs(), Content: ContentMsgpack}
		h := map[string][]string{HdrContentType: {string(ContentMsgpack)}}
		for b.Loop() {
			data, err := r.Encode()
			if err != nil {
				b.Fatal(err)
			}
			if _, err := DecodeRequest(h, data); err != nil {
				b.Fatal(fmt.Errorf("decode: %w", err))
			}
		}
	})
	b.Run("Response", func(b *testing.B) {
		b.ReportAllocs()
		r := Response{Header: ResponseHeader{V: RequestVersion, RequestID: "req", API: "getData", Status: StatusOK},
			Payload: payload, Content: ContentMsgpack}
		for b.Loop() {
			data, err := r.Encode()
			if err != nil {
				b.Fatal(err)
			}
			h := map[string][]string{HdrContentType: {string(ContentMsgpack)}}
			if _, err := DecodeResponse(h, data); err != nil {
				b.Fatal(fmt.Errorf("decode: %w", err))
			}
		}
	})
}

// tradeTable is a large table shaped like the demo's trade table: four
// symbol columns (few distinct values, as a DAP's store or a decoded column
// holds them: one string per distinct value), time, price, size, block.
func tradeTable(rows int) Table {
	t := NewTable([]ColumnSpec{{Name: "time", Type: TypeTimestamp}, {Name: "sym", Type: TypeSymbol},
		{Name: "region", Type: TypeSymbol}, {Name: "price", Type: TypeFloat}, {Name: "size", Type: TypeInt},
		{Name: "side", Type: TypeSymbol}, {Name: "venue", Type: TypeSymbol}, {Name: "block", Type: TypeBool}})
	syms := make([]string, 40)
	for i := range syms {
		syms[i] = fmt.Sprintf("SYM%d.eu", i)
	}
	regions, sides, venues := []string{"eu", "us", "ap"}, []string{"buy", "sell"}, []string{"XLON", "XPAR", "XETR", "BATS"}
	for k := range t.Columns {
		t.Columns[k].Grow(rows)
	}
	for i := range rows {
		_ = t.AppendRow(int64(1_700_000_000_000_000_000+i*1_000_003), syms[(i*7)%len(syms)], regions[i%3],
			100+float64(i%977)/8, int64(100*(1+i%50)), sides[(i/3)%2], venues[(i*5)%4], i%97 == 0)
	}
	return t
}

// BenchmarkTable: the columnar msgpack form of a large table (what every
// large answer is), encoded and decoded; MB/s of encoded bytes.
//
//	go test ./messages -run '^$' -bench Table -benchmem
func BenchmarkTable(b *testing.B) {
	t := tradeTable(100_000)
	data, err := Encode(&t)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("Encode", func(b *testing.B) {
		benchEncodeSized(b, t, len(data))
	})
	b.Run("JSON", func(b *testing.B) {
		js, err := t.MarshalJSON()
		if err != nil {
			b.Fatal(err)
		}
		b.SetBytes(int64(len(js)))
		b.ReportAllocs()
		for b.Loop() {
			if _, err := t.MarshalJSON(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("EncodeTableJSON", func(b *testing.B) { // rows on every core (the Agg's whole JSON answer)
		js, err := EncodeTableJSON(t, runtime.GOMAXPROCS(0))
		if err != nil {
			b.Fatal(err)
		}
		b.SetBytes(int64(len(js)))
		b.ReportAllocs()
		for b.Loop() {
			if _, err := EncodeTableJSON(t, runtime.GOMAXPROCS(0)); err != nil {
				b.Fatal(err)
			}
		}
	})
	// The Agg's answer: symbol columns coded (DecodeCoded, the merge).
	var coded Table
	if err := DecodeCoded(data, &coded, PayloadLimits); err != nil {
		b.Fatal(err)
	}
	b.Run("EncodeCoded", func(b *testing.B) {
		benchEncodeSized(b, coded, len(data))
	})
	// The Agg's answer of several parts: its symbol columns' codes
	// first-seen (the merge's gather; an encoded table's are), written as
	// they are (Column.FirstSeen).
	firstSeen := Table{Columns: slices.Clone(coded.Columns)}
	for k := range firstSeen.Columns {
		firstSeen.Columns[k].FirstSeen = firstSeen.Columns[k].Coded()
	}
	b.Run("EncodeFirstSeen", func(b *testing.B) {
		if again, err := EncodeSized(firstSeen, len(data)); err != nil || !bytes.Equal(again, data) {
			b.Fatalf("first-seen codes encode differently (%v)", err)
		}
		// The claim holds, so the fast path is what is measured, not a
		// fallback to recode after it.
		for k, c := range firstSeen.Columns {
			if !c.FirstSeen {
				continue
			}
			s := recodeScratches.Get().(*recodeScratch)
			_, _, ok := writeFirstSeen(c.Dict, c.Codes, s)
			s.put()
			if !ok {
				b.Fatalf("column %d claims first-seen codes that are not", k)
			}
		}
		benchEncodeSized(b, firstSeen, len(data))
	})
	b.Run("JSONCoded", func(b *testing.B) {
		js, err := coded.MarshalJSON()
		if err != nil {
			b.Fatal(err)
		}
		b.SetBytes(int64(len(js)))
		b.ReportAllocs()
		for b.Loop() {
			if _, err := coded.MarshalJSON(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("DecodeCoded", func(b *testing.B) {
		b.SetBytes(int64(len(data)))
		b.ReportAllocs()
		for b.Loop() {
			var out Table
			if err := DecodeCoded(data, &out, PayloadLimits); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("Decode", func(b *testing.B) {
		b.SetBytes(int64(len(data)))
		b.ReportAllocs()
		for b.Loop() {
			var out Table
			if err := Decode(data, &out); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// reportCPU reports the process's CPU time (all threads) per op since cpu0:
// what other work on the machine blurs less than elapsed time.
// benchEncodeSized measures EncodeSized of t, size bytes encoded: MB/s,
// allocations and CPU per op.
func benchEncodeSized(b *testing.B, t Table, size int) {
	b.SetBytes(int64(size))
	b.ReportAllocs()
	cpu0, _ := cputime.Process()
	for b.Loop() {
		if _, err := EncodeSized(t, size); err != nil {
			b.Fatal(err)
		}
	}
	reportCPU(b, cpu0)
}

func reportCPU(b *testing.B, cpu0 time.Duration) {
	if cpu1, ok := cputime.Process(); ok && cpu1 > cpu0 {
		b.ReportMetric(float64((cpu1-cpu0).Nanoseconds())/float64(b.N), "cpu-ns/op")
	}
}

// BenchmarkGWArgsJSON is the GW's work on a JSON caller's getData arguments
// and their scope: one parse (DecodeGetDataArgsJSONScope, then ScopeFromJSON
// on the raw scope) against the two it made before (ScopeFromArgs, then
// DecodeGetDataArgsJSON).
//
//	go test ./messages -run '^$' -bench GWArgsJSON -benchmem
func BenchmarkGWArgsJSON(b *testing.B) {
	args := []byte(`{"table":"trade","startTS":"2026-11-24T12:00:00Z","endTS":"2026-11-24T12:01:00Z",` +
		`"labels":{"region":"eu"},"limit":1,"scope":{"assembly":"eu"}}`)
	b.Run("one parse", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			a, raw, err := DecodeGetDataArgsJSONScope(args)
			s, ok, serr := ScopeFromJSON(raw)
			if err != nil || serr != nil || !ok || s.Assembly != "eu" || a.Table != "trade" {
				b.Fatal(a, s, err, serr)
			}
		}
	})
	b.Run("two parses", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			s, ok, serr := ScopeFromArgs(ContentJSON, args)
			a, err := DecodeGetDataArgsJSON(args)
			if err != nil || serr != nil || !ok || s.Assembly != "eu" || a.Table != "trade" {
				b.Fatal(a, s, err, serr)
			}
		}
	})
}

// BenchmarkGWArgsMsgpack is the GW's work on a msgpack caller's getData
// arguments and their scope: one walk (DecodeGetDataArgsMsgpackScope, then
// ScopeFromMsgpack on the raw scope) against the two it made before
// (DecodeGetDataArgsMsgpack, then ScopeFromArgs).
//
//	go test ./messages -run '^$' -bench GWArgsMsgpack -benchmem
func BenchmarkGWArgsMsgpack(b *testing.B) {
	args, err := msgpack.Marshal(map[string]any{"v": GetDataArgsVersion, "t": "trade",
		"s": time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC), "e": time.Date(2026, 11, 24, 12, 1, 0, 0, time.UTC),
		"l": map[string][]string{"region": {"eu"}}, "n": 1, "scope": map[string]any{"assembly": "eu"}})
	if err != nil {
		b.Fatal(err)
	}
	b.Run("one walk", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			a, raw, err := DecodeGetDataArgsMsgpackScope(args)
			s, ok, serr := ScopeFromMsgpack(raw)
			if err != nil || serr != nil || !ok || s.Assembly != "eu" || a.Table != "trade" {
				b.Fatal(a, s, err, serr)
			}
		}
	})
	b.Run("two walks", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			a, err := DecodeGetDataArgsMsgpack(args)
			s, ok, serr := ScopeFromArgs(ContentMsgpack, args)
			if err != nil || serr != nil || !ok || s.Assembly != "eu" || a.Table != "trade" {
				b.Fatal(a, s, err, serr)
			}
		}
	})
}
