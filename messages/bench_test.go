package messages

import (
	"fmt"
	"reflect"
	"testing"
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
		&PortionDispatch{V: 1, RequestID: "req", PortionID: "p1", Attempt: 1, RCID: "rc-1", API: "getData", Args: envArgs(),
			Labels: LabelSet{"region": "eu"}, Range: Unbounded, PurviewVersion: 3, ReferenceVintage: 19, AggID: "agg-1", Deadline: envDeadline},
		&AggExpectation{V: 1, RequestID: "req", Seq: 1, API: "getData", Args: envArgs(), Expect: []PortionRef{{"p1", 1}},
			Sealed: true, ReplyTo: "sg.gw.gw-1.answer.req", Content: ContentMsgpack, Deadline: envDeadline},
		&PartialResult{V: 1, RequestID: "req", PortionID: "p1", Attempt: 1, DAPID: "d", Status: StatusOK, Payload: payload},
		&PortionCompletion{V: 1, RequestID: "req", PortionID: "p1", Attempt: 1, DAPID: "d", Outcome: OutcomeOK, Code: CodeOK,
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
