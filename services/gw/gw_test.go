package gw_test

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"github.com/sg-project/sg/messages"
	"github.com/sg-project/sg/services/gw"
	"github.com/sg-project/sg/services/gw/client"
	"github.com/sg-project/sg/subjects"
	"github.com/sg-project/sg/test/natstest"
	"github.com/sg-project/sg/test/promtest"
	"github.com/vmihailenco/msgpack/v5"
)

const wait = 10 * time.Second // bound on every wait for an event

func startNATS(t *testing.T) *nats.Conn {
	t.Helper()
	return natstest.Connect(t, natstest.Start(t))
}

type env struct {
	t   *testing.T
	nc  *nats.Conn
	s   subjects.Subjects
	gw  *gw.GW
	reg *prometheus.Registry
	cl  *client.Client
}

// startGW starts a GW with small durations; mod adjusts its config.
func startGW(t *testing.T, mod func(*gw.Config)) *env {
	t.Helper()
	return startGWHooked(t, mod, nil)
}

// startGWHooked is startGW with hook called on the GW before it runs.
func startGWHooked(t *testing.T, mod func(*gw.Config), hook func(*gw.GW)) *env {
	t.Helper()
	nc := startNATS(t)
	s := subjects.Default()
	reg := prometheus.NewRegistry()
	cfg := gw.Config{ID: "gw1", NC: nc, Subjects: s, Log: zerolog.New(zerolog.NewTestWriter(t)),
		Timeout: 5 * time.Second, TimeoutMargin: 5 * time.Second, StartupWait: -1, Registry: reg}
	if mod != nil {
		mod(&cfg)
	}
	g, err := gw.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if hook != nil {
		hook(g)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- g.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(wait):
			t.Error("GW did not stop")
		}
	})
	select {
	case <-g.Ready():
	case err := <-done:
		t.Fatalf("Run: %v", err)
	case <-time.After(wait):
		t.Fatal("GW not ready")
	}
	return &env{t: t, nc: nc, s: s, gw: g, reg: reg, cl: client.New(nc, s)}
}

// fakeRC announces itself and hands every submission to answer.
func (e *env) fakeRC(id, assembly string, answer func(sub messages.RCSubmission)) {
	e.t.Helper()
	sub, err := e.nc.Subscribe(e.s.RCSubmit(id), func(m *nats.Msg) {
		s, err := messages.DecodeValid[messages.RCSubmission](m.Data)
		if err != nil {
			e.t.Errorf("fake RC %s: bad submission: %v", id, err)
			return
		}
		answer(s)
	})
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { _ = sub.Unsubscribe() })
	ann, _ := messages.Encode(&messages.RCAnnouncement{V: messages.RCVersion, RCID: id, Assembly: assembly, StartedAt: 1})
	if err := e.nc.Publish(e.s.RCAnnounce(id), ann); err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if err := e.gw.WaitRCs(ctx, func(rcs []gw.RCInfo) bool {
		for _, rc := range rcs {
			if rc.ID == id {
				return true
			}
		}
		return false
	}); err != nil {
		e.t.Fatalf("GW never saw RC %s: %v", id, err)
	}
}

// reply answers a submission with st and v encoded in the client's encoding.
func (e *env) reply(s messages.RCSubmission, st messages.Status, v any) {
	var payload []byte
	var err error
	if v != nil {
		if s.Content == messages.ContentJSON {
			payload, err = json.Marshal(v)
		} else {
			payload, err = msgpack.Marshal(v)
		}
		if err != nil {
			e.t.Error(err)
			return
		}
	}
	resp := messages.Response{Header: messages.ResponseHeader{V: 1, RequestID: s.RequestID, API: s.Header.API, Status: st},
		Payload: payload, Content: s.Content}
	body, err := resp.Encode()
	if err != nil {
		e.t.Error(err)
		return
	}
	h := nats.Header{}
	st.Write(h)
	h.Set(messages.HdrRequestID, s.RequestID)
	h.Set(messages.HdrContentType, string(s.Content))
	if _, err := messages.SendChunked(e.nc, s.ReplyTo, h, body, 0); err != nil {
		e.t.Error(err)
	}
}

