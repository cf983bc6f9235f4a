package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/sg-project/sg/messages"
	"github.com/sg-project/sg/services/gw/httpapi"
	"github.com/sg-project/sg/subjects"
	"github.com/sg-project/sg/test/natstest"
	"github.com/sg-project/sg/test/testlog"
)

// fakeGW answers sg.api.* as a GW would, with whatever answer builds; it
// records the cancels it gets.
type fakeGW struct {
	t       *testing.T
	nc      *nats.Conn
	cancels chan *nats.Msg
}

func startFakeGW(t *testing.T, nc *nats.Conn, answer func(m *nats.Msg, req messages.Request)) *fakeGW {
	t.Helper()
	g := &fakeGW{t: t, nc: nc, cancels: make(chan *nats.Msg, 8)}
	s := subjects.Default()
	if _, err := nc.Subscribe(s.GWCancel(), func(m *nats.Msg) { g.cancels <- m }); err != nil {
		t.Fatal(err)
	}
	if _, err := nc.Subscribe(s.GWAPIPattern(), func(m *nats.Msg) {
		if m.Subject == s.GWCancel() {
			return
		}
		req, err := messages.DecodeRequest(m.Header, m.Data)
		if err != nil {
			g.respond(m.Reply, "", messages.Errorf(messages.CodeBadRequest, messages.CodeErr, "%v", err), nil)
			return
		}
		answer(m, req)
	}); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return g
}

// respond publishes an envelope with status st and JSON payload.
func (g *fakeGW) respond(reply, reqID string, st messages.Status, payload []byte) {
	body, err := messages.Response{Header: messages.ResponseHeader{V: messages.RequestVersion, RequestID: reqID, Status: st},
		Payload: payload, Content: messages.ContentJSON}.Encode()
	if err != nil {
		g.t.Error(err)
		return
	}
	h := nats.Header{}
	st.Write(h)
	messages.SetString(h, messages.HdrContentType, string(messages.ContentJSON))
	if err := g.nc.PublishMsg(&nats.Msg{Subject: reply, Header: h, Data: body}); err != nil {
		g.t.Error(err)
	}
}

type env struct {
	srv  *server.Server
	nc   *nats.Conn
	http *httptest.Server
}

func start(t *testing.T, cfg httpapi.Config, tune ...func(*server.Options)) *env {
	t.Helper()
	cfg.Log = zerolog.Nop()
	return startLogged(t, cfg, tune...)
}

// startLogged is start with the adapter logging to cfg.Log.
func startLogged(t *testing.T, cfg httpapi.Config, tune ...func(*server.Options)) *env {
	t.Helper()
	srv := natstest.Start(t, tune...)
	nc := natstest.Connect(t, srv)
	a, err := httpapi.New(natstest.Connect(t, srv), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Close() })
	hs := httptest.NewServer(a.Handler())
	t.Cleanup(hs.Close)
	return &env{srv: srv, nc: nc, http: hs}
}

func (e *env) post(t *testing.T, path, body string, hdr ...string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, e.http.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("read body: %v", err)
	}
	return resp, b
}

func decode(t *testing.T, b []byte) messages.Response {
	t.Helper()
	r, err := messages.DecodeResponse(nil, b)
	if err != nil {
		t.Fatalf("answer is not an envelope: %v: %.200s", err, b)
	}
	return r
}

func TestSyncRoundTripAndOptions(t *testing.T) {
	e := start(t, httpapi.Config{})
	got := make(chan messages.Request, 1)
	startFakeGW(t, e.nc, func(m *nats.Msg, req messages.Request) {
		got <- req
		g := &fakeGW{t: t, nc: e.nc}
		g.respond(m.Reply, m.Header.Get(messages.HdrRequestID), messages.Status{}, []byte(`[{"sym":"A","n":3}]`))
	})
	resp, b := e.post(t, "/v1/getData?timeout=5000&logCorr=abc", `{"table":"trade"}`, "X-Request-Id", "my-id")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	if resp.Header.Get("X-Request-Id") != "my-id" {
		t.Errorf("X-Request-Id %q, want my-id", resp.Header.Get("X-Request-Id"))
	}
	r := decode(t, b)
	if string(r.Payload) != `[{"sym":"A","n":3}]` || r.Header.RequestID != "my-id" {
		t.Errorf("answer %+v %s", r.Header, r.Payload)
	}
	req := <-got
	if req.Header.API != "getData" || req.Header.Opts.TimeoutMS != 5000 || req.Header.Opts.LogCorr != "abc" || string(req.Payload) != `{"table":"trade"}` {
		t.Errorf("GW got %+v payload %s", req.Header, req.Payload)
	}

	// A whole envelope is forwarded as it is.
	resp, b = e.post(t, "/v1/ping", `{"header":{"api":"ping","opts":{"timeout":100}},"payload":{"labels":{"region":"eu"}}}`)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("envelope: status %d: %s", resp.StatusCode, b)
	}
	if req := <-got; req.Header.API != "ping" || req.Header.Opts.TimeoutMS != 100 || !bytes.Contains(req.Payload, []byte(`"eu"`)) {
		t.Errorf("envelope: GW got %+v payload %s", req.Header, req.Payload)
	}
}

