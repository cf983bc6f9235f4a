package messages

import (
	"bytes"
	"errors"
	"reflect"
	"strings"
	"testing"
)

// argsJSONSamples are the messages that carry arguments, with a JSON
// caller's (ArgsJSONVersion).
func argsJSONSamples() []any {
	j := JSONArgs([]byte(`{"table": "trade", "agg": [["n", "count"]], "groupBy": ["sym"]}`))
	sub := &RCSubmission{RequestID: "req", GWID: "gw-1", Header: RequestHeader{V: 1, API: "getData"},
		ReplyTo: "sg.gw.gw-1.answer.req", Content: ContentJSON, Deadline: envDeadline, ReceivedAt: 4}
	sub.SetArguments(j)
	d := &PortionDispatch{RequestID: "req", PortionID: 1, Attempt: 1, RCID: "rc-1", API: "getData",
		Labels: LabelSet{"region": "eu"}, Range: Unbounded, AggID: "agg-1", Deadline: envDeadline}
	d.SetArguments(j)
	e := &AggExpectation{RequestID: "req", Seq: 1, API: "getData", Expect: []PortionRef{{1, 1}},
		ReplyTo: "sg.gw.gw-1.answer.req", Content: ContentJSON, Deadline: envDeadline}
	e.SetArguments(j)
	pp := &PeerPortion{V: PortionVersion, PrimaryID: "rc-1", DAPID: "d", Table: "trade", Dispatch: *d}
	le := &LogEntry{V: RecoveryVersion, RequestID: "req", State: LogOpen, GWID: "gw-1", GWStarted: 5, ClientReply: "_INBOX.x",
		API: "getData", Content: ContentJSON, Submission: *sub}
	return []any{sub, d, e, pp, le}
}

// A message with JSON arguments names ArgsJSONVersion and round-trips; one
// with msgpack arguments stays at version 1 and writes no argsj key, so its
// bytes are what a build before ArgsJSON wrote and read.
func TestArgsJSONVersion(t *testing.T) {
	for _, s := range argsJSONSamples() {
		if err := s.(Validator).Validate(); err != nil {
			t.Fatalf("%T: %v", s, err)
		}
		b, err := Encode(s)
		if err != nil {
			t.Fatal(err)
		}
		got, err := envDecodeAs(s, b)
		if err != nil {
			t.Fatalf("%T: %v", s, err)
		}
		if !reflect.DeepEqual(got, s) {
			t.Errorf("%T round trip:\n got %+v\nwant %+v", s, got, s)
		}
	}
	m := MsgpackArgs(envArgs())
	var sub RCSubmission
	sub.SetArguments(JSONArgs([]byte(`{}`)))
	sub.SetArguments(m) // the RC's sql plan replaces a JSON caller's arguments
	if sub.V != RCVersion || sub.ArgsJSON != nil || !bytes.Equal(sub.Args, m.Msgpack) {
		t.Errorf("msgpack arguments after JSON: v%d args %x argsj %q", sub.V, []byte(sub.Args), sub.ArgsJSON)
	}
	var d PortionDispatch
	d.SetArguments(m)
	var e AggExpectation
	e.SetArguments(m)
	if d.V != PortionVersion || e.V != PortionVersion {
		t.Errorf("msgpack arguments: dispatch v%d, expectation v%d, want v%d", d.V, e.V, PortionVersion)
	}
	for _, v := range []any{&sub, &d, &e} {
		b, _ := Encode(v)
		if bytes.Contains(b, []byte("argsj")) {
			t.Errorf("%T with msgpack arguments writes argsj", v)
		}
	}
}

