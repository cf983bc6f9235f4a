package gw_test

import (
	"bytes"
	"context"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/sg-project/sg/messages"
	"github.com/sg-project/sg/services/gw"
	"github.com/sg-project/sg/subjects"
)

// TestSQLMsgpackArgsForwardedAsSent: a msgpack caller's sql arguments reach
// the RC as the caller sent them (the RC decodes them with the GW's decoder,
// DecodeSQLArgs), in either of their forms; the GW still checks them first.
func TestSQLMsgpackArgsForwardedAsSent(t *testing.T) {
	e := startGW(t, nil)
	got := submissionsAnswered(e)
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

// TestJSONArgsForwardedAsSent: a JSON caller's arguments reach the RC as the
// caller sent them, byte for byte, in ArgsJSON of a submission that names
// ArgsJSONVersion (the GW parses them once to check them and read the scope,
// and never re-encodes them); a msgpack caller's in Args, at version 1. The
// RC's decoders read both.
func TestJSONArgsForwardedAsSent(t *testing.T) {
	e := startGW(t, nil)
	got := submissionsAnswered(e)
	jsonHdr := nats.Header{messages.HdrContentType: {"json"}}
	for _, c := range []struct{ api, args string }{
		// Spacing, key order and a time's form that a re-encoding would not keep.
		{subjects.APIGetData, `{ "table" : "trade",  "startTS":"2026-01-02T03:04:05Z", "labels":{"region":"eu"}, "agg":[["n","count","price"]], "groupBy":["sym"] }`},
		{subjects.APIPing, `{"labels": {"region": ["eu", "us"]}}`},
		{subjects.APISQL, `{"query":  "SELECT * FROM trade"}`},
		{subjects.APISQL, `"SELECT * FROM quote"`},
	} {
		body := `{"header":{"v":1,"api":"` + c.api + `"},"payload":` + c.args + `}`
		r := e.raw(c.api, jsonHdr, []byte(body))
		if !r.Header.Status.IsOK() {
			t.Fatalf("%s %s: status %v", c.api, c.args, r.Header.Status)
		}
		var s messages.RCSubmission
		select {
		case s = <-got:
		case <-time.After(wait):
			t.Fatalf("%s: no submission", c.api)
		}
		if string(s.ArgsJSON) != c.args || len(s.Args) != 0 {
			t.Errorf("%s: RC got argsj %q and args %x, want the caller's bytes %q in argsj alone", c.api, s.ArgsJSON, []byte(s.Args), c.args)
		}
		if s.V != messages.ArgsJSONVersion {
			t.Errorf("%s: submission v%d with JSON arguments, want v%d", c.api, s.V, messages.ArgsJSONVersion)
		}
		var err error
		switch c.api {
		case subjects.APIGetData:
			var a messages.GetDataArgs
			if a, err = s.Arguments().GetData(); err == nil && (a.Table != "trade" || len(a.Agg) != 1) {
				t.Errorf("getData decoded at the RC as %+v", a)
			}
		case subjects.APIPing:
			var a messages.PingArgs
			if a, err = s.Arguments().Ping(); err == nil && len(a.Labels["region"]) != 2 {
				t.Errorf("ping decoded at the RC as %+v", a)
			}
		case subjects.APISQL:
			_, err = s.Arguments().SQL()
		}
		if err != nil {
			t.Errorf("%s: the RC's decoder refuses what the GW accepted: %v", c.api, err)
		}
	}
	// A msgpack caller's: in Args, version 1.
	args, err := messages.Encode(&messages.GetDataArgs{Table: "trade"})
	if err != nil {
		t.Fatal(err)
	}
	body, err := messages.Request{Header: messages.RequestHeader{API: subjects.APIGetData}, Payload: args, Content: messages.ContentMsgpack}.Encode()
	if err != nil {
		t.Fatal(err)
	}
	if r := e.raw(subjects.APIGetData, nats.Header{messages.HdrContentType: {"msgpack"}}, body); !r.Header.Status.IsOK() {
		t.Fatalf("msgpack getData: status %v", r.Header.Status)
	}
	select {
	case s := <-got:
		if !bytes.Equal(s.Args, args) || len(s.ArgsJSON) != 0 || s.V != messages.RCVersion {
			t.Errorf("msgpack caller: v%d args %x argsj %q, want v%d and the caller's bytes %x in args", s.V, []byte(s.Args), s.ArgsJSON, messages.RCVersion, args)
		}
	case <-time.After(wait):
		t.Fatal("msgpack getData: no submission")
	}
}

// v1Submission and v1LogEntry are the request log entry as a GW wrote it
// before ArgsJSON (by reflection, as the library writes their fields): a JSON
// caller's arguments re-encoded to msgpack, the submission at version 1.
type v1Submission struct {
	V          uint8                  `msgpack:"v"`
	RequestID  string                 `msgpack:"req"`
	GWID       string                 `msgpack:"gw"`
	Header     messages.RequestHeader `msgpack:"header"`
	Args       msgpack.RawMessage     `msgpack:"args,omitempty"`
	ReplyTo    string                 `msgpack:"reply"`
	Content    messages.Content       `msgpack:"content"`
	Deadline   int64                  `msgpack:"deadline"`
	ReceivedAt int64                  `msgpack:"rcvd"`
}

type v1LogEntry struct {
	V           uint8             `msgpack:"v"`
	RequestID   string            `msgpack:"req"`
	State       messages.LogState `msgpack:"state"`
	GWID        string            `msgpack:"gw"`
	GWStarted   int64             `msgpack:"gwStarted"`
	ClientReply string            `msgpack:"clientReply"`
	API         string            `msgpack:"api"`
	Content     messages.Content  `msgpack:"content"`
	Submission  v1Submission      `msgpack:"sub"`
	Drive       uint32            `msgpack:"drive"`
}

// TestAdoptsEntriesOfEitherArgsVersion: a request log entry written before
// ArgsJSON (v1: msgpack arguments) is still adopted and driven with its
// arguments as they were; one written now for a JSON caller (v2: argsj) is
// driven with the caller's JSON bytes.
func TestAdoptsEntriesOfEitherArgsVersion(t *testing.T) {
	e := startGW(t, func(c *gw.Config) {
		c.RequestLog = &gw.Durability{Memory: true}
		c.AnnounceEvery, c.DeadAfter, c.SweepEvery = 50*time.Millisecond, 200*time.Millisecond, 100*time.Millisecond
	})
	got := submissionsAnswered(e)
	// The fake RC announces itself every period, as an RC does, so that it
	// outlives DeadAfter (the dead GW's silence is judged by the same): the
	// announcements stop with the test.
	beatCtx, stopBeats := context.WithCancel(context.Background())
	beatsDone := make(chan struct{})
	t.Cleanup(func() { stopBeats(); <-beatsDone })
	go func() {
		defer close(beatsDone)
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		ann, _ := messages.Encode(&messages.RCAnnouncement{V: messages.RCVersion, RCID: "rc1", StartedAt: 1})
		for {
			select {
			case <-beatCtx.Done():
				return
			case <-tick.C:
			}
			_ = e.nc.Publish(e.s.RCAnnounce("rc1"), ann)
		}
	}()
	js, err := jetstream.New(e.nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	now := time.Now()
	old, err := messages.Encode(&messages.GetDataArgs{Table: "t-old"})
	if err != nil {
		t.Fatal(err)
	}
	newJSON := []byte(`{"table": "t-new"}`)
	replies := map[string]*nats.Subscription{}
	for _, id := range []string{"old1", "new1"} {
		sub, err := e.nc.SubscribeSync("_INBOX.client." + id)
		if err != nil {
			t.Fatal(err)
		}
		replies[id] = sub
	}
	v1 := v1LogEntry{V: messages.RecoveryVersion, RequestID: "old1", State: messages.LogOpen, GWID: "gw-dead", GWStarted: 1,
		ClientReply: "_INBOX.client.old1", API: subjects.APIGetData, Content: messages.ContentJSON,
		Submission: v1Submission{V: 1, RequestID: "old1", GWID: "gw-dead", Header: messages.RequestHeader{V: 1, API: subjects.APIGetData},
			Args: old, ReplyTo: e.s.GWAnswer("gw-dead", "old1"), Content: messages.ContentJSON,
			Deadline: now.Add(time.Minute).UnixNano(), ReceivedAt: now.UnixNano()}}
	v1Bytes, err := msgpack.Marshal(&v1)
	if err != nil {
		t.Fatal(err)
	}
	v2 := messages.LogEntry{V: messages.RecoveryVersion, RequestID: "new1", State: messages.LogOpen, GWID: "gw-dead", GWStarted: 1,
		ClientReply: "_INBOX.client.new1", API: subjects.APIGetData, Content: messages.ContentJSON,
		Submission: messages.RCSubmission{RequestID: "new1", GWID: "gw-dead", Header: messages.RequestHeader{V: 1, API: subjects.APIGetData},
			ReplyTo: e.s.GWAnswer("gw-dead", "new1"), Content: messages.ContentJSON,
			Deadline: now.Add(time.Minute).UnixNano(), ReceivedAt: now.UnixNano()}}
	v2.Submission.SetArguments(messages.JSONArgs(newJSON))
	v2Bytes, err := messages.Encode(&v2)
	if err != nil {
		t.Fatal(err)
	}
	for id, b := range map[string][]byte{"old1": v1Bytes, "new1": v2Bytes} {
		if _, err := js.Publish(ctx, e.s.RequestLogEntry("gw-dead", id), b); err != nil {
			t.Fatal(err)
		}
	}
	seen := map[string]messages.RCSubmission{}
	for len(seen) < 2 {
		select {
		case s := <-got:
			seen[strings.SplitN(s.RequestID, messages.DriveSep, 2)[0]] = s
		case <-ctx.Done():
			t.Fatalf("adopted and driven: %v, want old1 and new1", slices.Collect(maps.Keys(seen)))
		}
	}
	if s := seen["old1"]; s.V != messages.RCVersion || !bytes.Equal(s.Args, old) || len(s.ArgsJSON) != 0 {
		t.Errorf("v1 entry driven as v%d args %x argsj %q, want v1 with its msgpack arguments", s.V, []byte(s.Args), s.ArgsJSON)
	}
	if s := seen["new1"]; s.V != messages.ArgsJSONVersion || len(s.Args) != 0 || !bytes.Equal(s.ArgsJSON, newJSON) {
		t.Errorf("v2 entry driven as v%d args %x argsj %q, want v2 with the caller's JSON", s.V, []byte(s.Args), s.ArgsJSON)
	}
	for id, sub := range replies {
		m, err := sub.NextMsg(wait)
		if err != nil {
			t.Fatalf("%s: no answer to the caller: %v", id, err)
		}
		if r, err := messages.DecodeResponse(m.Header, m.Data); err != nil || !r.Header.Status.IsOK() {
			t.Errorf("%s: answer %+v (%v)", id, r.Header.Status, err)
		}
	}
}

// submissionsAnswered runs a fake RC rc1 that answers every submission OK and
// passes it on, for a test to look at what the GW sent.
func submissionsAnswered(e *env) <-chan messages.RCSubmission {
	got := make(chan messages.RCSubmission, 4)
	e.fakeRC("rc1", "", func(s messages.RCSubmission) {
		got <- s
		e.reply(s, messages.StatusOK, map[string]string{"ok": "1"})
	})
	return got
}
