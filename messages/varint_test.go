package messages

import (
	"bytes"
	"encoding/binary"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
)

// readVarintsSlow is ReadVarints one binary.Uvarint a value: the reference
// the fast reader is compared with.
func readVarintsSlow(out []int64, b []byte, delta bool) error {
	var prev int64
	for i := range out {
		x, k := binary.Uvarint(b)
		if k <= 0 {
			return errBadVarint
		}
		b = b[k:]
		v := int64(x>>1) ^ -int64(x&1)
		if delta {
			v += prev
			prev = v
		}
		out[i] = v
	}
	if len(b) != 0 {
		return errBadVarint
	}
	return nil
}

var errBadVarint = bytes.ErrTooLarge // any error: only whether there is one is compared

// varintValues are n values of every varint length, 1 to 10 bytes, mixed.
func varintValues(rng *rand.Rand, n int) []int64 {
	vals := make([]int64, n)
	for i := range vals {
		switch rng.IntN(8) {
		case 0:
			vals[i] = math.MinInt64
		case 1:
			vals[i] = math.MaxInt64
		default:
			vals[i] = rng.Int64() >> rng.IntN(64) // every bit length
			if rng.IntN(2) == 0 {
				vals[i] = -vals[i]
			}
		}
	}
	return vals
}

// TestVarintsMatchBinary: the varints written into a buffer are
// binary.AppendVarint's bytes, and ReadVarints reads what binary.Uvarint
// reads, values of every length, at every distance from the end of the input.
func TestVarintsMatchBinary(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	// The edges of each length, both signs, at the start of a block; and
	// blocks of 4096 with a last one shorter (5000, 10,000).
	edges := []int64{0, 1, -1, 63, -64, 64, math.MaxInt64, math.MinInt64, 1<<55 - 1, -1 << 55, 1 << 55, -1<<55 - 1, 0}
	for k := 7; k <= 63; k += 7 {
		// Zigzag 2^k-2 .. 2^k+1: the last values of k/7 bytes, the first of one more.
		h := int64(1) << (k - 1)
		edges = append(edges, h-1, -h, h, -h-1)
	}
	edges = append(edges, 0)
	for _, n := range []int{0, 1, 2, 7, 8, 9, 100, 5000, 10_000} {
		vals := append(slices.Clone(edges), varintValues(rng, n)...)
		for _, delta := range []bool{false, true} {
			var want []byte
			prev := int64(0)
			for _, v := range vals {
				d := v
				if delta {
					d, prev = v-prev, v
				}
				want = binary.AppendVarint(want, d)
			}
			var buf bytes.Buffer
			writeVarintsTo(&buf, vals, delta)
			var bin []byte
			if err := msgpack.Unmarshal(buf.Bytes(), &bin); err != nil || !bytes.Equal(bin, want) {
				t.Fatalf("%d values, delta %v: %d bytes written (%v), binary.AppendVarint's are %d", n, delta, len(bin), err, len(want))
			}
			got := make([]int64, len(vals))
			if err := ReadVarints(got, want, delta); err != nil {
				t.Fatalf("%d values, delta %v: %v", n, delta, err)
			}
			for i := range vals {
				if got[i] != vals[i] {
					t.Fatalf("%d values, delta %v: row %d read %d, want %d", n, delta, i, got[i], vals[i])
				}
			}
		}
	}
}

// TestReadVarintsMatchesUvarint: on any bytes, ReadVarints fails where a
// binary.Uvarint loop fails and reads the same values where it does not:
// non-minimal encodings, overlong and cut varints, too few and too many bytes.
func TestReadVarintsMatchesUvarint(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for range 20_000 {
		n := rng.IntN(40)
		b := make([]byte, rng.IntN(60))
		for i := range b {
			switch rng.IntN(3) {
			case 0:
				b[i] = byte(rng.IntN(0x80)) // a last byte
			case 1:
				b[i] = 0x80 | byte(rng.IntN(0x80)) // more follow
			default:
				b[i] = 0x80 // non-minimal, overlong
			}
		}
		for _, delta := range []bool{false, true} {
			want, got := make([]int64, n), make([]int64, n)
			wantErr := readVarintsSlow(want, b, delta)
			gotErr := ReadVarints(got, b, delta)
			if (wantErr == nil) != (gotErr == nil) {
				t.Fatalf("% x, %d values: error %v, binary.Uvarint's %v", b, n, gotErr, wantErr)
			}
			if wantErr == nil && !slices.Equal(got, want) {
				t.Fatalf("% x, %d values: %v, binary.Uvarint's %v", b, n, got, want)
			}
		}
	}
}

// TestUvarint8: uvarint8 reads what binary.Uvarint reads for every value
// below 2^56, whatever follows it in the word.
func TestUvarint8(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for range 100_000 {
		ux := rng.Uint64() >> (8 + rng.IntN(57)) // below 2^56, every length
		var b [16]byte
		binary.LittleEndian.PutUint64(b[8:], rng.Uint64())
		binary.LittleEndian.PutUint64(b[:], rng.Uint64())
		k := binary.PutUvarint(b[:], ux)
		if x, n := uvarint8(binary.LittleEndian.Uint64(b[:])); x != ux || n != k {
			t.Fatalf("%#x: read %#x of %d bytes, want %d", ux, x, n, k)
		}
	}
	if _, n := uvarint8(0x8080808080808080); n != 0 {
		t.Fatalf("a varint longer than 8 bytes read as %d bytes", n)
	}
}

// BenchmarkVarints: a column of time deltas in ns (5-byte varints), one in
// ms (3 bytes), one of small counts (1 byte), one of counts of 1 or 2 bytes
// at random, written and read.
//
//	go test ./messages -run '^$' -bench Varints
func BenchmarkVarints(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 1))
	const n = 100_000
	times, ms, small, counts := make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n)
	t := int64(1_700_000_000_000_000_000)
	for i := range times {
		t += rng.Int64N(2e9)
		times[i], ms[i], small[i], counts[i] = t, t/1e6, int64(1+rng.IntN(50)), int64(1+rng.IntN(50))*int64(1+99*rng.IntN(2))
	}
	for _, c := range []struct {
		name  string
		vals  []int64
		delta bool
	}{{"times", times, true}, {"ms", ms, true}, {"small", small, false}, {"counts", counts, false}} {
		var buf bytes.Buffer
		writeVarintsTo(&buf, c.vals, c.delta)
		var bin []byte
		if err := msgpack.Unmarshal(buf.Bytes(), &bin); err != nil {
			b.Fatal(err)
		}
		b.Run("write/"+c.name, func(b *testing.B) {
			b.SetBytes(int64(len(bin)))
			for b.Loop() {
				buf.Reset()
				writeVarintsTo(&buf, c.vals, c.delta)
			}
		})
		b.Run("read/"+c.name, func(b *testing.B) {
			out := make([]int64, n)
			b.SetBytes(int64(len(bin)))
			for b.Loop() {
				if err := ReadVarints(out, bin, c.delta); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
