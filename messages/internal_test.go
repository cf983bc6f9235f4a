package messages

import (
	"errors"
	"reflect"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
)

var envDeadline = int64(1_900_000_000_000_000_000)

func envArgs() msgpack.RawMessage {
	b, _ := msgpack.Marshal(map[string]any{"table": "trade"})
	return b
}

func envRegistration() DAPRegistration {
	return DAPRegistration{V: DAPVersion, DAPID: "dap-eu-hdb-0", Addr: "dap-hdb:5100", Labels: LabelSet{"region": "eu"},
		Tier: TierHDB, Purview: TimeRange{Start: TSMin, End: 1_700_000_000_000_000_000}, Tables: []TableInfo{{Name: "trade", Kind: TablePartitioned}},
		PurviewVersion: 3, ReferenceVintage: 19, Available: true, Concurrency: 2}
}

// samples holds one valid value of every internal message type.
func envSamples() []any {
	r := TimeRange{Start: 1, End: 2}
	return []any{
		envPtr(envRegistration()),
		&DAPStatusUpdate{V: 1, DAPID: "d", Available: false, Reason: "replaying log", Purview: Unbounded, PurviewVersion: 4, Running: 1},
		&DAPVintageUpdate{V: 1, DAPID: "d", ReferenceVintage: 21},
		&DAPHeartbeat{V: 1, DAPID: "d", Seq: 9, SentAt: 5, Running: 1, PurviewVersion: 4, ReferenceVintage: 21, IntervalMS: 1000},
		&DAPLost{V: 1, DAPID: "d", Reason: "missed heartbeats", DetectedBy: "rc-1", At: 5},
		&PortionDispatch{V: 1, RequestID: "req", PortionID: 1, Attempt: 1, RCID: "rc-1", API: "getData", Args: envArgs(),
			Labels: LabelSet{"region": "eu"}, Range: Unbounded, PurviewVersion: 3, ReferenceVintage: 19, AggID: "agg-1", Deadline: envDeadline, LogCorr: "c"},
		&PortionCompletion{V: 1, RequestID: "req", PortionID: 1, Attempt: 1, DAPID: "d", Outcome: OutcomeRetry, Code: CodeRetry,
			Message: "purview version 3 does not match 4", PurviewVersion: 4, ReferenceVintage: 19},
		&PartialResult{V: 1, RequestID: "req", PortionID: 1, DAPID: "d", Status: StatusOK, Payload: RawMsgpack(envArgs())},
		&PartialResult{V: 1, RequestID: "req", PortionID: 1, Attempt: 2, DAPID: "d", Status: StatusOK, Payload: RawMsgpack(envArgs()), Window: 3, More: true},
		&PartialCredit{V: 1, RequestID: "req", PortionID: 1, Attempt: 2, AggID: "agg-1", Windows: 5, Stop: true},
		&AggDone{V: AggDoneVersion, AggID: "agg-1", Done: []AggDoneEntry{{RequestID: "req", Status: Errorf(CodeErr, CodeErr, "no such table"), TimedOut: true},
			{RequestID: "req2", Status: StatusOK, Held: 1500000}}},
		&AggExpectation{V: 1, RequestID: "req", Seq: 2, API: "getData", Args: envArgs(), Expect: []PortionRef{{1, 1}},
			Supersede: []PortionRef{{1, 0}}, Sealed: true, ReplyTo: "sg.gw.gw-1.answer.req", Content: ContentJSON, Deadline: envDeadline, Stream: true, StreamStart: true},
		&SecondaryQuery{V: 1, RequestID: "req", PrimaryRCID: "rc-1"},
		&RCAnnouncement{V: 1, RCID: "rc-1", Assembly: "eu", Outstanding: 3, StartedAt: 5},
		&RCSubmission{V: 1, RequestID: "req", GWID: "gw-1", Header: RequestHeader{V: 1, API: "getData"}, Args: envArgs(),
			ReplyTo: "sg.gw.gw-1.answer.req", Content: ContentMsgpack, Deadline: envDeadline, ReceivedAt: 4, Stream: true, StreamStart: true},
		&PeerPortion{V: 1, PrimaryID: "rc-1", DAPID: "d", Table: "trade", Retries: 1, QueuedAt: 3,
			Dispatch: PortionDispatch{V: 1, RequestID: "req", PortionID: 7, RCID: "rc-1", API: "getData", Args: envArgs(),
				Labels: LabelSet{"region": "us"}, Range: r, AggID: "agg-1", Deadline: envDeadline}},
		&PeerStatusBlock{V: 1, RequestID: "req", RCID: "rc-2", Block: `[rc=rc-2;status="completed"]`},
		&GWHeartbeat{V: 1, GWID: "gw-1", StartedAt: 5, IntervalMS: 1000, Stopping: true},
		&LogEntry{V: 1, RequestID: "req", State: LogOpen, GWID: "gw-1", GWStarted: 5, ClientReply: "_INBOX.x", API: "getData",
			Content: ContentJSON, Drive: 2, RCID: "rc-1", RCStarted: 6,
			Submission: RCSubmission{V: 1, RequestID: "req~2", GWID: "gw-1", Header: RequestHeader{V: 1, API: "getData"}, Args: envArgs(),
				ReplyTo: "sg.gw.gw-1.answer.req", Content: ContentJSON, Deadline: envDeadline, ReceivedAt: 4}},
	}
}

func envPtr[T any](v T) *T { return &v }

// envDecodeAs decodes into a fresh value of the same type as sample.
func envDecodeAs(sample any, b []byte) (any, error) {
	out := reflect.New(reflect.TypeOf(sample).Elem()).Interface()
	if err := Decode(b, out); err != nil {
		return nil, err
	}
	return out, out.(Validator).Validate()
}

