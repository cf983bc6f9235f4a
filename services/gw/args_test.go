package gw_test

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/sg-project/sg/messages"
	"github.com/sg-project/sg/subjects"
)

// TestSQLMsgpackArgsForwardedAsSent: a msgpack caller's sql arguments reach
// the RC as the caller sent them (the RC decodes them with the GW's decoder,
// DecodeSQLArgs), in either of their forms; the GW still checks them first.
func TestSQLMsgpackArgsForwardedAsSent(t *testing.T) {
	e := startGW(t, nil)
	got := make(chan messages.RCSubmission, 4)
	e.fakeRC("rc1", "", func(s messages.RCSubmission) {
		got <- s
		e.reply(s, messages.StatusOK, map[string]string{"ok": "1"})
	})
	mpHdr := nats.Header{messages.HdrContentType: {"msgpack"}}
	enc := func(v any) []byte {
		t.Helper()
		b, err := msgpack.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	request := func(args []byte) []byte {
		t.Helper()
		body, err := messages.Request{Header: messages.RequestHeader{API: subjects.APISQL}, Payload: args,
			Content: messages.ContentMsgpack}.Encode()
		if err != nil {
			t.Fatal(err)
		}
		return body
	}
	for name, args := range map[string][]byte{
		"bare string": enc("SELECT * FROM trade"),
		"map":         enc(map[string]any{"query": "SELECT * FROM quote", "extra": 1}),
	} {
		r := e.raw(subjects.APISQL, mpHdr, request(args))
		if !r.Header.Status.IsOK() {
			t.Fatalf("%s: status %v", name, r.Header.Status)
		}
		select {
		case s := <-got:
			if !bytes.Equal(s.Args, args) {
				t.Errorf("%s: RC got arguments %x, want the caller's %x", name, []byte(s.Args), args)
			}
			if _, err := messages.DecodeSQLArgs(messages.ContentMsgpack, s.Args); err != nil {
				t.Errorf("%s: the RC's decoder refuses what the GW accepted: %v", name, err)
			}
		case <-time.After(wait):
			t.Fatalf("%s: no submission", name)
		}
	}
	if st := e.raw(subjects.APISQL, mpHdr, request(enc(map[string]any{"query": 5}))).Header.Status; st.RC != messages.CodeBadRequest {
		t.Errorf("sql arguments with a numeric query: %v, want BAD_REQUEST from the GW", st)
	}
}

// TestJSONScopeFromTheArgumentsParse: the scope the GW takes from a JSON
// caller's arguments (read from the API decoder's one parse) routes as
// before, for every API with arguments, and a bad scope is named even when
// the arguments are bad too, as when the scope was parsed first.
func TestJSONScopeFromTheArgumentsParse(t *testing.T) {
	e := startGW(t, nil)
	e.fakeRC("global", "", e.echo("global"))
	e.fakeRC("asm-eu", "eu", e.echo("asm-eu"))
	for api, payload := range map[string]string{
		subjects.APIGetData: `{"table":"t","scope":{"assembly":"eu"}}`,
		subjects.APIPing:    `{"scope":{"assembly":"eu"}}`,
		subjects.APISQL:     `{"query":"SELECT * FROM t","scope":{"assembly":"eu"}}`,
	} {
		body := []byte(`{"header":{"api":"` + api + `"},"payload":` + payload + `}`)
		if got := rcOfRaw(t, e.raw(api, nil, body)); got != "asm-eu" {
			t.Errorf("%s: JSON scope eu -> %q, want asm-eu", api, got)
		}
	}
	for api, payload := range map[string]string{
		subjects.APIGetData: `{"table":"t","startTS":"yesterday","scope":"eu"}`,
		subjects.APIPing:    `{"labels":{"k":5},"scope":"eu"}`,
	} {
		body := []byte(`{"header":{"api":"` + api + `"},"payload":` + payload + `}`)
		st := e.raw(api, nil, body).Header.Status
		if st.RC != messages.CodeBadRequest || !strings.Contains(st.AI, "scope must be") {
			t.Errorf("%s: got %v, want BAD_REQUEST naming the scope", api, st)
		}
	}
}