// raw sends bytes to an API subject and returns the answer.
func (e *env) raw(api string, h nats.Header, body []byte) messages.Response {
	e.t.Helper()
	m, err := e.nc.RequestMsg(&nats.Msg{Subject: e.s.GWAPI(api), Header: h, Data: body}, wait)
	if err != nil {
		e.t.Fatalf("request %s: %v", api, err)
	}
	r, err := messages.DecodeResponse(m.Header, m.Data)
	if err != nil {
		e.t.Fatalf("decode answer %q: %v", m.Data, err)
	}
	hs, err := messages.ReadStatus(m.Header)
	if err != nil || hs != r.Header.Status {
		e.t.Errorf("header status %v (%v) differs from envelope status %v", hs, err, r.Header.Status)
	}
	return r
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	t.Cleanup(cancel)
	return ctx
}

// echoTable answers getData with the table name and the assembly it saw.
func (e *env) echo(rcID string) func(messages.RCSubmission) {
	return func(s messages.RCSubmission) {
		out := map[string]string{"rc": rcID, "api": s.Header.API, "assembly": s.Header.Scope.Assembly}
		if s.Header.API == subjects.APIGetData {
			a, err := s.Arguments().GetData()
			if err != nil {
				e.t.Errorf("RC got undecodable getData args: %v", err)
			}
			out["table"] = a.Table
		}
		e.reply(s, messages.StatusOK, out)
	}
}

func TestRoundTripMsgpackAndJSON(t *testing.T) {
	e := startGW(t, nil)
	e.fakeRC("rc1", "", e.echo("rc1"))

	r, err := e.cl.Do(ctxT(t), subjects.APIGetData, messages.GetDataArgs{Table: "trade"}, messages.Opts{LogCorr: "corr-1"})
	if err != nil {
		t.Fatal(err)
	}
	if !r.Header.Status.IsOK() || r.Content != messages.ContentMsgpack {
		t.Fatalf("msgpack answer: %+v", r.Header)
	}
	var got map[string]string
	if err := msgpack.Unmarshal(r.Payload, &got); err != nil || got["table"] != "trade" || got["rc"] != "rc1" {
		t.Fatalf("msgpack payload %v (%v)", got, err)
	}

	raw, err := e.cl.DoJSON(ctxT(t), subjects.APIGetData, []byte(`{"table":"quote","scope":{}}`), messages.Opts{})
	if err != nil {
		t.Fatal(err)
	}
	var env struct {
		Header  messages.ResponseHeader `json:"header"`
		Payload map[string]string       `json:"payload"`
	}
	if err := json.Unmarshal(raw, &env); err != nil {
		t.Fatalf("JSON answer %s: %v", raw, err)
	}
	if !env.Header.Status.IsOK() || env.Payload["table"] != "quote" || env.Header.RequestID == "" {
		t.Fatalf("JSON answer %s", raw)
	}

	// A client-given request id is kept.
	h := nats.Header{}
	h.Set(messages.HdrRequestID, "my-id-1")
	resp := e.raw(subjects.APIPing, h, []byte(`{"header":{"api":"ping"},"payload":{"labels":{"region":"eu"}}}`))
	if !resp.Header.Status.IsOK() || resp.Header.RequestID != "my-id-1" {
		t.Fatalf("ping answer %+v", resp.Header)
	}
}