// A reader refuses a version it does not know: a build before ArgsJSON
// (which knew up to v1) refuses a message carrying it rather than run the
// request without arguments, and this build refuses v3.
func TestArgsVersionRefused(t *testing.T) {
	for _, s := range argsJSONSamples()[:3] {
		b, _ := Encode(s)
		got, err := envDecodeAs(s, b)
		if err != nil {
			t.Fatal(err)
		}
		v := reflect.ValueOf(got).Elem().FieldByName("V").Interface().(uint8)
		if err := checkVersion("older reader", v, 1); !errors.Is(err, ErrVersion) {
			t.Errorf("%T v%d: a v1 reader's check gives %v, want ErrVersion", s, v, err)
		}
		future := bytes.Replace(b, []byte{0xa1, 'v', ArgsJSONVersion}, []byte{0xa1, 'v', ArgsJSONVersion + 1}, 1)
		if _, err := envDecodeAs(s, future); !errors.Is(err, ErrVersion) {
			t.Errorf("%T v%d: %v, want ErrVersion", s, ArgsJSONVersion+1, err)
		}
	}
}

func TestArgsValidationRejects(t *testing.T) {
	j := []byte(`{"table":"t"}`)
	both := &RCSubmission{V: ArgsJSONVersion, RequestID: "r", GWID: "g", Header: RequestHeader{V: 1, API: "getData"},
		Args: envArgs(), ArgsJSON: j, ReplyTo: "x", Content: ContentJSON, Deadline: 1}
	jsonAtV1 := &PortionDispatch{V: 1, RequestID: "r", PortionID: 1, RCID: "rc", API: "getData", AggID: "a",
		Range: Unbounded, Deadline: 1, ArgsJSON: j}
	jsonAtV1Exp := &AggExpectation{V: 1, RequestID: "r", Seq: 1, API: "getData", ReplyTo: "x", Deadline: 1, ArgsJSON: j}
	for _, v := range []Validator{both, jsonAtV1, jsonAtV1Exp} {
		if err := v.Validate(); !errors.Is(err, ErrInvalid) {
			t.Errorf("%T: %v, want ErrInvalid", v, err)
		}
	}
}

// Args decode each API's arguments from either encoding to the same value,
// with the GW's decoders, and treat JSON bytes as hostile as the GW does.
func TestArgsDecodeEitherEncoding(t *testing.T) {
	g := GetDataArgs{Table: "trade", GroupBy: []string{"sym"}, Agg: []AggSpec{{Name: "n", Func: AggCount}}, Limit: 5}
	gm, _ := Encode(&g)
	for _, a := range []Args{MsgpackArgs(gm), JSONArgs([]byte(`{"table":"trade","groupBy":["sym"],"agg":[["n","count"]],"limit":5}`))} {
		got, err := a.GetData()
		if err != nil || !reflect.DeepEqual(got, g) {
			t.Errorf("%s getData: %+v (%v), want %+v", a.Content(), got, err, g)
		}
	}
	p := PingArgs{Labels: LabelSelector{"region": {"eu"}}}
	pm, _ := Encode(&p)
	for _, a := range []Args{MsgpackArgs(pm), JSONArgs([]byte(`{"labels":{"region":"eu"}}`))} {
		got, err := a.Ping()
		if err != nil || !reflect.DeepEqual(got, p) {
			t.Errorf("%s ping: %+v (%v)", a.Content(), got, err)
		}
	}
	if got, err := (Args{}).Ping(); err != nil || len(got.Labels) != 0 {
		t.Errorf("no ping arguments: %+v (%v)", got, err)
	}
	sm, _ := Encode(&SQLArgs{Query: "SELECT 1"})
	for _, a := range []Args{MsgpackArgs(sm), JSONArgs([]byte(`{"query":"SELECT 1"}`)), JSONArgs([]byte(`"SELECT 1"`))} {
		if got, err := a.SQL(); err != nil || got.Query != "SELECT 1" {
			t.Errorf("%s sql: %+v (%v)", a.Content(), got, err)
		}
	}
	deep := JSONArgs([]byte(`{"table":"t","x":` + strings.Repeat("[", MaxDepth+2) + strings.Repeat("]", MaxDepth+2) + `}`))
	if _, err := deep.GetData(); !errors.Is(err, ErrMalformed) {
		t.Errorf("deep JSON getData: %v, want ErrMalformed", err)
	}
	if _, err := JSONArgs([]byte(`{"labels":` + strings.Repeat("[", MaxDepth+2) + `}`)).Ping(); !errors.Is(err, ErrMalformed) {
		t.Errorf("deep JSON ping: %v, want ErrMalformed", err)
	}
}