func TestStatusesAndBadInputs(t *testing.T) {
	e := start(t, httpapi.Config{MaxRequestBytes: 1024})
	startFakeGW(t, e.nc, func(m *nats.Msg, req messages.Request) {
		var args struct {
			RC int `json:"rc"`
		}
		_ = json.Unmarshal(req.Payload, &args)
		st := messages.Errorf(messages.Code(args.RC), messages.CodeErr, "code %d", args.RC)
		body, _ := messages.Response{Header: messages.ResponseHeader{V: messages.RequestVersion, Status: st}, Content: messages.ContentJSON}.Encode()
		h := nats.Header{}
		st.Write(h)
		if st.RC == messages.CodeRateLimited {
			h.Set(messages.HdrRetryAfter, "7")
		}
		_ = e.nc.PublishMsg(&nats.Msg{Subject: m.Reply, Header: h, Data: body})
	})
	for _, c := range []struct {
		rc   messages.Code
		want int
	}{
		{messages.CodeBadRequest, 400}, {messages.CodeUnknownAPI, 404}, {messages.CodeTooLarge, 413},
		{messages.CodeRateLimited, 429}, {messages.CodeNoResources, 503}, {messages.CodeTimeout, 504},
	} {
		resp, b := e.post(t, "/v1/getData", `{"rc":`+itoa(int(c.rc))+`}`)
		if resp.StatusCode != c.want {
			t.Errorf("rc %s: HTTP %d, want %d", c.rc, resp.StatusCode, c.want)
		}
		if decode(t, b).Header.RC != c.rc {
			t.Errorf("rc %s: envelope rc %s", c.rc, decode(t, b).Header.RC)
		}
		if c.rc == messages.CodeRateLimited && resp.Header.Get("Retry-After") != "7" {
			t.Errorf("RATE_LIMITED: Retry-After %q, want 7", resp.Header.Get("Retry-After"))
		}
	}
	// Refused by the adapter itself, each with a clear envelope.
	for _, c := range []struct {
		path, body string
		want       int
		text       string
	}{
		{"/v1/nosuch", `{}`, 404, "Unknown API"},
		{"/v1/cancel", `{}`, 404, "Unknown API"},
		{"/v1/getData", strings.Repeat(" ", 2048), 413, "larger than the limit of 1024"},
		{"/v1/getData", `{"table":`, 400, "not valid JSON"},
		{"/v1/getData?timeout=-1", `{}`, 400, "timeout"},
		{"/v1/getData", `{"header":{"api":"ping"}}`, 400, "does not match"},
	} {
		resp, b := e.post(t, c.path, c.body)
		if resp.StatusCode != c.want || !strings.Contains(decode(t, b).Header.AI, c.text) {
			t.Errorf("%s %q: HTTP %d %q, want %d with %q", c.path, truncate(c.body), resp.StatusCode, decode(t, b).Header.AI, c.want, c.text)
		}
	}
	// GET on an API is not allowed.
	resp, err := http.Get(e.http.URL + "/v1/getData")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("GET /v1/getData: %d, want 405", resp.StatusCode)
	}
}

// A large answer comes from the GW in chunks and streams to the HTTP caller
// whole, with chunked transfer encoding.
func TestLargeAnswerStreams(t *testing.T) {
	e := start(t, httpapi.Config{}, func(o *server.Options) { o.MaxPayload = 64 << 10 })
	rows := make([]map[string]any, 0, 20000)
	for i := range 20000 {
		rows = append(rows, map[string]any{"i": i, "sym": "SYM" + itoa(i%97)})
	}
	payload, _ := json.Marshal(rows)
	startFakeGW(t, e.nc, func(m *nats.Msg, req messages.Request) {
		body, _ := messages.Response{Header: messages.ResponseHeader{V: messages.RequestVersion}, Payload: payload, Content: messages.ContentJSON}.Encode()
		h := nats.Header{}
		messages.Status{}.Write(h)
		n, err := messages.SendChunked(e.nc, m.Reply, h, body, 0)
		if err != nil || n < 4 {
			t.Errorf("sent %d chunks: %v", n, err)
		}
	})
	resp, b := e.post(t, "/v1/getData", `{"table":"trade"}`)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	if len(resp.TransferEncoding) == 0 || resp.TransferEncoding[0] != "chunked" {
		t.Errorf("transfer encoding %v, want chunked", resp.TransferEncoding)
	}
	r := decode(t, b)
	if !bytes.Equal(r.Payload, payload) {
		t.Errorf("payload of %d bytes differs from the %d sent", len(r.Payload), len(payload))
	}
}

