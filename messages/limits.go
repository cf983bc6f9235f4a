package messages

// Decoding limits: every byte from NATS is hostile. The msgpack library
// allocates a slice of the length a message claims before it reads a single
// element (a 13-byte message claiming 4,294,967,295 table entries asks for
// 240 GB, and the failed allocation is fatal: no recover() catches it), and
// encoding/json recurses once per nesting level. So no decoder of this
// package hands bytes to either library before a pre-scan (CheckMsgpack,
// CheckJSON) has proved, without allocating anything in proportion to a
// claimed length, that (the hand decoders of wire.go, which use neither
// library, check the same as they read, in one pass):
//
//   - every array, map, str, bin and ext length fits in the bytes actually
//     left (an element needs at least 1 byte, a map entry at least 2), so
//     the library can only allocate in proportion to the input;
//   - arrays and maps (JSON arrays and objects) nest at most MaxDepth deep;
//   - the message holds at most MaxElements values in all (internal
//     messages), which bounds what a message of 1-byte elements (nil, {})
//     can cost when each becomes a Go struct.
//
// Decoded that way, a message of n bytes costs at most about
// MaxAllocPerByte*n + MaxAllocSlack bytes of heap (the fuzz tests check it),
// and a bad one is ErrMalformed with the reason.
const (
	// MaxDepth is the deepest nesting of arrays and maps (objects) accepted.
	// sg's own messages nest at most 6 deep; filter values and meta answers
	// leave room.
	MaxDepth = 32
	// MaxElements is the most values (scalars and containers, all levels)
	// in one internal message or client request. The largest legitimate one,
	// an expectation of 65,536 portion refs, holds about 330,000. Partial
	// results and live updates, which may be as large as an answer, use
	// PayloadLimits.
	MaxElements = 1 << 21
	// MaxAllocPerByte and MaxAllocSlack bound the heap a decode may allocate
	// per input byte and in all (decoder state, error text). The worst case
	// measured is about 70 per byte (a map of 1-byte keys and values): sg's
	// slices of structs grow as elements arrive (slices.go), where the
	// library would make them at once (368 per byte for a partial's
	// aggregation states).
	MaxAllocPerByte = 256
	MaxAllocSlack   = 1 << 20
)

// Limits bound one pre-scan. The zero value means no limit on that count;
// the lengths are always checked against the bytes present.
type Limits struct {
	MaxDepth    int // arrays and maps open at once; 0: MaxDepth
	MaxElements int // values in the whole message; 0: as many as bytes
}

var (
	// MessageLimits are the limits of internal messages and client requests.
	MessageLimits = Limits{MaxDepth: MaxDepth, MaxElements: MaxElements}
	// PayloadLimits are the limits of payloads that may be as large as an
	// answer (partial results, answers, live updates, local snapshots): the
	// element count is bounded by the bytes only.
	PayloadLimits = Limits{MaxDepth: MaxDepth}
)

func (l Limits) depth() int {
	switch {
	case l.MaxDepth <= 0:
		return MaxDepth
	case l.MaxDepth > maxScanDepth:
		return maxScanDepth
	}
	return l.MaxDepth
}

// maxScanDepth is the size of the scanner's fixed stack: no Limits can make
// it allocate.
const maxScanDepth = 64
