package messages

import (
	"math"
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

// With PoisonReleased on, storage given back reads junk at once, kept or not
// (small, or over the bound): a read after release cannot pass unseen.
func TestPoisonReleased(t *testing.T) {
	was := PoisonReleased(true)
	t.Cleanup(func() { PoisonReleased(was) })
	for _, n := range []int{3, 64 << 10} { // below the lists' minimum, and kept
		ints, codes, buf := make([]int64, n), make([]uint32, n), make([]byte, n)
		for i := range n {
			ints[i], codes[i], buf[i] = int64(i), uint32(i%7), byte(i)
		}
		c := Column{Type: TypeInt, Ints: ints}
		ReleaseColumn(&c)
		c = Column{Type: TypeSymbol, Codes: codes, Dict: make([]string, 7)}
		ReleaseColumn(&c)
		ReleaseBuffer(buf)
		if ints[0] != -0x5a5a5a5a5a5a5a5b || codes[n-1] != 0xa5a5a5a5 || buf[n/2] != 0xa5 {
			t.Fatalf("%d values: released storage reads %x, %x, %x", n, ints[0], codes[n-1], buf[n/2])
		}
	}
	small := []float64{1, 2, 3}
	if grown := Room(small, 100<<10); len(grown) != 100<<10 || math.Float64bits(small[2]) != 0xa5a5a5a5a5a5a5a5 {
		t.Fatalf("Room: %d values, the storage given back in its stead reads %v", len(grown), small)
	}
}

// With PoisonReleased on, storage given back twice (which the list would
// hand out twice, to two owners) panics while the list still holds it.
func TestPoisonReleasedCatchesATwiceGivenBack(t *testing.T) {
	was := PoisonReleased(true)
	t.Cleanup(func() { PoisonReleased(was) })
	drainFreeInts()
	t.Cleanup(drainFreeInts)
	ints := make([]int64, 64<<10)
	c, d := Column{Type: TypeInt, Ints: ints}, Column{Type: TypeInt, Ints: ints[:10]}
	ReleaseColumn(&c)
	defer func() {
		if recover() == nil {
			t.Fatal("the storage given back twice was taken")
		}
	}()
	ReleaseColumn(&d)
}
