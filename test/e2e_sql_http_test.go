package test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sg-project/sg/messages"
	"github.com/sg-project/sg/services/gw/httpapi"
	"github.com/sg-project/sg/subjects"
)

// TestSQLOverHTTP: POST /v1/sql through the HTTP API of a running system
// answers what the sql API answers over NATS (the same JSON envelope's
// payload), and a construct sql does not support is refused with the HTTP
// status the README's table gives NOT_SUPPORTED (501), naming it; a syntax
// error is BAD_REQUEST (400).
func TestSQLOverHTTP(t *testing.T) {
	sys := startSystem(t, systemOptions{})
	sys.startDemo(demoFleetConfig(sys, 3000))
	srv := sys.startHTTPAPI(t)

	type envelope struct {
		Header  messages.ResponseHeader `json:"header"`
		Payload json.RawMessage         `json:"payload"`
	}
	post := func(query string) (int, envelope) {
		t.Helper()
		body, _ := json.Marshal(messages.SQLArgs{Query: query})
		res, err := srv.Client().Post(srv.URL+"/v1/"+subjects.APISQL, "application/json", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, err := io.ReadAll(res.Body)
		if err != nil {
			t.Fatal(err)
		}
		var env envelope
		if err := json.Unmarshal(b, &env); err != nil {
			t.Fatalf("HTTP answer is not an envelope: %v\n%s", err, b)
		}
		return res.StatusCode, env
	}
	overNATS := func(query string) envelope {
		t.Helper()
		args, _ := json.Marshal(messages.SQLArgs{Query: query})
		ctx, cancel := context.WithTimeout(sys.ctx, 30*time.Second)
		defer cancel()
		b, err := sys.client.DoJSON(ctx, subjects.APISQL, args, messages.Opts{})
		if err != nil {
			t.Fatal(err)
		}
		var env envelope
		if err := json.Unmarshal(b, &env); err != nil {
			t.Fatalf("NATS answer is not an envelope: %v\n%s", err, b)
		}
		return env
	}

	for _, q := range []string{
		"SELECT sym, count(*) AS n, avg(price) AS px FROM trade WHERE region IN ('eu','us') GROUP BY sym ORDER BY sym",
		"SELECT region, sum(size) AS vol FROM trade GROUP BY region ORDER BY region",
		"SELECT sym, currency FROM instrument WHERE region = 'eu' ORDER BY sym",
	} {
		code, h := post(q)
		if code != http.StatusOK || !h.Header.Status.IsOK() {
			t.Fatalf("%s: HTTP %d %v", q, code, h.Header.Status)
		}
		var rows []map[string]any
		if err := json.Unmarshal(h.Payload, &rows); err != nil || len(rows) == 0 {
			t.Fatalf("%s: HTTP payload %v, %d rows: %s", q, err, len(rows), h.Payload)
		}
		n := overNATS(q)
		if !n.Header.Status.IsOK() {
			t.Fatalf("%s: over NATS %v", q, n.Header.Status)
		}
		if !bytes.Equal(h.Payload, n.Payload) {
			t.Fatalf("%s: HTTP and NATS answers differ\nHTTP: %s\nNATS: %s", q, h.Payload, n.Payload)
		}
		if h.Header.API != subjects.APISQL {
			t.Errorf("%s: answered as API %q", q, h.Header.API)
		}
	}

	for q, want := range map[string]struct {
		rc     messages.Code
		status int
		names  string
	}{
		"SELECT * FROM trade JOIN quote ON trade.sym = quote.sym": {messages.CodeNotSupported, http.StatusNotImplemented, "join"},
		"DELETE FROM trade":   {messages.CodeNotSupported, http.StatusNotImplemented, "delete"},
		"SELEKT * FROM trade": {messages.CodeBadRequest, http.StatusBadRequest, ""},
	} {
		code, env := post(q)
		if code != want.status || code != httpapi.Status(want.rc) || env.Header.Status.RC != want.rc ||
			!strings.Contains(strings.ToLower(env.Header.Status.AI), want.names) {
			t.Errorf("%s: HTTP %d %v %q; want %d %v naming %q", q, code, env.Header.Status.RC, env.Header.Status.AI, want.status, want.rc, want.names)
		}
	}
}

// startHTTPAPI serves the system's APIs over HTTP (services/gw/httpapi) until
// the test ends.
func (sys *system) startHTTPAPI(t *testing.T) *httptest.Server {
	t.Helper()
	api, err := httpapi.New(sys.nc, httpapi.Config{Subjects: sys.s, Log: sys.log})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(api.Handler())
	t.Cleanup(func() {
		srv.Close()
		_ = api.Close()
	})
	return srv
}
