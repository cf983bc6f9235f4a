package messages

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unsafe"

	"github.com/nats-io/nats.go"
	"github.com/vmihailenco/msgpack/v5"
)

func TestDetectContent(t *testing.T) {
	mp, _ := msgpack.Marshal(map[string]any{"header": map[string]any{"api": "ping"}})
	cases := []struct {
		hdr  string
		body []byte
		want Content
	}{
		{"", []byte(`  {"header":{}}`), ContentJSON},
		{"", []byte("\n[1]"), ContentJSON},
		{"", mp, ContentMsgpack},
		{"json", mp, ContentJSON}, // the header wins
		{"application/msgpack", []byte(`{`), ContentMsgpack},
	}
	for _, c := range cases {
		h := nats.Header{}
		if c.hdr != "" {
			h.Set(HdrContentType, c.hdr)
		}
		got, err := DetectContent(h, c.body)
		if err != nil || got != c.want {
			t.Errorf("DetectContent(%q, %q) = %q, %v; want %q", c.hdr, c.body, got, err, c.want)
		}
	}
	if _, err := DetectContent(nats.Header{}, []byte("  ")); !errors.Is(err, ErrMalformed) {
		t.Errorf("blank body: %v", err)
	}
	h := nats.Header{}
	h.Set(HdrContentType, "xml")
	if _, err := DetectContent(h, []byte("{}")); !errors.Is(err, ErrBadHeader) {
		t.Errorf("bad content header: %v", err)
	}
}

func TestRequestJSON(t *testing.T) {
	body := `{"header":{"api":"getData","opts":{"timeout":5000,"logCorr":"c1","async":true},"scope":{"assembly":"eu","tier":"hdb"}},
	          "payload":{"table":"trade","labels":{"region":"eu"}}}`
	r, err := DecodeRequest(nil, []byte(body))
	if err != nil {
		t.Fatal(err)
	}
	want := RequestHeader{V: RequestVersion, API: "getData", Opts: Opts{TimeoutMS: 5000, LogCorr: "c1", Async: true},
		Scope: Scope{Assembly: "eu", Tier: TierHDB}}
	if r.Header != want || r.Content != ContentJSON {
		t.Errorf("header %+v content %q", r.Header, r.Content)
	}
	var args map[string]any
	if err := json.Unmarshal(r.Payload, &args); err != nil || args["table"] != "trade" {
		t.Errorf("payload %s: %v", r.Payload, err)
	}
	// Re-encoding gives the same shape.
	b, err := r.Encode()
	if err != nil {
		t.Fatal(err)
	}
	r2, err := DecodeRequest(nil, b)
	if err != nil || r2.Header != r.Header || !bytes.Equal(r2.Payload, r.Payload) {
		t.Errorf("JSON round trip: %+v, %v", r2, err)
	}
	// No payload (ping).
	r, err = DecodeRequest(nil, []byte(`{"header":{"api":"ping"}}`))
	if err != nil || r.Payload != nil {
		t.Errorf("ping: %+v, %v", r, err)
	}
}

func TestRequestMsgpack(t *testing.T) {
	args, _ := msgpack.Marshal(map[string]any{"table": "trade"})
	in := Request{Header: RequestHeader{V: 1, API: "sql", Opts: Opts{TimeoutMS: 10}}, Payload: args, Content: ContentMsgpack}
	b, err := in.Encode()
	if err != nil {
		t.Fatal(err)
	}
	out, err := DecodeRequest(nil, b)
	if err != nil {
		t.Fatal(err)
	}
	if out.Header != in.Header || !bytes.Equal(out.Payload, args) || out.Content != ContentMsgpack {
		t.Errorf("round trip %+v", out)
	}
}

