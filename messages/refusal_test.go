package messages

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/nats-io/nats.go"
)

// A refusal's reason is cut to MaxRefusalReason bytes of valid UTF-8 when
// built, and a longer one (a sender that did not cut it) does not validate.
func TestRefusalReasonBound(t *testing.T) {
	long := strings.Repeat("é", MaxRefusalReason) // 2 bytes each
	f := NewRefusal("req", "agg", "agg-1", CodeInternal, long+"\xff")
	if len(f.Reason) > MaxRefusalReason || !utf8.ValidString(f.Reason) || !strings.HasSuffix(f.Reason, "...") {
		t.Fatalf("reason of %d bytes, valid %v: %.20q", len(f.Reason), utf8.ValidString(f.Reason), f.Reason)
	}
	if err := f.Validate(); err != nil {
		t.Fatal(err)
	}
	f.Reason = strings.Repeat("x", MaxRefusalReason+1)
	if err := f.Validate(); err == nil {
		t.Fatal("a reason over the bound validated")
	}
	if s := CutText("short", 10); s != "short" {
		t.Fatalf("CutText changed a short text: %q", s)
	}
}

func TestRefusalValidate(t *testing.T) {
	ok := Refusal{V: RefusalVersion, RequestID: "req", Service: "dap", ServiceID: "d1", PortionID: 7, Attempt: 1, Code: CodeBadRequest, Reason: "r"}
	forwarded := ok
	forwarded.Via = "rc-2"
	for _, ok := range []Refusal{ok, forwarded} {
		b, err := Encode(&ok)
		if err != nil {
			t.Fatal(err)
		}
		if got, err := DecodeValid[Refusal](b); err != nil || got != ok {
			t.Fatalf("round trip: %+v %v", got, err)
		}
	}
	for name, mut := range map[string]func(*Refusal){
		"no version":           func(f *Refusal) { f.V = 0 },
		"request id not token": func(f *Refusal) { f.RequestID = "a.b" },
		"unknown service":      func(f *Refusal) { f.Service = "gw" },
		"service id wildcard":  func(f *Refusal) { f.ServiceID = "*" },
		"DAP without portion":  func(f *Refusal) { f.PortionID = 0 },
		"Agg with a portion":   func(f *Refusal) { f.Service = "agg" },
		"code not allowed":     func(f *Refusal) { f.Code = CodeOK },
		"no reason":            func(f *Refusal) { f.Reason = "" },
		"via not a token":      func(f *Refusal) { f.Via = "rc.2" },
		"an Agg's forwarded":   func(f *Refusal) { f.Service, f.PortionID, f.Attempt, f.Via = "agg", 0, 0, "rc-2" },
	} {
		f := ok
		mut(&f)
		if err := f.Validate(); err == nil {
			t.Errorf("%s: validated", name)
		}
	}
}

// RefusalRoute attributes a message only by ids that are valid subject
// tokens: an RC id is a subject to publish on.
func TestRefusalRoute(t *testing.T) {
	h := nats.Header{}
	Routing{RequestID: "req", RCID: "rc-1", PortionID: 7, Attempt: 3}.Write(h)
	r, err := RefusalRoute(h)
	if err != nil || r.RequestID != "req" || r.RCID != "rc-1" || r.PortionID != 7 || r.Attempt != 3 {
		t.Fatalf("%+v %v", r, err)
	}
	for name, set := range map[string][2]string{
		"no RC id":          {HdrRCID, ""},
		"RC id wildcard":    {HdrRCID, ">"},
		"RC id two tokens":  {HdrRCID, "rc.x"},
		"no request id":     {HdrRequestID, ""},
		"request id spaces": {HdrRequestID, "a b"},
		"portion wildcard":  {HdrPortionID, "*"},
		"portion not a num": {HdrPortionID, "p7"},
		"portion zero":      {HdrPortionID, "0"},
		"portion leading 0": {HdrPortionID, "07"},
		"portion past 2^64": {HdrPortionID, "18446744073709551616"},
		"attempt not a num": {HdrAttempt, "x"},
		"attempt too large": {HdrAttempt, "4294967296"},
	} {
		bad := nats.Header{}
		for k, v := range h {
			bad[k] = v
		}
		if set[1] == "" {
			bad.Del(set[0])
		} else {
			bad.Set(set[0], set[1])
		}
		if _, err := RefusalRoute(bad); err == nil {
			t.Errorf("%s: attributed", name)
		}
	}
}

// Routing.Write, whose values share one allocation, writes what the
// per-field setters write (SetString, SetUint), also over a header
// that holds older values: an empty string field is removed, a zero number
// left as it was.
func TestRoutingWriteIsPerFieldSetters(t *testing.T) {
	perField := func(r Routing, h nats.Header) {
		SetString(h, HdrRequestID, r.RequestID)
		SetString(h, HdrAPI, r.API)
		SetString(h, HdrAggID, r.AggID)
		SetString(h, HdrRCID, r.RCID)
		SetString(h, HdrPortionID, r.PortionID.String())
		if r.Attempt != 0 {
			SetUint(h, HdrAttempt, uint64(r.Attempt))
		}
		SetString(h, HdrLogCorr, r.LogCorr)
		SetString(h, HdrContentType, string(r.Content))
	}
	full := Routing{RequestID: "r", API: "getData", AggID: "a", RCID: "rc", PortionID: 7, Attempt: 2, LogCorr: "c\nd", Content: ContentJSON}
	for _, r := range []Routing{{}, {RequestID: "req", RCID: "rc-1", LogCorr: "a\r\nb"}, full} {
		for _, old := range []Routing{{}, full} {
			want, got := nats.Header{}, nats.Header{}
			perField(old, want)
			perField(old, got)
			perField(r, want)
			r.Write(got)
			if len(got) != len(want) {
				t.Fatalf("%+v over %+v: Write %v, the setters %v", r, old, got, want)
			}
			for k, v := range want {
				if len(got[k]) != 1 || got[k][0] != v[0] {
					t.Fatalf("%+v over %+v: Write %v, the setters %v", r, old, got, want)
				}
			}
		}
	}
}

// Routing.Write formats its numbers (a portion id, large, and an attempt)
// into one string, and its values share one slice: two allocations, however
// many fields are set.
func TestRoutingWriteAllocations(t *testing.T) {
	r := Routing{RequestID: "r", API: "getData", AggID: "a", RCID: "rc", PortionID: 1732460000000000001, Attempt: 4294967295,
		LogCorr: "c", Content: ContentMsgpack}
	h := nats.Header{}
	r.Write(h)
	for k, want := range map[string]string{HdrPortionID: "1732460000000000001", HdrAttempt: "4294967295"} {
		if got := h.Get(k); got != want {
			t.Fatalf("%s: %q, want %q", k, got, want)
		}
	}
	if got := testing.AllocsPerRun(100, func() { r.Write(h) }); got > 2 {
		t.Fatalf("Routing.Write allocates %.0f times, want at most 2", got)
	}
}