func TestBadInputs(t *testing.T) {
	e := startGW(t, func(c *gw.Config) { c.MaxRequestBytes = 4096 })
	e.fakeRC("rc1", "", e.echo("rc1"))
	jsonHdr := nats.Header{messages.HdrContentType: {"json"}}
	mpHdr := nats.Header{messages.HdrContentType: {"msgpack"}}
	big := `{"header":{"api":"getData"},"payload":{"table":"` + strings.Repeat("x", 5000) + `"}}`
	for _, tc := range []struct {
		name string
		api  string
		h    nats.Header
		body string
		code messages.Code
		ai   string
	}{
		{"unknown api", "getData", nil, `{"header":{"api":"nope"},"payload":{}}`, messages.CodeUnknownAPI, `Unknown API "nope"`},
		{"api mismatch", "ping", nil, `{"header":{"api":"getData"},"payload":{"table":"t"}}`, messages.CodeBadRequest, "sent to the ping endpoint"},
		{"malformed json", "getData", nil, `{"header":{"api":"getData"`, messages.CodeBadRequest, "Malformed request"},
		{"malformed msgpack", "getData", mpHdr, "\xc1\xc1\xc1", messages.CodeBadRequest, "Malformed request"},
		{"msgpack truncated", "getData", mpHdr, "\x82\xa6header", messages.CodeBadRequest, "Malformed request"},
		{"empty body", "getData", nil, "", messages.CodeBadRequest, "empty body"},
		{"bad content type", "getData", nats.Header{messages.HdrContentType: {"xml"}}, `{}`, messages.CodeBadRequest, "Sg-Content-Type"},
		{"missing table", "getData", jsonHdr, `{"header":{"api":"getData"},"payload":{"startTS":"2024-01-01T00:00:00Z"}}`, messages.CodeBadRequest, "table is required"},
		{"end before start", "getData", nil, `{"header":{"api":"getData"},"payload":{"table":"t","startTS":"2024-01-02T00:00:00Z","endTS":"2024-01-01T00:00:00Z"}}`, messages.CodeBadRequest, "must be after startTS"},
		{"bad filter", "getData", nil, `{"header":{"api":"getData"},"payload":{"table":"t","filter":[["=","x"]]}}`, messages.CodeBadRequest, "filter 0"},
		{"no args", "getData", nil, `{"header":{"api":"getData"}}`, messages.CodeBadRequest, "getData needs arguments"},
		{"bad ping labels", "ping", nil, `{"header":{"api":"ping"},"payload":{"labels":{"region":5}}}`, messages.CodeBadRequest, "Bad ping arguments"},
		{"getMeta args", "getMeta", nil, `{"header":{"api":"getMeta"},"payload":{"x":1}}`, messages.CodeBadRequest, "getMeta takes no arguments"},
		{"sql without query", "sql", nil, `{"header":{"api":"sql"},"payload":{"query":" "}}`, messages.CodeBadRequest, "query is empty"},
		{"async", "getData", nil, `{"header":{"api":"getData","opts":{"async":true}},"payload":{"table":"t"}}`, messages.CodeNotSupported, "async"},
		{"bad scope", "getData", nil, `{"header":{"api":"getData"},"payload":{"table":"t","scope":{"assembly":"a.b"}}}`, messages.CodeBadRequest, "scope.assembly"},
		{"bad request id", "getData", nats.Header{messages.HdrRequestID: {"a.b"}}, `{"header":{"api":"getData"},"payload":{"table":"t"}}`, messages.CodeBadRequest, "Sg-Request-Id"},
		{"newer version", "getData", nil, `{"header":{"v":9,"api":"getData"},"payload":{"table":"t"}}`, messages.CodeNotSupported, "v9"},
		{"oversized", "getData", nil, big, messages.CodeTooLarge, "above the limit of 4096 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := e.raw(tc.api, tc.h, []byte(tc.body))
			st := r.Header.Status
			if st.RC != tc.code || st.AC != messages.CodeErr || !strings.Contains(st.AI, tc.ai) {
				t.Fatalf("got %v, want rc=%v with ai containing %q", st, tc.code, tc.ai)
			}
			if r.Header.RequestID == "" {
				t.Error("error answer without a request id")
			}
		})
	}
	// Still serving, in both encodings.
	if r := e.raw(subjects.APIGetData, nil, []byte(`{"header":{"api":"getData"},"payload":{"table":"t"}}`)); !r.Header.Status.IsOK() {
		t.Fatalf("after bad inputs: %v", r.Header.Status)
	}
	if r, err := e.cl.Do(ctxT(t), subjects.APIGetMeta, nil, messages.Opts{}); err != nil || !r.Header.Status.IsOK() {
		t.Fatalf("after bad inputs: %v %v", r.Header.Status, err)
	}
}

func TestNoRC(t *testing.T) {
	e := startGW(t, nil)
	r, err := e.cl.Do(ctxT(t), subjects.APIGetData, map[string]any{"table": "trade"}, messages.Opts{})
	if err != nil {
		t.Fatal(err)
	}
	if st := r.Header.Status; st.RC != messages.CodeNoResources || st.AI != "No resources connected" {
		t.Fatalf("got %v", st)
	}
}

func TestStartupWaitForFirstRC(t *testing.T) {
	e := startGW(t, func(c *gw.Config) { c.StartupWait = time.Minute })
	got := make(chan messages.Response, 1)
	go func() {
		r, err := e.cl.Do(ctxT(t), subjects.APIGetData, map[string]any{"table": "trade"}, messages.Opts{})
		if err != nil {
			t.Error(err)
		}
		got <- r
	}()
	e.fakeRC("late", "", e.echo("late")) // announces after the request was sent (or around it)
	select {
	case r := <-got:
		if !r.Header.Status.IsOK() {
			t.Fatalf("got %v", r.Header.Status)
		}
	case <-time.After(wait):
		t.Fatal("no answer")
	}
}