// A transfer that breaks mid-way (a chunk with a wrong checksum) aborts the
// connection: the caller gets an error, never a document that looks whole.
func TestBrokenTransferAborts(t *testing.T) {
	e := start(t, httpapi.Config{}, func(o *server.Options) { o.MaxPayload = 16 << 10 })
	startFakeGW(t, e.nc, func(m *nats.Msg, req messages.Request) {
		body := bytes.Repeat([]byte("x"), 100<<10)
		h := nats.Header{}
		messages.Status{}.Write(h)
		msgs, err := messages.SplitChunksBody(m.Reply, h, messages.Body{body}, 0+16<<10)
		if err != nil {
			t.Error(err)
			return
		}
		for i, c := range msgs {
			if i == len(msgs)-1 {
				c.Header.Set(messages.HdrChunkSum, "0") // a different transfer's chunk
			}
			_ = e.nc.PublishMsg(c)
		}
	})
	req, _ := http.NewRequest(http.MethodPost, e.http.URL+"/v1/getData", strings.NewReader(`{}`))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return // aborted before the headers: also no cut document
	}
	defer resp.Body.Close()
	if _, err := io.ReadAll(resp.Body); err == nil {
		t.Fatal("a broken transfer read to the end without an error")
	}
}

// sendChunkEnd ends a chunked transfer on reply as the GW does when it
// cannot complete (messages.IsChunkEnd): the transfer's stream, a status
// that is not OK, no index and no data.
func sendChunkEnd(t *testing.T, nc *nats.Conn, reply, stream, why string) {
	t.Helper()
	h := nats.Header{}
	h.Set(messages.HdrChunkStream, stream)
	messages.Errorf(messages.CodeErr, messages.CodeErr, "%s", why).Write(h)
	if !messages.IsChunkEnd(h) {
		t.Fatal("the test's chunk end is not one")
	}
	if err := nc.PublishMsg(&nats.Msg{Subject: reply, Header: h}); err != nil && !errors.Is(err, nats.ErrConnectionClosed) {
		t.Error(err)
	}
}

// A chunked answer that the GW ends broken (a chunk end) before any chunk
// came is answered with the chunk end's status and reason, and the reason is
// logged with the request id.
func TestChunkEndBeforeAnyChunkAnswersItsStatus(t *testing.T) {
	var logs testlog.Buffer
	e := startLogged(t, httpapi.Config{Log: zerolog.New(&logs)})
	const why = "Answer broken after 0 of 7 chunks: the Agg stopped"
	startFakeGW(t, e.nc, func(m *nats.Msg, req messages.Request) { sendChunkEnd(t, e.nc, m.Reply, "t-1", why) })
	resp, b := e.post(t, "/v1/getMeta", `{}`, "X-Request-Id", "r-end-0")
	if resp.StatusCode != httpapi.Status(messages.CodeErr) {
		t.Fatalf("status %d, want %d: %s", resp.StatusCode, httpapi.Status(messages.CodeErr), b)
	}
	r := decode(t, b)
	if r.Header.Status.RC != messages.CodeErr || r.Header.Status.AI != why || r.Header.RequestID != "r-end-0" {
		t.Fatalf("answer header %+v: want rc ERR, ai %q, request id r-end-0", r.Header, why)
	}
	if logs.Line(`"request_id":"r-end-0"`, why) == "" {
		t.Fatalf("no log line names the request and the reason:\n%s", logs.String())
	}
}

// A chunked answer that breaks after some chunks were written aborts the
// HTTP connection (the caller never reads a cut document to its end), and
// the reason is logged with the request id: the GW ended it (a chunk end,
// its ai logged), or its chunks stopped coming for ChunkIdle.
func TestChunkedAnswerBrokenMidTransferAborts(t *testing.T) {
	const why = "Answer broken after 3 of 7 chunks: chunk 4 came, 3 expected: chunks were lost"
	for name, c := range map[string]struct {
		chunks int  // of the 7 sent
		end    bool // then a chunk end
		log    string
	}{
		"chunk end": {chunks: 3, end: true, log: why},
		"stalled":   {chunks: 2, log: "stalled"},
	} {
		t.Run(name, func(t *testing.T) {
			var logs testlog.Buffer
			e := startLogged(t, httpapi.Config{Log: zerolog.New(&logs), ChunkIdle: 300 * time.Millisecond},
				func(o *server.Options) { o.MaxPayload = 16 << 10 })
			startFakeGW(t, e.nc, func(m *nats.Msg, req messages.Request) {
				body, _ := messages.Response{Header: messages.ResponseHeader{V: messages.RequestVersion},
					Payload: []byte(`[` + strings.Repeat(`"x",`, 25<<10) + `"x"]`), Content: messages.ContentJSON}.Encode()
				h := nats.Header{}
				messages.Status{}.Write(h)
				msgs, err := messages.SplitChunksBody(m.Reply, h, messages.Body{body}, 16<<10)
				if err != nil || len(msgs) != 7 {
					t.Errorf("%d chunks, want 7: %v", len(msgs), err)
					return
				}
				for _, chunk := range msgs[:c.chunks] {
					if err := e.nc.PublishMsg(chunk); err != nil {
						t.Error(err)
					}
				}
				if c.end {
					sendChunkEnd(t, e.nc, m.Reply, msgs[0].Header.Get(messages.HdrChunkStream), why)
				}
			})
			req, _ := http.NewRequest(http.MethodPost, e.http.URL+"/v1/getMeta", strings.NewReader(`{}`))
			req.Header.Set("X-Request-Id", "r-broken")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatalf("the status line should be out with chunk 0: %v", err)
			}
			defer resp.Body.Close()
			if resp.StatusCode != 200 {
				t.Fatalf("status %d, want 200 (chunk 0's)", resp.StatusCode)
			}
			if b, err := io.ReadAll(resp.Body); err == nil {
				t.Fatalf("a broken transfer read to the end without an error (%d bytes)", len(b))
			}
			if logs.Line(`"request_id":"r-broken"`, c.log) == "" {
				t.Fatalf("no log line names the request and %q:\n%s", c.log, logs.String())
			}
		})
	}
}

