package messages

import (
	"testing"

	"github.com/nats-io/nats.go"
)

func TestStreamFrameHeaders(t *testing.T) {
	h := nats.Header{}
	SetStreamFrame(h, "s1", 3, true)
	f, err := ReadStreamFrame(h)
	if err != nil || f != (StreamFrame{ID: "s1", Seq: 3, End: true}) || !IsStreamFrame(h) {
		t.Fatalf("read %+v, %v", f, err)
	}
	SetStreamFrame(h, "s1", 4, false)
	if f, _ := ReadStreamFrame(h); f.End {
		t.Fatal("a frame marked not last reads as last")
	}
	for _, bad := range []nats.Header{
		{HdrStreamSeq: {"-1"}, HdrStreamID: {"s"}},
		{HdrStreamSeq: {"x"}, HdrStreamID: {"s"}},
		{HdrStreamSeq: {"99999999999"}, HdrStreamID: {"s"}},
		{HdrStreamSeq: {"1"}},
	} {
		if _, err := ReadStreamFrame(bad); err == nil {
			t.Fatalf("headers %v accepted", bad)
		}
	}
}

// FuzzReadStreamFrame: a frame's headers come from the network; reading
// them never panics and accepts only what it can hand on.
func FuzzReadStreamFrame(f *testing.F) {
	f.Add("s1", "0", "1")
	f.Add("", "-5", "")
	f.Fuzz(func(t *testing.T, id, seq, end string) {
		h := nats.Header{HdrStreamID: {id}, HdrStreamSeq: {seq}, HdrStreamEnd: {end}}
		fr, err := ReadStreamFrame(h)
		if err == nil && (fr.Seq < 0 || fr.Seq >= MaxStreamFrames || fr.ID == "" || len(fr.ID) > 64) {
			t.Fatalf("accepted %+v", fr)
		}
	})
}