func rcOf(t *testing.T, r messages.Response) string {
	t.Helper()
	if !r.Header.Status.IsOK() {
		return r.Header.Status.AI
	}
	var m map[string]string
	if err := msgpack.Unmarshal(r.Payload, &m); err != nil {
		t.Fatal(err)
	}
	return m["rc"]
}

func TestAffinity(t *testing.T) {
	for _, tc := range []struct {
		affinity            string
		eu, us, none, usRaw string
	}{
		{gw.AffinityHard, "asm-eu", gw.TextNoResources, "global", gw.TextNoResources},
		{gw.AffinitySoft, "asm-eu", "global", "global", "global"},
	} {
		t.Run(tc.affinity, func(t *testing.T) {
			e := startGW(t, func(c *gw.Config) { c.Affinity = tc.affinity })
			e.fakeRC("global", "", e.echo("global"))
			e.fakeRC("asm-eu", "eu", e.echo("asm-eu"))
			do := func(args any, scope messages.Scope) string {
				r, err := e.cl.DoRequest(ctxT(t), messages.RequestHeader{API: subjects.APIGetData, Scope: scope}, args)
				if err != nil {
					t.Fatal(err)
				}
				return rcOf(t, r)
			}
			if got := do(messages.GetDataArgs{Table: "t"}, messages.Scope{Assembly: "eu"}); got != tc.eu {
				t.Errorf("scope eu -> %q, want %q", got, tc.eu)
			}
			if got := do(messages.GetDataArgs{Table: "t"}, messages.Scope{Assembly: "us"}); got != tc.us {
				t.Errorf("scope us -> %q, want %q", got, tc.us)
			}
			if got := do(messages.GetDataArgs{Table: "t"}, messages.Scope{}); got != tc.none {
				t.Errorf("no scope -> %q, want %q", got, tc.none)
			}
			// The seed's form: scope inside the JSON arguments.
			if got := do(`{"table":"t","scope":{"assembly":"us"}}`, messages.Scope{}); got != tc.usRaw {
				t.Errorf("JSON scope us -> %q, want %q", got, tc.usRaw)
			}
		})
	}
}

func TestGWTimeout(t *testing.T) {
	e := startGW(t, func(c *gw.Config) { c.TimeoutMargin = 50 * time.Millisecond })
	submitted := make(chan messages.RCSubmission, 1)
	e.fakeRC("silent", "", func(s messages.RCSubmission) { submitted <- s })
	start := time.Now()
	r, err := e.cl.Do(ctxT(t), subjects.APIGetData, messages.GetDataArgs{Table: "t"}, messages.Opts{TimeoutMS: 100})
	if err != nil {
		t.Fatal(err)
	}
	st := r.Header.Status
	if st.RC != messages.CodeTimeout || uint16(st.RC) != 45 || st.AC != messages.CodeErr || st.AI != "Request was timed out by the service gateway" {
		t.Fatalf("got %v", st)
	}
	if el := time.Since(start); el < 150*time.Millisecond {
		t.Fatalf("timed out after %s, before deadline+margin", el)
	}
	s := natstest.Receive(t, submitted, "submission", wait)
	if d := time.Duration(s.Deadline - s.ReceivedAt); d != 100*time.Millisecond {
		t.Fatalf("submission deadline %s after receipt, want 100ms", d)
	}
	// A late answer from the RC is dropped, not sent.
	e.reply(s, messages.StatusOK, "late")
}

