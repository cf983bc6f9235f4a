package messages

import (
	"testing"
)

// Setting the request id of an encoded answer gives the bytes of the answer
// encoded with that id, in both encodings, with and without a payload; what
// is not sg's layout is left to a full decode (ok false).
func TestResponseWithRequestIDMatchesEncode(t *testing.T) {
	tbl := tradeTable(300)
	for _, c := range []Content{ContentMsgpack, ContentJSON} {
		var payload []byte
		var err error
		if c == ContentJSON {
			payload, err = tbl.MarshalJSON()
		} else {
			payload, err = Encode(&tbl)
		}
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range [][]byte{payload, nil} {
			for _, st := range []Status{StatusOK, {RC: CodeErr, AC: CodeErr, AI: `a "quoted" {brace} text`}} {
				r := Response{Header: ResponseHeader{V: RequestVersion, RequestID: "gw-internal-id", API: "getData", LogCorr: "c1", Status: st},
					Payload: p, Content: c}
				data, err := r.Encode()
				if err != nil {
					t.Fatal(err)
				}
				r.Header.RequestID = "the-callers-own-id"
				want, err := r.Encode()
				if err != nil {
					t.Fatal(err)
				}
				got, ok := ResponseWithRequestID(c, data, "the-callers-own-id")
				if !ok || string(got) != string(want) {
					t.Fatalf("%s, %d payload bytes, status %v: ok %v, bytes equal %v", c, len(p), st.RC, ok, string(got) == string(want))
				}
				if same, ok := ResponseWithRequestID(c, want, "the-callers-own-id"); !ok || &same[0] != &want[0] {
					t.Fatalf("%s: an answer that already has the id was copied", c)
				}
			}
		}
	}
	for _, bad := range []struct {
		c    Content
		data string
	}{
		{ContentJSON, `{"payload":1,"header":{"v":1}}`},
		{ContentJSON, `{"header":{"v":1`},
		{ContentJSON, `{"header":{"v":0},"payload":1}`},
		{ContentMsgpack, "\x82\xa6header\xff"},
		{ContentMsgpack, "\x83\xa6header\x80"},
		{ContentMsgpack, ""},
	} {
		if _, ok := ResponseWithRequestID(bad.c, []byte(bad.data), "x"); ok {
			t.Errorf("%s %q: rewritten, want it left to a full decode", bad.c, bad.data)
		}
	}
}
