package messages

import (
	"errors"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
)

func TestRoutingRoundTrip(t *testing.T) {
	in := Routing{RequestID: "req-1", API: "getData", AggID: "agg-1", RCID: "rc-1", PortionID: 1732460000000000001,
		Attempt: 1<<32 - 1, LogCorr: "corr", Content: ContentMsgpack}
	h := nats.Header{}
	in.Write(h)
	out, err := ReadRouting(h)
	if err != nil {
		t.Fatal(err)
	}
	if out != in {
		t.Errorf("round trip: got %+v, want %+v", out, in)
	}
	// Zero values write nothing and read back as zero.
	h = nats.Header{}
	Routing{}.Write(h)
	if len(h) != 0 {
		t.Errorf("zero routing wrote %v", h)
	}
	if r, err := ReadRouting(h); err != nil || r != (Routing{}) {
		t.Errorf("empty header: %+v, %v", r, err)
	}
}

func TestRoutingParseErrors(t *testing.T) {
	h := nats.Header{}
	h.Set(HdrAttempt, "x")
	h.Set(HdrPortionID, "1e3")
	h.Set(HdrContentType, "xml")
	_, err := ReadRouting(h)
	if err == nil {
		t.Fatal("malformed headers accepted")
	}
	for _, k := range []string{HdrAttempt, HdrPortionID, HdrContentType} {
		if !strings.Contains(err.Error(), k) {
			t.Errorf("error does not name %s: %v", k, err)
		}
	}
	if !errors.Is(err, ErrBadHeader) {
		t.Errorf("error is not ErrBadHeader: %v", err)
	}
	var he *HeaderError
	if !errors.As(err, &he) {
		t.Errorf("error is not a *HeaderError: %v", err)
	}
	h = nats.Header{}
	h.Set(HdrAttempt, "4294967296")
	if _, err := ReadRouting(h); err == nil {
		t.Error("attempt above uint32 accepted")
	}
}

func TestTypedHelpers(t *testing.T) {
	h := nats.Header{}
	if _, ok, err := LookupUint(h, HdrAttempt); ok || err != nil {
		t.Errorf("LookupUint missing: %v, %v", ok, err)
	}
	if _, err := GetString(h, HdrRequestID); !errors.Is(err, ErrMissingHeader) || !strings.Contains(err.Error(), HdrRequestID) {
		t.Errorf("GetString missing: %v", err)
	}
	SetUint(h, HdrAttempt, 1<<63)
	if v, ok, err := LookupUint(h, HdrAttempt); err != nil || !ok || v != 1<<63 {
		t.Errorf("LookupUint = %d, %v, %v", v, ok, err)
	}
	SetInt(h, "X", -5)
	if v, err := GetInt(h, "X"); err != nil || v != -5 {
		t.Errorf("GetInt = %d, %v", v, err)
	}
	SetString(h, HdrAI, "line1\r\nline2")
	if got := h.Get(HdrAI); strings.ContainsAny(got, "\r\n") {
		t.Errorf("CR/LF kept in header value %q", got)
	}
	SetString(h, HdrAI, "")
	if _, ok := h[HdrAI]; ok {
		t.Error("empty SetString did not delete")
	}
}

func TestStatusRoundTrip(t *testing.T) {
	st := Errorf(CodeTimeout, CodeErr, "Request timed out, [rc=%s;status=%q]", "rc-1", "executing")
	h := nats.Header{}
	st.Write(h)
	got, err := ReadStatus(h)
	if err != nil || got != st {
		t.Errorf("ReadStatus = %+v, %v; want %+v", got, err, st)
	}
	if h.Get(HdrRC) != "45" || h.Get(HdrAC) != "10" {
		t.Errorf("codes on the wire: rc=%q ac=%q", h.Get(HdrRC), h.Get(HdrAC))
	}
	if _, err := ReadStatus(nats.Header{}); !errors.Is(err, ErrMissingHeader) {
		t.Errorf("response without rc: %v", err)
	}
	h = nats.Header{}
	h.Set(HdrRC, "TIMEOUT")
	if st, err := ReadStatus(h); err != nil || st.RC != CodeTimeout || st.AC != CodeErr {
		t.Errorf("rc by name, no ac: %+v, %v", st, err)
	}
	h.Set(HdrAC, "zz")
	if _, err := ReadStatus(h); !errors.Is(err, ErrBadHeader) {
		t.Errorf("bad ac: %v", err)
	}
	if !StatusOK.IsOK() || st.IsOK() {
		t.Error("IsOK")
	}
}
