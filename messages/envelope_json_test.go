package messages

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
)

// The JSON envelope written without compacting its payload is json.Marshal's
// output byte for byte, for payloads with and without something to compact or
// escape (whitespace, <, >, &, U+2028).
func TestJSONEnvelopeMatchesMarshal(t *testing.T) {
	tbl := tradeTable(2000)
	rows, err := tbl.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	h := ResponseHeader{V: RequestVersion, RequestID: "r1", API: "getData", Status: StatusOK}
	for _, payload := range []string{string(rows), `{"a":1}`, `[1, 2]`, "{\"a\":\"<b>&\"}", "[\"\u2028\"]", "{\n\"a\":1}", `"x"`, `7`} {
		got, err := encodeEnvelope(ContentJSON, h, []byte(payload))
		if err != nil {
			t.Fatal(err)
		}
		want, err := json.Marshal(envelope[ResponseHeader, json.RawMessage]{Header: h, Payload: json.RawMessage(payload)})
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != string(want) {
			t.Fatalf("payload %.40q: envelope\n%.200s\nwant\n%.200s", payload, got, want)
		}
	}
	if _, err := encodeEnvelope(ContentJSON, h, []byte(`{"a":`)); err == nil {
		t.Fatal("an invalid JSON payload was wrapped")
	}
}

// The fast reading of sg's own JSON envelope gives what the general decoder
// gives, and leaves to it (returns not ok) whatever is not in that layout.
func TestJSONEnvelopeFastMatchesDecoder(t *testing.T) {
	tbl := tradeTable(500)
	rows, err := tbl.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	h := ResponseHeader{V: RequestVersion, RequestID: "r1", API: "getData", Status: Status{RC: CodeErr, AC: CodeErr, AI: `a "quoted" {brace} \ text`}}
	var docs [][]byte
	for _, p := range [][]byte{rows, []byte(`{"a":[1,{"b":"}"}]}`), nil, []byte(`"x"`)} {
		b, err := encodeEnvelope(ContentJSON, h, p)
		if err != nil {
			t.Fatal(err)
		}
		docs = append(docs, b)
	}
	docs = append(docs,
		[]byte(`{"header":{"v":1,"requestId":"r"},"payload":null}`),
		[]byte(`{"header":{"v":1,"requestId":"r"},"payload": [1, 2] }`),
		[]byte(`{"header":{"v":1},"payload":1,"header":{"v":1,"requestId":"dup"}}`), // not sg's layout: the decoder decides
		[]byte(`{"payload":[1],"header":{"v":1,"requestId":"r"}}`),
		[]byte(`{"header":{"v":1,"requestId":"r"},"payload":[1,}`),
		[]byte(`{"header":{"v":"x"},"payload":[1]}`),
	)
	for _, d := range docs {
		fh, fp, ok := decodeJSONEnvelopeFast[ResponseHeader](d)
		var e envelope[ResponseHeader, json.RawMessage]
		err := json.Unmarshal(d, &e)
		if err == nil && bytes.Equal(bytes.TrimSpace(e.Payload), []byte("null")) {
			e.Payload = nil
		}
		if !ok {
			continue // the general decoder reads it, as before
		}
		if err != nil || !reflect.DeepEqual(fh, e.Header) || !bytes.Equal(fp, e.Payload) {
			t.Fatalf("%.80s: fast %+v %.40q, decoder %+v %.40q (%v)", d, fh, fp, e.Header, e.Payload, err)
		}
	}
	if _, _, ok := decodeJSONEnvelopeFast[ResponseHeader](docs[0]); !ok {
		t.Fatal("sg's own envelope was not read the fast way")
	}
}
