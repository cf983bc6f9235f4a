package messages

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/nats-io/nats.go"
)

// RelabelResponse sets the envelope's request id and keeps everything else:
// the other header fields, and the payload byte for byte, in both
// encodings and in JSON shapes sg does not write itself.
func TestRelabelResponse(t *testing.T) {
	hdr := ResponseHeader{V: RequestVersion, RequestID: "gw-id~1", API: "getData", LogCorr: "c1", Status: StatusOK}
	payloads := [][]byte{nil, []byte(`{"a":[1,2,{"b":"}"}],"c":"\"}"}`), []byte(`[]`), []byte(`"x"`), []byte(`12.5`)}
	for _, c := range []Content{ContentJSON, ContentMsgpack} {
		for _, p := range payloads {
			if c == ContentMsgpack && p != nil {
				p = []byte{0x92, 0x01, 0xa1, 'x'} // [1, "x"]
			}
			data, err := Response{Header: hdr, Payload: p, Content: c}.Encode()
			if err != nil {
				t.Fatal(err)
			}
			out, err := RelabelResponse(c, data, "client-7")
			if err != nil {
				t.Fatalf("%s %q: %v", c, p, err)
			}
			resp, err := DecodeResponse(nats.Header{HdrContentType: {string(c)}}, out)
			if err != nil {
				t.Fatalf("%s %q: relabelled envelope %q does not decode: %v", c, p, out, err)
			}
			want := hdr
			want.RequestID = "client-7"
			if resp.Header != want {
				t.Errorf("%s: header %+v, want %+v", c, resp.Header, want)
			}
			if !bytes.Equal(resp.Payload, p) {
				t.Errorf("%s: payload %q, want %q", c, resp.Payload, p)
			}
		}
	}
	// Shapes sg does not write: payload first, spaces, extra keys: decoded whole.
	for _, in := range []string{
		`{"payload":{"x":1},"header":{"v":1,"requestId":"a","rc":0,"ac":0,"ai":""}}`,
		` { "header" : {"v":1,"requestId":"a","rc":0,"ac":0,"ai":""} , "payload" : [1, 2] } `,
	} {
		out, err := RelabelResponse(ContentJSON, []byte(in), "b")
		if err != nil {
			t.Fatalf("%s: %v", in, err)
		}
		var e struct {
			Header  ResponseHeader  `json:"header"`
			Payload json.RawMessage `json:"payload"`
		}
		if err := json.Unmarshal(out, &e); err != nil || e.Header.RequestID != "b" || len(e.Payload) == 0 {
			t.Errorf("%s -> %s (%v)", in, out, err)
		}
	}
	// Not an envelope: an error, no bytes.
	for _, in := range []string{`{"header":`, `[1]`, `{"header":{"v":1},"payload":}`} {
		if out, err := RelabelResponse(ContentJSON, []byte(in), "b"); err == nil {
			t.Errorf("%s relabelled to %s", in, out)
		}
	}
}

// Whatever bytes come as an answer, relabelling never panics, and what it
// returns is an envelope that decodes with the new id.
func FuzzRelabelResponse(f *testing.F) {
	ok, _ := Response{Header: ResponseHeader{V: RequestVersion, RequestID: "x", Status: StatusOK}, Payload: []byte(`{"a":1}`), Content: ContentJSON}.Encode()
	f.Add(ok)
	f.Add([]byte(`{"header":{"v":1},"payload":"}"}`))
	f.Add([]byte(`{"header":{"v":1}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		out, err := RelabelResponse(ContentJSON, data, "new-id")
		if err != nil {
			return
		}
		var e struct {
			Header ResponseHeader `json:"header"`
		}
		if json.Unmarshal(out, &e) != nil && json.Valid(data) {
			t.Fatalf("%q from a valid document relabelled to %q, which does not decode", data, out)
		}
		if json.Valid(out) && e.Header.RequestID != "new-id" {
			t.Fatalf("%q relabelled to %q: request id %q", data, out, e.Header.RequestID)
		}
	})
}