// A caller that goes away cancels its request at the GW, from the inbox the
// request came from (the GW matches the caller by it).
func TestDisconnectCancels(t *testing.T) {
	e := start(t, httpapi.Config{})
	requests := make(chan *nats.Msg, 1)
	g := startFakeGW(t, e.nc, func(m *nats.Msg, req messages.Request) { requests <- m }) // never answers
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, e.http.URL+"/v1/getData", strings.NewReader(`{"table":"trade"}`))
	req.Header.Set("X-Request-Id", "r-1")
	errc := make(chan error, 1)
	go func() {
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		errc <- err
	}()
	var m *nats.Msg
	select {
	case m = <-requests:
	case <-time.After(10 * time.Second):
		t.Fatal("the request never reached the GW")
	}
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("client: %v", err)
	}
	select {
	case c := <-g.cancels:
		if c.Header.Get(messages.HdrRequestID) != "r-1" {
			t.Errorf("cancel for %q, want r-1", c.Header.Get(messages.HdrRequestID))
		}
		if inboxOf(c.Reply) != inboxOf(m.Reply) {
			t.Errorf("cancel from inbox %q, request from %q: the GW could not match the caller", c.Reply, m.Reply)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no cancel reached the GW after the caller went away")
	}
}

func TestHealth(t *testing.T) {
	e := start(t, httpapi.Config{HealthTimeout: 200 * time.Millisecond})
	get := func() (int, httpapi.Health) {
		resp, err := http.Get(e.http.URL + "/v1/health")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var h httpapi.Health
		if err := json.NewDecoder(resp.Body).Decode(&h); err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, h
	}
	// No GW at all: not ready, and it says why.
	if code, h := get(); code != 503 || h.Ready || h.Reason == "" {
		t.Errorf("no GW: %d %+v", code, h)
	}
	reached := make(chan string, 4)
	startFakeGW(t, e.nc, func(m *nats.Msg, req messages.Request) {
		g := &fakeGW{t: t, nc: e.nc}
		g.respond(m.Reply, "", messages.Status{}, []byte(<-reached))
	})
	for _, c := range []struct {
		daps  string
		code  int
		ready bool
	}{
		{`[]`, 503, false},
		{`[{"dap":"d1","reached":false}]`, 503, false},
		{`[{"dap":"d1","reached":false},{"dap":"d2","reached":true}]`, 200, true},
	} {
		reached <- c.daps
		if code, h := get(); code != c.code || h.Ready != c.ready {
			t.Errorf("ping answer %s: %d %+v, want %d ready=%v", c.daps, code, h, c.code, c.ready)
		}
	}
}

// TestHealthGatewayNotReady: with the readiness of a GW in the same
// process, /v1/health is 503 with the GW's reason at once while it is not
// ready (no ping: the GW would hold it), and pings once it is.
func TestHealthGatewayNotReady(t *testing.T) {
	var ready atomic.Bool
	e := start(t, httpapi.Config{HealthTimeout: 5 * time.Second, GatewayReady: func() (bool, string) {
		return ready.Load(), "no RC known"
	}})
	pinged := make(chan struct{}, 4)
	startFakeGW(t, e.nc, func(m *nats.Msg, req messages.Request) {
		pinged <- struct{}{}
		g := &fakeGW{t: t, nc: e.nc}
		g.respond(m.Reply, "", messages.Status{}, []byte(`[{"dap":"d1","reached":true}]`))
	})
	get := func() (int, httpapi.Health) {
		resp, err := http.Get(e.http.URL + "/v1/health")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var h httpapi.Health
		if err := json.NewDecoder(resp.Body).Decode(&h); err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, h
	}
	if code, h := get(); code != 503 || h.Ready || !strings.Contains(h.Reason, "gateway is not ready: no RC known") {
		t.Errorf("GW not ready: %d %+v", code, h)
	}
	select {
	case <-pinged:
		t.Error("pinged a GW that is not ready")
	default:
	}
	ready.Store(true)
	if code, h := get(); code != 200 || !h.Ready {
		t.Errorf("GW ready: %d %+v", code, h)
	}
}