func TestRequestErrors(t *testing.T) {
	cases := map[string]struct {
		body string
		want error
	}{
		"not JSON":        {`{"header":`, ErrMalformed},
		"trailing":        {`{"header":{"api":"ping"}} {}`, ErrMalformed},
		"no api":          {`{"header":{}}`, ErrInvalid},
		"api with dot":    {`{"header":{"api":"a.b"}}`, ErrInvalid},
		"negative timout": {`{"header":{"api":"ping","opts":{"timeout":-1}}}`, ErrInvalid},
		"bad tier":        {`{"header":{"api":"ping","scope":{"tier":"xdb"}}}`, ErrInvalid},
		"bad assembly":    {`{"header":{"api":"ping","scope":{"assembly":"a b"}}}`, ErrInvalid},
		"future version":  {`{"header":{"v":9,"api":"ping"}}`, ErrVersion},
		"wrong type":      {`{"header":{"api":5}}`, ErrMalformed},
		"array":           {`[1,2]`, ErrMalformed},
		"msgpack garbage": {"\xc1\x00", ErrMalformed},
	}
	for name, c := range cases {
		_, err := DecodeRequest(nil, []byte(c.body))
		if !errors.Is(err, c.want) {
			t.Errorf("%s: got %v, want %v", name, err, c.want)
		}
	}
}

// newResponse answers req with status st and payload (in req's encoding), as
// the GW's answer paths fill a Response.
func newResponse(requestID string, req Request, st Status, payload []byte) Response {
	return Response{
		Header: ResponseHeader{V: RequestVersion, RequestID: requestID, API: req.Header.API,
			LogCorr: req.Header.Opts.LogCorr, Status: st},
		Payload: payload,
		Content: req.Content,
	}
}

func TestResponseEnvelope(t *testing.T) {
	req := Request{Header: RequestHeader{V: 1, API: "getData", Opts: Opts{LogCorr: "c"}}, Content: ContentJSON}
	resp := newResponse("req-1", req, StatusOK, []byte(`[{"a":1}]`))
	b, err := resp.Encode()
	if err != nil {
		t.Fatal(err)
	}
	var generic map[string]json.RawMessage
	if err := json.Unmarshal(b, &generic); err != nil || generic["header"] == nil || generic["payload"] == nil {
		t.Fatalf("JSON shape %s: %v", b, err)
	}
	if !strings.Contains(string(generic["header"]), `"rc":0`) || !strings.Contains(string(generic["header"]), `"requestId":"req-1"`) {
		t.Errorf("header %s", generic["header"])
	}
	back, err := DecodeResponse(nil, b)
	if err != nil || back.Header != resp.Header || string(back.Payload) != `[{"a":1}]` {
		t.Errorf("round trip %+v, %v", back, err)
	}
	// msgpack, error status, no payload
	resp = newResponse("req-2", Request{Header: RequestHeader{API: "ping"}}, Errorf(CodeNoResources, CodeErr, "No resources connected"), nil)
	b, err = resp.Encode()
	if err != nil {
		t.Fatal(err)
	}
	back, err = DecodeResponse(nil, b)
	if err != nil || back.Header.RC != CodeNoResources || back.Header.AI != "No resources connected" || back.Content != ContentMsgpack {
		t.Errorf("msgpack round trip %+v, %v", back, err)
	}
	if _, err := (Response{Content: ContentJSON, Payload: []byte("{")}).Encode(); !errors.Is(err, ErrInvalid) {
		t.Errorf("invalid JSON payload encoded: %v", err)
	}
}

