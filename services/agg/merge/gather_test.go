package merge

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"strconv"
	"testing"

	"github.com/sg-project/sg/messages"
)

// codedParts is parts partials of one coded symbol column, sym, over the
// same n values, each part's dictionary in an order of its own, the first
// part using every value, beside an int column; and refs, their rows
// interleaved at random, each part's in order (a merge's).
func codedParts(rng *rand.Rand, n, parts int) ([]*Partial, []rowRef) {
	var out []*Partial
	total := 0
	for p := range parts {
		dict := make([]string, n)
		for i, k := range rng.Perm(n) {
			dict[i] = "s" + strconv.Itoa(k)
		}
		rows := 0
		if n > 0 {
			rows = n/parts + rng.IntN(20)
		}
		if p == 0 {
			rows += n
		}
		sym := messages.Column{Name: "sym", Type: messages.TypeSymbol, Dict: dict, Codes: make([]uint32, rows)}
		q := messages.Column{Name: "q", Type: messages.TypeInt, Ints: make([]int64, rows)}
		for i := range rows {
			sym.Codes[i] = uint32(rng.IntN(max(n, 1)))
			q.Ints[i] = int64(rng.IntN(1000))
		}
		if p == 0 {
			for i, k := range rng.Perm(n) {
				sym.Codes[i] = uint32(k)
			}
		}
		out = append(out, &Partial{Version: PartialVersion, Rows: messages.Table{Columns: []messages.Column{sym, q}}})
		total += rows
	}
	refs := make([]rowRef, 0, total)
	next := make([]uint32, parts)
	for range total {
		p := rng.IntN(parts)
		for int(next[p]) == out[p].Rows.NumRows() {
			p = (p + 1) % parts
		}
		refs = append(refs, rowRef{part: uint32(p), row: next[p]})
		next[p]++
	}
	return out, refs
}

// isFirstSeen reports whether codes number their values in the order first
// used, n values in all (messages.Column.FirstSeen's claim).
func isFirstSeen(codes []uint32, n int) bool {
	next := uint32(0)
	for _, code := range codes {
		if code > next {
			return false
		}
		if code == next {
			next++
		}
	}
	return int(next) == n
}

// TestGatherFirstSeen: a symbol column gathered from more than one coded
// part claims first-seen codes (messages.Column.FirstSeen), which the
// encoder writes as they are, and its codes are; gathered from one part (its
// dictionary shared) it claims nothing. Either way the table encodes to the
// bytes of the same table without the claim and of its strings, gathered
// into a table (Merge, Windows.NextInto) or written straight from the order
// (EncodeRuns, side by side), for dictionaries of 1, 255, 256, 257 and 70,000
// values (1-, 2- and 4-byte codes) and of none.
func TestGatherFirstSeen(t *testing.T) {
	schema := []messages.ColumnSpec{{Name: "sym", Type: messages.TypeSymbol}, {Name: "q", Type: messages.TypeInt}}
	for _, n := range []int{0, 1, 255, 256, 257, 70_000} {
		for _, nparts := range []int{1, 2, 5} {
			name := fmt.Sprintf("%d values, %d parts", n, nparts)
			parts, refs := codedParts(rand.New(rand.NewPCG(uint64(n), uint64(nparts))), n, nparts)
			tb := messages.NewTable(schema)
			gather(&tb, parts, refs)
			sym := tb.Col("sym")
			if !sym.Coded() || sym.FirstSeen != (nparts > 1) {
				t.Fatalf("%s: coded %v, first-seen %v", name, sym.Coded(), sym.FirstSeen)
			}
			if sym.FirstSeen && (!isFirstSeen(sym.Codes, len(sym.Dict)) || len(sym.Dict) != n) {
				t.Fatalf("%s: the codes over %d values are not first-seen", name, len(sym.Dict))
			}
			for i, r := range refs {
				if got, want := sym.Str(i), parts[r.part].Rows.Columns[0].Str(int(r.row)); got != want {
					t.Fatalf("%s: row %d is %q, want %q", name, i, got, want)
				}
			}
			got, err := messages.Encode(&tb)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			unclaimed := messages.Table{Columns: []messages.Column{*sym, tb.Columns[1]}}
			unclaimed.Columns[0].FirstSeen = false
			want, err := messages.Encode(&unclaimed)
			if err != nil || !bytes.Equal(got, want) {
				t.Fatalf("%s: %d bytes, %d without the claim (%v)", name, len(got), len(want), err)
			}
			unclaimed.Columns[0].Uncode()
			if strs, err := messages.Encode(&unclaimed); err != nil || !bytes.Equal(got, strs) {
				t.Fatalf("%s: %d bytes, %d as strings (%v)", name, len(got), len(strs), err)
			}
			for _, workers := range []int{1, 2} {
				if b, err := encodeOrder(schema, parts, refs, workers, 0); err != nil || !bytes.Equal(b, want) {
					t.Fatalf("%s: %d bytes from the order on %d workers (%v), want %d", name, len(b), workers, err, len(want))
				}
			}
		}
	}
}
