package messages

// Answer streams: how an answer of any size reaches a caller that said it reads
// one (Sg-Accept-Stream: 1), window by window, so that no hop holds it whole.
//
//   - Every frame is one NATS message under the max payload, with Sg-Stream-Id
//     (one stream of one drive; frames of two streams never mix) and
//     Sg-Stream-Seq (0, 1, 2, ...). The last has Sg-Stream-End: 1.
//   - Frame 0 is a whole response envelope: its header carries the ids and the
//     status, its payload the first window of the answer (a Table in the
//     envelope's encoding). Frames 1.. carry the next windows, each a Table in
//     the same encoding, without an envelope (the ids are in the NATS headers).
//   - An answer that fails after frame 0 went out ends with a frame whose
//     status headers (Sg-Rc, Sg-Ac, Sg-Ai) say why, with no body: the caller
//     never takes a cut answer for a whole one.
//   - NATS keeps the order of one publisher's messages to one subscriber; a gap
//     in Sg-Stream-Seq means frames were lost (a slow consumer) and the stream
//     is broken: the reader fails.
//   - Pacing (StreamStartFrames): a GW holds the frames that come while it
//     writes `answered` to its request log; so that a slow write never
//     overflows what it holds, an Agg told so (AggExpectation.StreamStart)
//     sends the first StreamStartFrames frames and then waits for the GW's
//     start signal (subjects.AggStart, headers only: Sg-Request-Id, the
//     drive's id, and Sg-Stream-Id), which the GW sends once frame 0 has
//     gone out to the caller and the stream has not ended.

import (
	"fmt"
	"strconv"

	"github.com/nats-io/nats.go"
)

// MaxStreamFrames bounds the frames of one stream a reader accepts (with
// frames of up to the max payload, far more than any answer sg holds).
const MaxStreamFrames = 1 << 24

// StreamStartFrames is how many frames of a stream an Agg sends before the
// GW's start signal, when the expectation asks it to wait (StreamStart): a
// protocol constant, so that both sides agree without a message. The GW's
// bound on the frames it holds meanwhile stays above it (services/gw/core).
const StreamStartFrames = 16

// SetStreamFrame marks h as frame seq of stream id, the last one if end.
func SetStreamFrame(h nats.Header, id string, seq int, end bool) {
	h.Set(HdrStreamID, id)
	h.Set(HdrStreamSeq, strconv.Itoa(seq))
	if end {
		h.Set(HdrStreamEnd, "1")
	} else {
		h.Del(HdrStreamEnd)
	}
}

// StreamFrame is what a frame's headers say about it.
type StreamFrame struct {
	ID  string
	Seq int
	End bool
}

// IsStreamFrame reports whether h marks a frame of an answer stream.
func IsStreamFrame(h nats.Header) bool { return h.Get(HdrStreamSeq) != "" }

// ReadStreamFrame reads a frame's headers; the values come from the network
// and are checked.
func ReadStreamFrame(h nats.Header) (StreamFrame, error) {
	f := StreamFrame{ID: h.Get(HdrStreamID), End: h.Get(HdrStreamEnd) == "1"}
	seq, err := GetInt(h, HdrStreamSeq)
	switch {
	case err != nil:
		return f, fmt.Errorf("%w: %w", ErrChunk, err)
	case seq < 0 || seq >= MaxStreamFrames:
		return f, fmt.Errorf("%w: stream frame %d outside 0..%d", ErrChunk, seq, MaxStreamFrames-1)
	case f.ID == "" || len(f.ID) > 64:
		return f, fmt.Errorf("%w: stream id must be 1..64 bytes", ErrChunk)
	}
	f.Seq = int(seq)
	return f, nil
}