func TestInternalRoundTrip(t *testing.T) {
	for _, s := range envSamples() {
		if err := s.(Validator).Validate(); err != nil {
			t.Errorf("%T sample invalid: %v", s, err)
			continue
		}
		b, err := Encode(s)
		if err != nil {
			t.Fatalf("%T: %v", s, err)
		}
		got, err := envDecodeAs(s, b)
		if err != nil {
			t.Errorf("%T: %v", s, err)
			continue
		}
		if !reflect.DeepEqual(got, s) {
			t.Errorf("%T round trip:\n got %+v\nwant %+v", s, got, s)
		}
		// Every type is versioned: without v it is rejected, above it too.
		var m map[string]any
		if err := msgpack.Unmarshal(b, &m); err != nil {
			t.Fatal(err)
		}
		delete(m, "v")
		nov, _ := msgpack.Marshal(m)
		if _, err := envDecodeAs(s, nov); !errors.Is(err, ErrInvalid) {
			t.Errorf("%T without version: %v", s, err)
		}
		m["v"] = 200
		future, _ := msgpack.Marshal(m)
		if _, err := envDecodeAs(s, future); !errors.Is(err, ErrVersion) {
			t.Errorf("%T future version: %v", s, err)
		}
		// Truncated and padded bodies are malformed, never a valid message.
		if _, err := envDecodeAs(s, b[:len(b)/2]); !errors.Is(err, ErrMalformed) {
			t.Errorf("%T truncated: %v", s, err)
		}
		if _, err := envDecodeAs(s, append(append([]byte{}, b...), 0xc0)); !errors.Is(err, ErrMalformed) {
			t.Errorf("%T trailing byte: %v", s, err)
		}
	}
}

func TestDecodeValid(t *testing.T) {
	reg := envRegistration()
	b, _ := Encode(reg)
	got, err := DecodeValid[DAPRegistration](b)
	if err != nil || got.DAPID != reg.DAPID {
		t.Fatalf("DecodeValid: %+v, %v", got, err)
	}
	reg.DAPID = "dap.1"
	b, _ = Encode(reg)
	if _, err := DecodeValid[DAPRegistration](b); !errors.Is(err, ErrInvalid) {
		t.Errorf("DAP id with a dot: %v", err)
	}
	if _, err := DecodeValid[DAPRegistration](nil); !errors.Is(err, ErrMalformed) {
		t.Errorf("empty body: %v", err)
	}
}

func TestValidationRejects(t *testing.T) {
	mut := func(f func(*DAPRegistration)) *DAPRegistration { r := envRegistration(); f(&r); return &r }
	bad := []Validator{
		mut(func(r *DAPRegistration) { r.Tier = "xdb" }),
		mut(func(r *DAPRegistration) { r.Purview = TimeRange{Start: 5, End: 5} }),
		mut(func(r *DAPRegistration) { r.Concurrency = 0 }),
		mut(func(r *DAPRegistration) { r.Labels = LabelSet{"": "x"} }),
		mut(func(r *DAPRegistration) { r.RCID = "rc *" }),
		&PortionCompletion{V: 1, RequestID: "r", PortionID: 1, DAPID: "d", Outcome: OutcomeOK, Code: CodeErr},
		&PortionCompletion{V: 1, RequestID: "r", PortionID: 1, DAPID: "d", Outcome: OutcomeRetry, Code: CodeErr},
		&PortionCompletion{V: 1, RequestID: "r", PortionID: 1, DAPID: "d", Outcome: 9},
		&PortionDispatch{V: 1, RequestID: "r", PortionID: 1, RCID: "rc", API: "getData", AggID: "a", Range: Unbounded},
		&AggExpectation{V: 1, RequestID: "r", Seq: 0, API: "getData", ReplyTo: "x", Deadline: 1},
		&AggExpectation{V: 1, RequestID: "r", Seq: 1, API: "getData", Deadline: 1},
		&RCAnnouncement{V: 1, RCID: "rc", Outstanding: -1},
		&RCSubmission{V: 1, RequestID: "r", GWID: "g", Header: RequestHeader{API: "getData"}, ReplyTo: "x", Content: "xml", Deadline: 1},
	}
	for i, v := range bad {
		if err := v.Validate(); !errors.Is(err, ErrInvalid) {
			t.Errorf("case %d %T: %v", i, v, err)
		}
	}
}

func TestTimeRangeAndLabels(t *testing.T) {
	a := TimeRange{Start: TSMin, End: 100}
	b := TimeRange{Start: 50, End: TSMax}
	if x, ok := a.Intersect(b); !ok || x != (TimeRange{50, 100}) {
		t.Errorf("intersect = %v %v", x, ok)
	}
	if _, ok := a.Intersect(TimeRange{100, 200}); ok {
		t.Error("half-open ranges [..,100) and [100,..) intersect")
	}
	if !Unbounded.Contains(TSMin) || Unbounded.Contains(TSMax) || !b.Contains(50) || b.Contains(49) {
		t.Error("Contains")
	}
	if Unbounded.String() != "[-inf;+inf)" {
		t.Errorf("String = %s", Unbounded)
	}
	if s := (TimeRange{Start: 0, End: 1500}).String(); s != "[1970-01-01T00:00:00.000000000Z;1970-01-01T00:00:00.000001500Z)" {
		t.Errorf("String = %s", s)
	}
	l1, l2 := LabelSet{"b": "2", "a": "1"}, LabelSet{"a": "1", "b": "2"}
	if l1.Key() != "a=1,b=2" || l1.Key() != l2.Key() || !l1.Equal(l2) || l1.Equal(LabelSet{"a": "1"}) {
		t.Errorf("label sets: %q %q", l1.Key(), l2.Key())
	}
}