func TestDuplicateAnswers(t *testing.T) {
	e := startGW(t, nil)
	e.fakeRC("dup", "", func(s messages.RCSubmission) {
		a, _ := s.Arguments().GetData()
		e.reply(s, messages.StatusOK, "first-"+a.Table)
		if a.Table == "t1" {
			e.reply(s, messages.StatusOK, "second-"+a.Table)
		}
	})
	inbox := nats.NewInbox()
	sub, err := e.nc.SubscribeSync(inbox)
	if err != nil {
		t.Fatal(err)
	}
	send := func(id string) {
		h := nats.Header{messages.HdrRequestID: {id}}
		table := "t" + id[len(id)-1:]
		if err := e.nc.PublishMsg(&nats.Msg{Subject: e.s.GWAPI("getData"), Reply: inbox, Header: h,
			Data: []byte(`{"header":{"api":"getData"},"payload":{"table":"` + table + `"}}`)}); err != nil {
			t.Fatal(err)
		}
	}
	next := func() string {
		m, err := sub.NextMsg(wait)
		if err != nil {
			t.Fatal(err)
		}
		r, err := messages.DecodeResponse(m.Header, m.Data)
		if err != nil {
			t.Fatal(err)
		}
		var s string
		_ = json.Unmarshal(r.Payload, &s)
		return s
	}
	send("req-1")
	if got := next(); got != "first-t1" {
		t.Fatalf("first answer %q", got)
	}
	// The duplicate reached the GW before the answer to req-2 (one publisher,
	// one subscription: NATS keeps the order), so if it were forwarded it
	// would come next.
	send("req-2")
	if got := next(); got != "first-t2" {
		t.Fatalf("after req-2 got %q: duplicate forwarded?", got)
	}
	if n := promtest.Sum(t, e.reg, "sg_gw_answers_dropped_total", nil); n != 1 {
		t.Fatalf("dropped answers %v, want 1", n)
	}
}

func TestLargeAnswerThroughChunks(t *testing.T) {
	e := startGW(t, nil)
	big := make([]byte, 5<<20)
	for i := range big {
		big[i] = byte(i*7 + i>>11)
	}
	e.fakeRC("bulk", "", func(s messages.RCSubmission) { e.reply(s, messages.StatusOK, big) })
	if mp := e.nc.MaxPayload(); int64(len(big)) < 4*mp {
		t.Fatalf("answer %d not well above max payload %d", len(big), mp)
	}
	r, err := e.cl.Do(ctxT(t), subjects.APIGetData, messages.GetDataArgs{Table: "t"}, messages.Opts{})
	if err != nil {
		t.Fatal(err)
	}
	var got []byte
	if err := msgpack.Unmarshal(r.Payload, &got); err != nil {
		t.Fatal(err)
	}
	if !r.Header.Status.IsOK() || !bytes.Equal(got, big) {
		t.Fatalf("answer status %v, %d bytes, equal=%v", r.Header.Status, len(got), bytes.Equal(got, big))
	}
}

func TestAnswerAboveLimit(t *testing.T) {
	e := startGW(t, func(c *gw.Config) { c.MaxAnswerBytes = 2 << 20 })
	e.fakeRC("bulk", "", func(s messages.RCSubmission) { e.reply(s, messages.StatusOK, make([]byte, 3<<20)) })
	r, err := e.cl.Do(ctxT(t), subjects.APIGetData, messages.GetDataArgs{Table: "t"}, messages.Opts{})
	if err != nil {
		t.Fatal(err)
	}
	if st := r.Header.Status; st.RC != messages.CodeTooLarge {
		t.Fatalf("got %v", st)
	}
}

func TestServiceInfo(t *testing.T) {
	e := startGW(t, nil)
	m, err := e.nc.Request("$SRV.INFO."+e.s.ServiceName(subjects.ServiceGW), nil, wait)
	if err != nil {
		t.Fatal(err)
	}
	var info micro.Info
	if err := json.Unmarshal(m.Data, &info); err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, ep := range info.Endpoints {
		got[ep.Name] = ep.Subject
	}
	for _, api := range subjects.APIs {
		if got[api] != e.s.GWAPI(api) {
			t.Errorf("endpoint %s: subject %q, want %q", api, got[api], e.s.GWAPI(api))
		}
	}
	if info.Metadata["gw_id"] != "gw1" {
		t.Errorf("metadata %v", info.Metadata)
	}
}

