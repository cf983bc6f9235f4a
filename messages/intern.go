package messages

import (
	"encoding/binary"
	"hash/maphash"
	"sync/atomic"

	"github.com/vmihailenco/msgpack/v5"
)

// Column names and symbol values repeat from table to table: a small
// answer's eight column names and four symbols were a third of the
// allocations of decoding it, every answer. A decoder reading its own
// bytes (sliceReader) takes them from recentStrings when there: a fixed
// table of recently decoded short strings, one per slot by hash, a new
// string replacing the slot's. It never grows, whatever the input: a
// string not there costs what it did, and a second allocation to hold it.
const (
	recentSlots     = 512
	maxRecentString = 32 // bytes: longer strings are decoded as before
	maxRecentDict   = 64 // values: a larger dictionary's are decoded as before
)

type recentTable struct {
	seed  maphash.Seed
	slots [recentSlots]atomic.Pointer[string]
}

var recentStrings = recentTable{seed: maphash.MakeSeed()}

// str is string(b), the table's when it holds it.
func (t *recentTable) str(b []byte) string {
	if len(b) > maxRecentString {
		return string(b)
	}
	slot := &t.slots[maphash.Bytes(t.seed, b)%recentSlots]
	if p := slot.Load(); p != nil && *p == string(b) {
		return *p
	}
	s := string(b)
	slot.Store(&s)
	return s
}

// decodeStringRecent is dec.DecodeString, from recentStrings when dec reads
// a sliceReader (the string's bytes then read in place); anything but a
// string the reader holds whole is left to DecodeString, errors included.
func decodeStringRecent(dec *msgpack.Decoder) (string, error) {
	r, ok := dec.Buffered().(*sliceReader)
	if !ok || r.Len() == 0 {
		return dec.DecodeString()
	}
	b := r.data[r.pos:]
	var n, head int
	switch c := b[0]; {
	case c >= 0xa0 && c <= 0xbf: // fixstr
		n, head = int(c&0x1f), 1
	case c == 0xd9 && len(b) >= 2: // str8
		n, head = int(b[1]), 2
	case c == 0xda && len(b) >= 3: // str16
		n, head = int(binary.BigEndian.Uint16(b[1:])), 3
	default: // str32 (not short), nil, bin, not a string
		return dec.DecodeString()
	}
	if n > len(b)-head {
		return dec.DecodeString() // cut short: its error
	}
	r.pos += head + n
	return recentStrings.str(b[head : head+n]), nil
}
