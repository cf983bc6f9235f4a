package messages

import (
	"runtime/debug"
	"sync"
	"sync/atomic"
	"unsafe"
)

// The storage of decoded columns, given back by ReleaseColumn once nothing
// reads it, is kept for the next decode: the Agg decodes a large answer's
// windows (about 10 MB of columns for the demo's whole trade table) and lets
// them go once the answer is written, answer after answer. Allocated afresh,
// each slice was cleared first and collected after, and its bytes drove the
// GC. A free list, not a sync.Pool (a large answer runs several GCs, and a
// pool is emptied by two), holding at most maxFreeColumnBytes in all, and at
// most a sixteenth of the process's memory limit (GOMEMLIMIT): a service
// under a limit keeps little for it.
const (
	maxFreeColumnBytes = 16 << 20
	// minFreeColumnBytes: a smaller slice costs less to allocate than to keep.
	minFreeColumnBytes = 16 << 10
)

var (
	freeColumnBytes atomic.Int64
	freeInts        = freeList[int64]{held: &freeColumnBytes, max: maxFreeColumnBytes, min: minFreeColumnBytes}
	freeFloats      = freeList[float64]{held: &freeColumnBytes, max: maxFreeColumnBytes, min: minFreeColumnBytes}
	freeCodes       = freeList[uint32]{held: &freeColumnBytes, max: maxFreeColumnBytes, min: minFreeColumnBytes}
	freeBools       = freeList[bool]{held: &freeColumnBytes, max: maxFreeColumnBytes, min: minFreeColumnBytes}
)

// The buffers large answers are written into (encodeColumns), given back by
// ReleaseBuffer once sent, likewise: the Agg writes a large answer (4.3 MiB
// for the demo's trade table) into a buffer of about the partials' size,
// answer after answer. At most 16 MiB of them are kept.
var (
	freeBufferBytes atomic.Int64
	freeBuffers     = freeList[byte]{held: &freeBufferBytes, max: 16 << 20, min: 64 << 10}
)

// freeList keeps slices given back (put) for later gets, within a bound on
// the bytes kept (held, shared by lists, at most max) and above a size (min).
type freeList[T any] struct {
	mu       sync.Mutex
	free     [][]T
	held     *atomic.Int64
	max, min int64
}

func sizeOf[T any]() int { var v T; return int(unsafe.Sizeof(v)) }

// get is a slice of n values, each to be written by the caller: from the
// list when one there holds n to 2n values (a larger one is kept for a
// larger column), else new.
func (l *freeList[T]) get(n int) []T {
	size := sizeOf[T]()
	if int64(n*size) < l.min {
		return make([]T, n)
	}
	l.mu.Lock()
	for i := len(l.free) - 1; i >= 0; i-- {
		if s := l.free[i]; cap(s) >= n && cap(s) <= 2*n {
			last := len(l.free) - 1
			l.free[i], l.free[last] = l.free[last], nil
			l.free = l.free[:last]
			l.mu.Unlock()
			l.held.Add(-int64(cap(s) * size))
			return s[:n]
		}
	}
	l.mu.Unlock()
	return make([]T, n)
}

// put keeps s for a later get, within the bound: the oldest slices kept go
// first to make room, so that a list full of sizes nobody asks for again
// does not refuse every new one.
func (l *freeList[T]) put(s []T) {
	size := sizeOf[T]()
	if poison.Load() {
		poisonSlice(s, size)
	}
	b := int64(cap(s) * size)
	if b < l.min { // most: three of a column's four kinds of values are empty
		return
	}
	bound := min(l.max, debug.SetMemoryLimit(-1)/16) // -1: reads the limit
	if b > bound {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if poison.Load() {
		// Given back twice, it would be handed out twice: two owners.
		for _, f := range l.free {
			if unsafe.SliceData(f[:1]) == unsafe.SliceData(s[:1]) {
				panic("messages: storage given back twice")
			}
		}
	}
	for len(l.free) > 0 && l.held.Load()+b > bound {
		l.held.Add(-int64(cap(l.free[0]) * size))
		l.free[0] = nil
		l.free = l.free[1:]
	}
	if l.held.Add(b) > bound { // the other lists sharing held fill it
		l.held.Add(-b)
		return
	}
	l.free = append(l.free, s[:0])
}

// poison: every slice given back is overwritten as it is (PoisonReleased).
var poison atomic.Bool

// PoisonReleased(true) makes every slice given back (ReleaseColumn, Room,
// ReleaseBuffer), kept or not, be overwritten with junk at once, so that
// whatever still reads it after its release reads junk (wrong answer bytes,
// codes outside their dictionary) instead of, most of the time, the values
// it had: tests turn it on to catch a read after release. It returns the
// setting before.
func PoisonReleased(on bool) bool { return poison.Swap(on) }

// poisonSlice overwrites every byte of s's storage (its capacity), values of
// size bytes each, with 0xA5.
func poisonSlice[T any](s []T, size int) {
	if cap(s) == 0 {
		return
	}
	b := unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(s[:cap(s)]))), cap(s)*size)
	for i := range b {
		b[i] = 0xA5
	}
}

// ReleaseColumn gives c's numbers, codes and booleans to later decodes and
// clears them from c. The caller guarantees that nothing reads that storage
// any more (no other column, table or partial shares it); strings and a
// dictionary are left to the GC, as they may be shared.
func ReleaseColumn(c *Column) {
	freeInts.put(c.Ints)
	freeFloats.put(c.Floats)
	freeCodes.put(c.Codes)
	freeBools.put(c.Bools)
	c.Ints, c.Floats, c.Codes, c.Bools = nil, nil, nil, nil
}

// Room is s with room for n values (s[:n], each to be written by the
// caller): s itself when it can hold them, else storage given back by
// ReleaseColumn, s given back in its stead. The caller owns s: nothing else
// reads it (a column being overwritten: the Agg gathers a streamed answer's
// windows into the storage of the answer before's).
func Room[T int64 | float64 | uint32 | bool](s []T, n int) []T {
	if cap(s) >= n {
		return s[:n]
	}
	var l *freeList[T]
	switch any(l).(type) {
	case *freeList[int64]:
		l = any(&freeInts).(*freeList[T])
	case *freeList[float64]:
		l = any(&freeFloats).(*freeList[T])
	case *freeList[uint32]:
		l = any(&freeCodes).(*freeList[T])
	default:
		l = any(&freeBools).(*freeList[T])
	}
	l.put(s)
	return l.get(n)
}

// ReleaseBuffer gives b, a table's msgpack form written by this package
// (EncodeColumnsMsgpack, EncodeTableMsgpack: a large answer), to the next
// one's writing. The caller guarantees that nothing reads b any more (the
// answer is sent: NATS copies what it publishes).
func ReleaseBuffer(b []byte) { freeBuffers.put(b) }