func TestBusy(t *testing.T) {
	e := startGW(t, func(c *gw.Config) { c.MaxInFlight = 1 })
	held := make(chan messages.RCSubmission, 1)
	e.fakeRC("slow", "", func(s messages.RCSubmission) { held <- s })
	first := make(chan messages.Response, 1)
	go func() {
		r, err := e.cl.Do(ctxT(t), subjects.APIGetData, messages.GetDataArgs{Table: "t"}, messages.Opts{})
		if err != nil {
			t.Error(err)
		}
		first <- r
	}()
	s := <-held // the first request holds the only slot
	r, err := e.cl.Do(ctxT(t), subjects.APIGetData, messages.GetDataArgs{Table: "t"}, messages.Opts{})
	if err != nil {
		t.Fatal(err)
	}
	if st := r.Header.Status; st.RC != messages.CodeRateLimited || !strings.Contains(st.AI, "busy") || !strings.Contains(st.AI, gw.LimitInFlight) {
		t.Fatalf("got %v", st)
	}
	e.reply(s, messages.StatusOK, "ok")
	if r := <-first; !r.Header.Status.IsOK() {
		t.Fatalf("first: %v", r.Header.Status)
	}
}

// okJSONAnswer is an Agg's OK answer to s with a JSON payload, naming the
// caller's id (s.AnswerID): its headers and its envelope.
func okJSONAnswer(t *testing.T, s messages.RCSubmission, payload []byte) (nats.Header, []byte) {
	t.Helper()
	body, err := messages.Response{Header: messages.ResponseHeader{V: 1, RequestID: s.AnswerID, API: s.Header.API},
		Payload: payload, Content: messages.ContentJSON}.Encode()
	if err != nil {
		t.Fatal(err)
	}
	h := nats.Header{}
	messages.StatusOK.Write(h)
	h.Set(messages.HdrRequestID, s.RequestID)
	h.Set(messages.HdrContentType, string(messages.ContentJSON))
	return h, body
}

// A caller that reassembles chunks gets an answer that names its id chunk
// by chunk as the Agg sends it: chunk 0 reaches it before the Agg has sent
// the last, and it reassembles the very answer, under its own id.
func TestLargeAnswerRelayedAsItComes(t *testing.T) {
	e := startGW(t, nil)
	subs := make(chan messages.RCSubmission, 1)
	e.fakeRC("bulk", "", func(s messages.RCSubmission) { subs <- s })
	inbox := e.nc.NewInbox()
	sub, err := e.nc.SubscribeSync(inbox)
	if err != nil {
		t.Fatal(err)
	}
	if err := sub.SetPendingLimits(-1, -1); err != nil {
		t.Fatal(err)
	}
	h := nats.Header{}
	h.Set(messages.HdrAcceptChunks, "1")
	h.Set(messages.HdrRequestID, "caller-1")
	req := []byte(`{"header":{"api":"getData"},"payload":{"table":"t"}}`)
	if err := e.nc.PublishMsg(&nats.Msg{Subject: e.s.GWAPI(subjects.APIGetData), Reply: inbox, Header: h, Data: req}); err != nil {
		t.Fatal(err)
	}
	var s messages.RCSubmission
	select {
	case s = <-subs:
	case <-time.After(wait):
		t.Fatal("no submission")
	}
	if s.AnswerID != "caller-1" {
		t.Fatalf("submission's answer id %q, want the caller's", s.AnswerID)
	}
	big := make([]byte, 4<<20)
	for i := range big {
		big[i] = byte(i*7 + i>>11)
	}
	payload, _ := json.Marshal(big)
	rh, body := okJSONAnswer(t, s, payload)
	msgs, err := messages.SplitChunksBody(s.ReplyTo, rh, messages.Body{body}, int(e.nc.MaxPayload())-messages.RelayRoom)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range msgs[:len(msgs)-1] {
		if err := e.nc.PublishMsg(m); err != nil {
			t.Fatal(err)
		}
	}
	r := messages.NewReassembler(0)
	m, err := sub.NextMsg(wait)
	if err != nil {
		t.Fatalf("nothing relayed before the last chunk was sent: %v", err)
	}
	if m.Header.Get(messages.HdrChunkIndex) != "0" || m.Header.Get(messages.HdrRequestID) != "caller-1" || m.Header.Get(messages.HdrTraceID) == "" {
		t.Fatalf("first message headers %v", m.Header)
	}
	done, err := r.Add(m.Header, m.Data)
	if err := e.nc.PublishMsg(msgs[len(msgs)-1]); err != nil {
		t.Fatal(err)
	}
	for err == nil && !done {
		if m, err = sub.NextMsg(wait); err == nil {
			done, err = r.Add(m.Header, m.Data)
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	got, _ := r.Payload()
	if !bytes.Equal(got, body) {
		t.Fatalf("caller reassembled %d bytes, the Agg sent %d", len(got), len(body))
	}
}
