package messages

import (
	"reflect"
	"testing"
	"time"
)

// DecodeAggExpectation and DecodePartialResult are DecodeValidAliasing of
// their types: the same value, or the same error where it errs (whole
// messages, every cut of them, invalid ones, trailing bytes).
func TestDecodeDirectIsDecodeValidAliasing(t *testing.T) {
	x := AggExpectation{V: PortionVersion, RequestID: "r1", Seq: 1, API: "getData", Args: []byte{0x80},
		Expect: []PortionRef{{PortionID: 7, Attempt: 1}}, Sealed: true, ReplyTo: "gw.answer.r1", RCID: "rc1",
		Deadline: time.Now().Add(time.Minute).UnixNano(), LogCorr: "c", AnswerID: "a1"}
	p := PartialResult{V: PortionVersion, RequestID: "r1", PortionID: 7, Attempt: 1, DAPID: "d1", Payload: []byte{0x90}}
	bad := x
	bad.Seq = 0
	var inputs [][]byte
	for _, v := range []any{&x, &p, &bad} {
		b, err := Encode(v)
		if err != nil {
			t.Fatal(err)
		}
		for i := range len(b) + 1 {
			inputs = append(inputs, b[:i])
		}
		inputs = append(inputs, append(b[:len(b):len(b)], 0xc0))
	}
	for _, in := range inputs {
		we, werr := DecodeValidAliasing[AggExpectation](in)
		ge, gerr := DecodeAggExpectation(in)
		if (werr == nil && !reflect.DeepEqual(we, ge)) || fmtErr(werr) != fmtErr(gerr) {
			t.Errorf("expectation % x: got %+v, %v; want %+v, %v", in, ge, gerr, we, werr)
		}
		wp, werr := DecodeValidAliasing[PartialResult](in)
		gp, gerr := DecodePartialResult(in)
		if (werr == nil && !reflect.DeepEqual(wp, gp)) || fmtErr(werr) != fmtErr(gerr) {
			t.Errorf("partial % x: got %+v, %v; want %+v, %v", in, gp, gerr, wp, werr)
		}
	}
}

func fmtErr(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