func TestOpenAPIDocument(t *testing.T) {
	e := start(t, httpapi.Config{})
	resp, err := http.Get(e.http.URL + "/v1/openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var doc struct {
		OpenAPI string `json:"openapi"`
		Paths   map[string]struct {
			Post *struct {
				Parameters []struct {
					Name   string `json:"name"`
					Schema struct {
						Enum []string `json:"enum"`
					} `json:"schema"`
				} `json:"parameters"`
			} `json:"post"`
		} `json:"paths"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&doc); err != nil {
		t.Fatalf("openapi.json is not JSON: %v", err)
	}
	if !strings.HasPrefix(doc.OpenAPI, "3.") {
		t.Errorf("openapi %q", doc.OpenAPI)
	}
	for _, p := range []string{"/v1/{api}", "/v1/health", "/v1/openapi.json"} {
		if _, ok := doc.Paths[p]; !ok {
			t.Errorf("path %s missing", p)
		}
	}
	// The document lists exactly the APIs sg serves.
	post := doc.Paths["/v1/{api}"].Post
	if post == nil || len(post.Parameters) == 0 || strings.Join(post.Parameters[0].Schema.Enum, ",") != strings.Join(subjects.APIs, ",") {
		t.Errorf("api enum %+v, want %v", post, subjects.APIs)
	}
}

// The README's HTTP table is the one Status uses.
func TestReadmeStatusTable(t *testing.T) {
	b, err := os.ReadFile("../../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	const begin, end = "<!-- http-status:begin (generated from httpapi.StatusMarkdown; a test keeps it true) -->\n", "<!-- http-status:end -->"
	s := string(b)
	i, j := strings.Index(s, begin), strings.Index(s, end)
	if i < 0 || j < i {
		t.Fatalf("README.md has no http-status table between %q and %q", begin, end)
	}
	if got, want := s[i+len(begin):j], httpapi.StatusMarkdown(); got != want {
		t.Errorf("README's HTTP table is out of date; want:\n%s", want)
	}
}

func inboxOf(reply string) string { return reply[:strings.LastIndexByte(reply, '.')] }

func itoa(i int) string { b, _ := json.Marshal(i); return string(b) }

func truncate(s string) string {
	if len(s) > 20 {
		return s[:20] + "..."
	}
	return s
}

// sendFrames answers m with an answer stream of JSON frames: frame 0 an
// envelope whose payload is windows[0], then one frame per other window;
// edit may change a frame's headers before it goes.
func sendFrames(t *testing.T, nc *nats.Conn, m *nats.Msg, windows [][]byte, edit func(seq int, h nats.Header)) {
	t.Helper()
	for seq, w := range windows {
		h := nats.Header{}
		messages.Status{}.Write(h)
		messages.SetStreamFrame(h, "s1", seq, seq == len(windows)-1)
		data := w
		if seq == 0 {
			var err error
			data, err = messages.Response{Header: messages.ResponseHeader{V: messages.RequestVersion, RequestID: "r"},
				Payload: w, Content: messages.ContentJSON}.Encode()
			if err != nil {
				t.Error(err)
				return
			}
		}
		if edit != nil {
			edit(seq, h)
		}
		// The caller may have gone (an aborted transfer) and the test ended.
		if err := nc.PublishMsg(&nats.Msg{Subject: m.Reply, Header: h, Data: data}); err != nil && !errors.Is(err, nats.ErrConnectionClosed) {
			t.Error(err)
		}
	}
}

// getData asks the GW for an answer stream, and a stream of frames reaches
// the HTTP caller as the one JSON envelope a whole answer would be, with
// chunked transfer encoding.
func TestAnswerStreamIsWrittenAsOneDocument(t *testing.T) {
	e := start(t, httpapi.Config{})
	var rows []map[string]any
	var windows [][]byte
	for w := range 5 {
		var win []map[string]any
		for i := range w * 300 { // window 0 is empty: a stream may begin so
			win = append(win, map[string]any{"i": len(rows) + i, "sym": "SYM" + itoa(i%97)})
		}
		rows = append(rows, win...)
		b, _ := json.Marshal(win)
		if win == nil {
			b = []byte("[]")
		}
		windows = append(windows, b)
	}
	asked := make(chan string, 1)
	startFakeGW(t, e.nc, func(m *nats.Msg, req messages.Request) {
		asked <- m.Header.Get(messages.HdrAcceptStream)
		sendFrames(t, e.nc, m, windows, nil)
	})
	resp, b := e.post(t, "/v1/getData", `{"table":"trade"}`)
	if got := <-asked; got != "1" {
		t.Fatalf("getData asked the GW with %s=%q, want 1", messages.HdrAcceptStream, got)
	}
	if resp.StatusCode != 200 || len(resp.TransferEncoding) == 0 || resp.TransferEncoding[0] != "chunked" {
		t.Fatalf("status %d, transfer encoding %v: want 200, chunked", resp.StatusCode, resp.TransferEncoding)
	}
	r := decode(t, b)
	want, _ := json.Marshal(rows)
	if !bytes.Equal(r.Payload, want) {
		t.Fatalf("payload of %d bytes differs from the %d bytes of rows sent", len(r.Payload), len(want))
	}
}

// A stream that breaks after the status line is out (an error frame, a lost
// frame) aborts the HTTP transfer: the caller never reads a cut document
// to its end.
func TestBrokenAnswerStreamAborts(t *testing.T) {
	for name, edit := range map[string]func(seq int, h nats.Header){
		"error frame": func(seq int, h nats.Header) {
			if seq == 2 {
				messages.Errorf(messages.CodeErr, messages.CodeErr, "Answer stream broken after 2 frames").Write(h)
			}
		},
		"lost frame": func(seq int, h nats.Header) {
			if seq >= 2 {
				messages.SetStreamFrame(h, "s1", seq+1, seq == 3)
			}
		},
		"another stream": func(seq int, h nats.Header) {
			if seq == 3 {
				messages.SetStreamFrame(h, "s2", seq, true)
			}
		},
	} {
		t.Run(name, func(t *testing.T) {
			e := start(t, httpapi.Config{})
			windows := [][]byte{[]byte(`[{"i":0}]`), []byte(`[{"i":1}]`), []byte(`[{"i":2}]`), []byte(`[{"i":3}]`)}
			startFakeGW(t, e.nc, func(m *nats.Msg, req messages.Request) { sendFrames(t, e.nc, m, windows, edit) })
			req, _ := http.NewRequest(http.MethodPost, e.http.URL+"/v1/getData", strings.NewReader(`{}`))
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				return // aborted before the headers: also no cut document
			}
			defer resp.Body.Close()
			if b, err := io.ReadAll(resp.Body); err == nil {
				t.Fatalf("a broken stream read to the end without an error: %q", b)
			}
		})
	}
}

// A caller that does not read its answer costs only its own request: the
// adapter's one subscription callback never waits for it, so another
// request's answer, behind the slow one's on the inbox, is written at once,
// and the slow transfer ends with an error logged with its request id once
// more of it waited than the backlog allows.
func TestSlowReaderCostsOnlyItsOwnRequest(t *testing.T) {
	var logs testlog.Buffer
	e := startLogged(t, httpapi.Config{Log: zerolog.New(&logs), MaxBacklogBytes: 2 << 20})
	// More than the sockets between the adapter and the caller hold, and
	// than the backlog: the slow caller's handler is stuck writing.
	slow, _ := slowAnswer(t, e, func(m *nats.Msg, _ [][]byte) {
		(&fakeGW{t: t, nc: e.nc}).respond(m.Reply, "fast", messages.StatusOK, []byte(`[]`))
	})
	defer slow.Body.Close()

	fast := make(chan error, 1)
	go func() {
		req, _ := http.NewRequest(http.MethodPost, e.http.URL+"/v1/ping", strings.NewReader(`{}`))
		req.Header.Set("X-Request-Id", "fast")
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			_, err = io.ReadAll(resp.Body)
			resp.Body.Close()
			if err == nil && resp.StatusCode != 200 {
				err = errors.New(resp.Status)
			}
		}
		fast <- err
	}()
	// ChunkIdle (30 s) is how long the callback waited for the slow reader.
	select {
	case err := <-fast:
		if err != nil {
			t.Fatalf("the other request: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the other request's answer waited behind the slow reader's")
	}
	// Cut past its backlog: an aborted transfer, or, when the backlog
	// overflowed before the handler took frame 0, an error status.
	if b, err := io.ReadAll(slow.Body); err == nil && (slow.StatusCode == 200 || decode(t, b).Header.Status.IsOK()) {
		t.Errorf("the slow reader's answer, cut past its backlog, read to the end without an error: status %d", slow.StatusCode)
	}
	if logs.Line(`"request_id":"slow"`, "too slow") == "" {
		t.Errorf("no log line names the slow request; logs:\n%s", truncate(logs.String()))
	}
}

// A frame 0 that the JSON stream writer refuses (not a response envelope)
// is answered with an error status and envelope: nothing was written yet,
// so the caller gets a clear answer rather than a connection aborted after
// a 200 status line.
func TestBadFirstFrameAnswersAStatus(t *testing.T) {
	e := start(t, httpapi.Config{})
	startFakeGW(t, e.nc, func(m *nats.Msg, req messages.Request) {
		h := nats.Header{}
		messages.Status{}.Write(h)
		messages.SetStreamFrame(h, "s1", 0, false)
		if err := e.nc.PublishMsg(&nats.Msg{Subject: m.Reply, Header: h, Data: []byte(`[{"i":0}]`)}); err != nil {
			t.Error(err)
		}
	})
	resp, b := e.post(t, "/v1/getData", `{}`)
	if resp.StatusCode != http.StatusInternalServerError {
		t.Fatalf("status %d, want 500", resp.StatusCode)
	}
	if r := decode(t, b); r.Header.Status.IsOK() || !strings.Contains(r.Header.AI, "frame 0") {
		t.Fatalf("answer %+v, want an error naming frame 0", r.Header.Status)
	}
}

// signalLog is a log sink that closes hit once a line containing want is
// written.
type signalLog struct {
	testlog.Buffer
	want string
	hit  chan struct{}
	once sync.Once
}

// Write keeps the line before it signals: a test woken by hit reads the
// buffer at once, and must find the line that woke it there.
func (l *signalLog) Write(p []byte) (int, error) {
	n, err := l.Buffer.Write(p)
	if bytes.Contains(p, []byte(l.want)) {
		l.once.Do(func() { close(l.hit) })
	}
	return n, err
}

// A caller that stops taking its answer fails its own transfer after
// ChunkIdle without a byte taken: the handler does not wait on its
// connection forever, and the transfer is aborted, never cut to look whole.
func TestStalledReaderFailsAfterChunkIdle(t *testing.T) {
	logs := &signalLog{want: "aborting the HTTP transfer", hit: make(chan struct{})}
	e := startLogged(t, httpapi.Config{Log: zerolog.New(logs).Level(zerolog.WarnLevel), ChunkIdle: 300 * time.Millisecond})
	window := []byte(`[` + strings.Repeat(`{"i":1},`, 16<<10) + `{"i":0}]`)
	windows := make([][]byte, 200)
	for i := range windows {
		windows[i] = window
	}
	startFakeGW(t, e.nc, func(m *nats.Msg, req messages.Request) { sendFrames(t, e.nc, m, windows, nil) })
	resp := postSmallReadBuffer(t, e.http.URL, "stalled")
	defer resp.Body.Close()
	select {
	case <-logs.hit:
	case <-time.After(10 * time.Second):
		t.Fatalf("the handler of a caller that reads nothing did not give up; logs:\n%s", truncate(logs.String()))
	}
	if line := logs.Line(`"request_id":"stalled"`, "aborting"); line == "" {
		t.Errorf("no line says the stalled transfer was aborted; logs:\n%s", truncate(logs.String()))
	}
	if _, err := io.ReadAll(resp.Body); err == nil {
		t.Error("a transfer whose caller stalled read to the end without an error")
	}
}

// A caller that reads slowly but steadily is never cut off, however large a
// frame: the write bound is on progress (each piece of a frame taken within
// ChunkIdle), not on a whole frame. Here the first frame takes about 4 s to
// be read at the caller's pace, twice ChunkIdle (2 s); both ends' socket
// buffers are small, so the frame waits on the caller. ChunkIdle is also how
// long the reading goroutine may go unscheduled on a loaded machine before
// the transfer is rightly cut: at 200 ms that happened under -race with the
// other packages' tests beside it (1 run in 40 with two busy loops), and at
// 1 s still 1 run in 30 beside the whole race suite (an i/o timeout in the
// middle of a frame after 3 s on pace). One large frame instead of two
// frames of ChunkIdle's length keeps the test at 4 s for the wider bound.
func TestSlowSteadyReaderIsNotCutOff(t *testing.T) {
	logs := &signalLog{want: "aborting the HTTP transfer", hit: make(chan struct{})}
	srv := natstest.Start(t, func(o *server.Options) { o.MaxPayload = 4 << 20 }) // for the 1.6 MiB frame
	nc := natstest.Connect(t, srv)
	a, err := httpapi.New(natstest.Connect(t, srv), httpapi.Config{Log: zerolog.New(logs).Level(zerolog.WarnLevel), ChunkIdle: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Close() })
	hs := httptest.NewUnstartedServer(a.Handler())
	hs.Config.ConnState = func(c net.Conn, s http.ConnState) {
		if tc, ok := c.(*net.TCPConn); ok && s == http.StateNew {
			_ = tc.SetWriteBuffer(32 << 10)
		}
	}
	hs.Start()
	t.Cleanup(hs.Close)
	window := []byte(`[` + strings.Repeat(`{"i":1},`, 200<<10) + `{"i":0}]`) // 1.6 MiB
	windows := [][]byte{window, []byte(`[{"i":2}]`)}
	startFakeGW(t, nc, func(m *nats.Msg, req messages.Request) { sendFrames(t, nc, m, windows, nil) })
	resp := postSmallReadBuffer(t, hs.URL, "steady")
	defer resp.Body.Close()
	// 8 KiB every 20 ms: about 400 KB/s, never idle for long.
	var body bytes.Buffer
	pace := time.NewTicker(20 * time.Millisecond)
	defer pace.Stop()
	buf := make([]byte, 8<<10)
	for {
		n, err := io.ReadFull(resp.Body, buf)
		body.Write(buf[:n])
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			break
		}
		if err != nil {
			t.Fatalf("after %d bytes: %v; logs:\n%s", body.Len(), err, truncate(logs.String()))
		}
		<-pace.C
	}
	if line := logs.Line(`"request_id":"steady"`, "aborting"); line != "" {
		t.Fatalf("a steady reader's transfer was aborted: %s", line)
	}
	if !json.Valid(body.Bytes()) || body.Len() < len(window)+len(windows[1]) {
		t.Fatalf("a steady reader got %d bytes (valid JSON: %v), want the whole envelope of frames of %d and %d bytes; logs:\n%s",
			body.Len(), json.Valid(body.Bytes()), len(window), len(windows[1]), truncate(logs.String()))
	}
}

// postSmallReadBuffer posts a getData as request id on a connection of its
// own whose socket takes little (a fixed 64 KiB receive buffer: no autotuning
// to tens of MiB), so that an answer cannot hide in it; the caller reads and
// closes the body.
func postSmallReadBuffer(t *testing.T, url, id string) *http.Response {
	t.Helper()
	tr := &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetReadBuffer(64 << 10)
		}
		return c, err
	}}
	t.Cleanup(tr.CloseIdleConnections)
	req, _ := http.NewRequest(http.MethodPost, url+"/v1/getData", strings.NewReader(`{}`))
	req.Header.Set("X-Request-Id", id)
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// What every answer together holds in the adapter is bounded too
// (MaxBacklogTotal): past it the answer holding the most ends with an error
// logged with its request id, though it is within its own bound, and other
// answers go on.
func TestBacklogsTogetherAreBounded(t *testing.T) {
	var logs testlog.Buffer
	e := startLogged(t, httpapi.Config{Log: zerolog.New(&logs), MaxBacklogBytes: 64 << 20, MaxBacklogTotal: 4 << 20})
	// The slow answer, 25 MiB, is within its own bound, not within the total.
	slow, window := slowAnswer(t, e, func(m *nats.Msg, windows [][]byte) {
		sendFrames(t, e.nc, m, windows[:8], nil) // 1 MiB, read as it comes
	})
	defer slow.Body.Close()
	resp, b := e.post(t, "/v1/getData", `{}`, "X-Request-Id", "steady")
	if resp.StatusCode != http.StatusOK || !json.Valid(b) || len(b) < 8*len(window) {
		t.Fatalf("the other request: status %d, %d bytes (valid JSON %v)", resp.StatusCode, len(b), json.Valid(b))
	}
	if b, err := io.ReadAll(slow.Body); err == nil && (slow.StatusCode == 200 || decode(t, b).Header.Status.IsOK()) {
		t.Errorf("the answer holding the most, past the adapter's total, read to the end without an error: status %d", slow.StatusCode)
	}
	if logs.Line(`"request_id":"slow"`, "backlog was full") == "" {
		t.Errorf("no log line names the slow request; logs:\n%s", truncate(logs.String()))
	}
}

// slowAnswer starts a fake GW that answers request "slow" with a stream of
// 200 windows of 128 KiB (25 MiB, more than the sockets between the adapter
// and a caller hold) and every other request with other, then posts "slow"
// through postSmallReadBuffer and waits until its whole answer was sent. The
// caller reads (or not) and closes the body; window is one window's bytes.
func slowAnswer(t *testing.T, e *env, other func(m *nats.Msg, windows [][]byte)) (slow *http.Response, window []byte) {
	t.Helper()
	window = []byte(`[` + strings.Repeat(`{"i":1},`, 16<<10) + `{"i":0}]`)
	windows := make([][]byte, 200)
	for i := range windows {
		windows[i] = window
	}
	sent := make(chan struct{})
	startFakeGW(t, e.nc, func(m *nats.Msg, req messages.Request) {
		if m.Header.Get(messages.HdrRequestID) != "slow" {
			other(m, windows)
			return
		}
		sendFrames(t, e.nc, m, windows, nil)
		if err := e.nc.Flush(); err != nil {
			t.Error(err)
		}
		close(sent)
	})
	slow = postSmallReadBuffer(t, e.http.URL, "slow")
	select {
	case <-sent:
	case <-time.After(10 * time.Second):
		t.Fatal("the slow request's answer was not sent")
	}
	return slow, window
}
