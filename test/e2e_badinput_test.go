package test

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sg-project/sg/messages"
)

// Every bad input gets a clear error code and text, through the whole
// system (GW, RC, DAP and Agg), and no service stops: a good request is
// answered after all of them, and the system's services report no error
// when the test ends.
func TestBadInputsGetClearErrors(t *testing.T) {
	sys := startSystem(t, systemOptions{})
	src, _ := engineSource(t, sys)
	sys.startDAP(oneDAP(src, 1))
	sys.waitDAPs(1)

	jsonReq := func(api, payload string) []byte {
		return []byte(`{"header":{"api":"` + api + `"},"payload":` + payload + `}`)
	}
	huge := jsonReq("getData", `{"table":"trade","columns":["`+strings.Repeat("x", 900_000)+`"]}`)
	cases := []struct {
		name    string
		subject string // API endpoint
		body    []byte
		rc      messages.Code
		ai      string // a part of the text
	}{
		{"unknown API in envelope", "getData", jsonReq("nope", `{}`), messages.CodeUnknownAPI, "nope"},
		{"unknown table", "getData", jsonReq("getData", `{"table":"nope"}`), messages.CodeNoResources, `No DAP serves table "nope"`},
		{"unknown column", "getData", jsonReq("getData", `{"table":"trade","columns":["nope"]}`), messages.CodeBadRequest, "nope"},
		{"unknown filter column", "getData", jsonReq("getData", `{"table":"trade","filter":[["=","nope",1]]}`), messages.CodeBadRequest, "nope"},
		{"bad time range", "getData", jsonReq("getData", `{"table":"trade","startTS":"2026-01-02T00:00:00Z","endTS":"2026-01-01T00:00:00Z"}`), messages.CodeBadRequest, "endTS"},
		{"bad timestamp", "getData", jsonReq("getData", `{"table":"trade","startTS":"yesterday"}`), messages.CodeBadRequest, "startTS"},
		{"wrong type: limit", "getData", jsonReq("getData", `{"table":"trade","limit":"ten"}`), messages.CodeBadRequest, "limit"},
		{"wrong type: filter value", "getData", jsonReq("getData", `{"table":"trade","filter":[["=","size","big"]]}`), messages.CodeBadRequest, "size"},
		{"unknown filter op", "getData", jsonReq("getData", `{"table":"trade","filter":[["~","size",1]]}`), messages.CodeBadRequest, "~"},
		{"unknown agg function", "getData", jsonReq("getData", `{"table":"trade","groupBy":["sym"],"agg":[["x","median","price"]]}`), messages.CodeBadRequest, "median"},
		{"malformed JSON", "getData", []byte(`{"header":{"api":"getData"},"payload":{`), messages.CodeBadRequest, ""},
		{"malformed msgpack", "getData", []byte{0x82, 0xa6, 'h', 'e', 'a', 'd', 'e', 'r', 0xc1}, messages.CodeBadRequest, ""},
		{"empty body", "getData", nil, messages.CodeBadRequest, ""},
		{"huge request", "getData", huge, messages.CodeBadRequest, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(sys.ctx, 20*time.Second)
			defer cancel()
			msg, err := sys.nc.RequestMsgWithContext(ctx, &nats.Msg{Subject: sys.s.GWAPI(tc.subject), Data: tc.body})
			if err != nil {
				t.Fatalf("no answer: %v", err)
			}
			st, err := messages.ReadStatus(msg.Header)
			if err != nil {
				t.Fatalf("answer without status: %v", err)
			}
			if tc.name == "huge request" && (st.RC == messages.CodeTooLarge || st.RC == messages.CodeBadRequest) {
				return // either names the problem; the text must say what
			}
			if st.RC != tc.rc || st.AI == "" || !strings.Contains(st.AI, tc.ai) {
				t.Fatalf("got rc=%s ai=%q, want rc=%s with %q", st.RC, st.AI, tc.rc, tc.ai)
			}
		})
	}

	// JSON in, JSON out: a plain NATS client gets the envelope with rows.
	ctx, cancel := context.WithTimeout(sys.ctx, 20*time.Second)
	defer cancel()
	out, err := sys.client.DoJSON(ctx, "getData", []byte(`{"table":"trade","groupBy":["sym"],"agg":[["n","count"]]}`), messages.Opts{})
	if err != nil {
		t.Fatal(err)
	}
	var env struct {
		Header  map[string]any   `json:"header"`
		Payload []map[string]any `json:"payload"`
	}
	if err := json.NewDecoder(bytes.NewReader(out)).Decode(&env); err != nil {
		t.Fatalf("JSON answer %q: %v", out, err)
	}
	if len(env.Payload) == 0 || env.Payload[0]["sym"] == nil || env.Payload[0]["n"] == nil {
		t.Fatalf("JSON answer rows %v", env.Payload)
	}
}
