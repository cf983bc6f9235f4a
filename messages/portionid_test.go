package messages

import (
	"bytes"
	"errors"
	"math"
	"strconv"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/vmihailenco/msgpack/v5"
)

// A portion id is a number (the RC core's) whose wire form is the decimal
// string the RC always sent: the bytes of every message that names one are
// those of a build whose ids were strings, through the hand codec and the
// reflection one, so the DAPs, Aggs and RCs of either build read each other.
func TestPortionIDWireFormIsTheDecimalString(t *testing.T) {
	type strRef struct { // PortionRef as it was
		PortionID string `msgpack:"id"`
		Attempt   uint32 `msgpack:"att"`
	}
	type strCredit struct { // PartialCredit as it was (a reflection-coded type)
		V         uint8  `msgpack:"v"`
		RequestID string `msgpack:"req"`
		PortionID string `msgpack:"id"`
		Attempt   uint32 `msgpack:"att"`
		AggID     string `msgpack:"agg"`
		Windows   uint32 `msgpack:"win"`
		Stop      bool   `msgpack:"stop,omitempty"`
	}
	for _, id := range []PortionID{1, 9, 10, 1 << 32, math.MaxUint64} {
		s := strconv.FormatUint(uint64(id), 10)
		if id.String() != s {
			t.Fatalf("%d prints %q", uint64(id), id.String())
		}
		// Reflection: a PortionRef and a PartialCredit.
		old, err := msgpack.Marshal(strRef{s, 3})
		if err != nil {
			t.Fatal(err)
		}
		now, err := msgpack.Marshal(PortionRef{id, 3})
		if err != nil || !bytes.Equal(now, old) {
			t.Fatalf("ref %d: % x, as a string id % x (%v)", id, now, old, err)
		}
		var back PortionRef
		if err := msgpack.Unmarshal(old, &back); err != nil || back != (PortionRef{id, 3}) {
			t.Fatalf("ref %d: a string id's bytes read as %+v, %v", id, back, err)
		}
		oldCredit, _ := msgpack.Marshal(strCredit{V: 1, RequestID: "q", PortionID: s, Attempt: 2, AggID: "a", Windows: 4})
		credit := PartialCredit{V: 1, RequestID: "q", PortionID: id, Attempt: 2, AggID: "a", Windows: 4}
		if b, err := Encode(&credit); err != nil || !bytes.Equal(b, oldCredit) {
			t.Fatalf("credit %d: % x, as a string id % x (%v)", id, b, oldCredit, err)
		}
		if got, err := DecodeValid[PartialCredit](oldCredit); err != nil || got != credit {
			t.Fatalf("credit %d: %+v %v", id, got, err)
		}
		// The hand codec: the same str as the string it replaced.
		var w, ws wireWriter
		w.portionID(id)
		ws.str(s)
		if !bytes.Equal(w.b, ws.b) {
			t.Fatalf("hand %d: % x, as a string % x", id, w.b, ws.b)
		}
		c := PortionCompletion{V: PortionVersion, RequestID: "q", PortionID: id, Attempt: 1, DAPID: "d", Outcome: OutcomeOK}
		b, err := Encode(&c)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Contains(b, append([]byte{'i', 'd'}, ws.b...)) {
			t.Fatalf("completion %d: % x holds no id %q", id, b, s)
		}
		if got, err := DecodeValid[PortionCompletion](b); err != nil || got.PortionID != id {
			t.Fatalf("completion %d: %+v %v", id, got, err)
		}
		// The header.
		h := nats.Header{}
		Routing{RequestID: "q", PortionID: id}.Write(h)
		if h.Get(HdrPortionID) != s {
			t.Fatalf("header %d: %q", id, h.Get(HdrPortionID))
		}
	}
}

// hostilePortionIDs are strings that are not a portion id's wire form.
var hostilePortionIDs = []string{"0", "07", "-1", "+1", "1a", " 1", "1 ", "0x10", "1_000", "p1", "١",
	"18446744073709551616", "99999999999999999999", "100000000000000000000", "*", ">"}

// What is not a portion id's wire form is refused as it is read, by every
// decoder: the hand codec, the reflection codec, the headers; it never
// becomes some other portion's id.
func TestPortionIDHostileWireForms(t *testing.T) {
	for _, s := range hostilePortionIDs {
		if id, err := ParsePortionID(s); err == nil {
			t.Errorf("%q parses as %d", s, id)
		}
		// The hand decoder (a completion).
		var w wireWriter
		f := w.openMap()
		f.uint("v", PortionVersion)
		f.str("req", "q")
		f.str("id", s)
		f.str("dap", "d")
		f.uint("out", uint64(OutcomeOK))
		f.close()
		if got, err := DecodeValid[PortionCompletion](w.b); !errors.Is(err, ErrMalformed) {
			t.Errorf("completion with id %q: %+v, %v; want ErrMalformed", s, got, err)
		}
		// The reflection decoder (a credit, a refusal).
		b, _ := msgpack.Marshal(map[string]any{"v": 1, "req": "q", "id": s, "att": 1, "agg": "a", "win": 2})
		if got, err := DecodeValid[PartialCredit](b); !errors.Is(err, ErrMalformed) {
			t.Errorf("credit with id %q: %+v, %v; want ErrMalformed", s, got, err)
		}
		b, _ = msgpack.Marshal(map[string]any{"v": RefusalVersion, "req": "q", "svc": "dap", "id": "d", "portion": s, "code": CodeBadRequest, "reason": "r"})
		if got, err := DecodeValid[Refusal](b); !errors.Is(err, ErrMalformed) {
			t.Errorf("refusal with portion %q: %+v, %v; want ErrMalformed", s, got, err)
		}
		// The headers.
		h := nats.Header{}
		Routing{RequestID: "q", RCID: "rc"}.Write(h)
		h.Set(HdrPortionID, s)
		if r, err := ReadRouting(h); err == nil {
			t.Errorf("header %q reads as routing %+v", s, r)
		}
		if r, err := RefusalRoute(h); err == nil {
			t.Errorf("header %q attributed: %+v", s, r)
		}
	}
	// None is the empty string, in every form, and no message that needs a
	// portion validates without one.
	if id, err := ParsePortionID(""); err != nil || id != 0 {
		t.Fatalf(`"" parses as %d, %v`, id, err)
	}
	c := PortionCompletion{V: PortionVersion, RequestID: "q", DAPID: "d", Outcome: OutcomeOK}
	b, err := Encode(&c)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := DecodeValid[PortionCompletion](b); !errors.Is(err, ErrInvalid) {
		t.Fatalf("a completion of no portion: %v, want ErrInvalid", err)
	}
}