// EncodeOwn skips the JSON checks for sg's own payloads; its bytes must be
// Encode's, for every payload sg's encoders write: JSON with characters that
// json.Marshal escapes (<, >, &, U+2028, U+2029, controls, quotes), NaN,
// the parallel JSON encoder, msgpack, no payload, an error.
func TestEncodeOwnIsEncode(t *testing.T) {
	tb := NewTable([]ColumnSpec{{"sym", TypeSymbol}, {"note", TypeString}, {"px", TypeFloat}, {"n", TypeInt}})
	notes := []string{"a <b> & c", "line\u2028sep\u2029", "tab\there \"q\" \\ \x01", "é 日本", " spaced ", ""}
	for i := range 2*parallelEncodeRows + 7 {
		px := float64(i) / 3
		if i%11 == 0 {
			px = math.NaN()
		}
		if err := tb.AppendRow("S<"+strconv.Itoa(i%5)+">", notes[i%len(notes)], px, int64(i)); err != nil {
			t.Fatal(err)
		}
	}
	small := tb.Slice(0, 12)
	payloads := map[string]struct {
		c Content
		f func() ([]byte, error)
	}{
		"json parallel": {ContentJSON, func() ([]byte, error) { return EncodeTableJSON(tb, 4) }},
		"json":          {ContentJSON, small.MarshalJSON},
		"json map":      {ContentJSON, func() ([]byte, error) { return json.Marshal(map[string]bool{"dap<1>": true, "d&2": false}) }},
		"msgpack":       {ContentMsgpack, func() ([]byte, error) { return EncodeSized(tb, tb.SizeHint()) }},
		"json none":     {ContentJSON, func() ([]byte, error) { return nil, nil }},
		"msgpack none":  {ContentMsgpack, func() ([]byte, error) { return nil, nil }},
	}
	for name, p := range payloads {
		payload, err := p.f()
		if err != nil {
			t.Fatal(name, err)
		}
		for _, st := range []Status{StatusOK, Errorf(CodeErr, CodeErr, "a <failure> & more")} {
			resp := Response{Header: ResponseHeader{RequestID: "req-1", API: "getData", LogCorr: "c<1>", Status: st},
				Payload: payload, Content: p.c}
			want, err := resp.Encode()
			if err != nil {
				t.Fatal(name, err)
			}
			body, err := resp.EncodeOwn()
			if err != nil {
				t.Fatal(name, err)
			}
			if got := body.Join(); !bytes.Equal(got, want) {
				t.Fatalf("%s: EncodeOwn's %d bytes differ from Encode's %d", name, len(got), len(want))
			}
			if len(payload) > 0 && !slices.ContainsFunc(body, func(b []byte) bool { return len(b) > 0 && &b[0] == &payload[0] }) {
				t.Errorf("%s: the payload was copied into the body", name)
			}
			if back, err := DecodeResponse(nats.Header{HdrContentType: {string(p.c)}}, body.Join()); err != nil || back.Header.RequestID != "req-1" {
				t.Errorf("%s: decoded %+v, %v", name, back.Header, err)
			}
		}
	}
}

// DecodeResponseAliasing gives the payload DecodeResponse gives, sharing the
// answer's bytes (a large answer is not copied again); DecodeResponse's own
// payload is a copy.
func TestDecodeResponseAliasing(t *testing.T) {
	payload, err := Encode(map[string]string{"rows": strings.Repeat("x", 1<<10)})
	if err != nil {
		t.Fatal(err)
	}
	b, err := newResponse("r", Request{Header: RequestHeader{API: "getData"}}, StatusOK, payload).Encode()
	if err != nil {
		t.Fatal(err)
	}
	shared, err := DecodeResponseAliasing(nil, b)
	if err != nil {
		t.Fatal(err)
	}
	copied, err := DecodeResponse(nil, b)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(shared.Payload, payload) || !bytes.Equal(copied.Payload, payload) || shared.Header != copied.Header {
		t.Fatalf("aliasing decode %+v (%d bytes), copying %+v (%d bytes), want the same", shared.Header, len(shared.Payload), copied.Header, len(copied.Payload))
	}
	within := func(p []byte) bool {
		start := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
		at := uintptr(unsafe.Pointer(unsafe.SliceData(p)))
		return at >= start && at < start+uintptr(len(b))
	}
	if !within(shared.Payload) || within(copied.Payload) {
		t.Fatalf("aliasing payload within the answer's bytes: %v, copying: %v; want true, false", within(shared.Payload), within(copied.Payload))
	}
	if cap(shared.Payload) != len(shared.Payload) {
		t.Fatalf("shared payload's capacity %d beyond its length %d: an append would write into the answer", cap(shared.Payload), len(shared.Payload))
	}
}
