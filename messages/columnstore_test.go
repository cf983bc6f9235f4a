package messages

import (
	"runtime/debug"
	"testing"
)

// A free list full of sizes nobody asks for again still keeps a new one:
// the oldest slices kept go first to make room (the review filled the list
// with 998 small leftovers and a 1.6 MB column was refused).
func TestFreeListMakesRoomForANewSize(t *testing.T) {
	t.Cleanup(drainFreeInts)
	drainFreeInts()
	for freeColumnBytes.Load()+int64(8*2100) <= maxFreeColumnBytes {
		ReleaseColumn(&Column{Type: TypeInt, Ints: make([]int64, 2100)})
	}
	big := Column{Type: TypeInt, Ints: make([]int64, 200_000)}
	p := &big.Ints[0]
	ReleaseColumn(&big)
	if got := freeInts.get(200_000); &got[0] != p {
		t.Errorf("a 1.6 MB column released was not kept (list %d bytes, %d slices)", freeColumnBytes.Load(), len(freeInts.free))
	}
	if held := freeColumnBytes.Load(); held > maxFreeColumnBytes {
		t.Errorf("the lists hold %d bytes, over their bound %d", held, maxFreeColumnBytes)
	}
}

// Under a memory limit the lists keep at most a sixteenth of it.
func TestFreeListKeepsLittleUnderAMemoryLimit(t *testing.T) {
	t.Cleanup(drainFreeInts)
	drainFreeInts()
	was := debug.SetMemoryLimit(32 << 20) // a bound of 2 MiB
	t.Cleanup(func() { debug.SetMemoryLimit(was) })
	for range 8 {
		ReleaseColumn(&Column{Type: TypeInt, Ints: make([]int64, 100_000)}) // 800 kB each
	}
	if held := freeColumnBytes.Load(); held > 2<<20 {
		t.Fatalf("the lists hold %d bytes under a memory limit of 32 MiB, want at most 2 MiB", held)
	}
	if len(freeInts.free) == 0 {
		t.Fatal("nothing kept at all")
	}
}

// drainFreeInts empties the ints' free list (the lists are the package's).
func drainFreeInts() {
	freeInts.mu.Lock()
	for _, s := range freeInts.free {
		freeColumnBytes.Add(-int64(cap(s) * 8))
	}
	freeInts.free = nil
	freeInts.mu.Unlock()
}
