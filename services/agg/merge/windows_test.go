package merge

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/sg-project/sg/messages"
)

// windowsAll concatenates every window of n rows; with reuse, each window is
// read into the table of the one before (NextInto).
func windowsAll(t *testing.T, args messages.GetDataArgs, parts []Partial, n int, reuse bool) ([]int64, int) {
	t.Helper()
	m := NewMerger(args)
	for _, p := range parts {
		if err := m.Add(p); err != nil {
			t.Fatal(err)
		}
	}
	w, err := m.Windows()
	if err != nil {
		t.Fatal(err)
	}
	var got []int64
	calls := 0
	var tb messages.Table
	for more := true; more; {
		if reuse {
			more = w.NextInto(&tb, n)
		} else {
			tb, more = w.Next(n)
		}
		calls++
		if tb.NumRows() > n {
			t.Fatalf("window of %d rows, asked for at most %d", tb.NumRows(), n)
		}
		if c := tb.Col("v"); c != nil {
			got = append(got, c.Ints...)
		}
		if calls > 10_000 {
			t.Fatal("windows never end")
		}
	}
	return got, calls
}

// The windows of an answer, concatenated, are the answer Merge gives, for
// any window size, with and without a limit and sortCols.
func TestWindowsConcatenateToResult(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	var parts []Partial
	for range 5 {
		var times, vals []int64
		ts := int64(0)
		for range rng.IntN(50) {
			ts += rng.Int64N(5)
			times, vals = append(times, ts), append(vals, rng.Int64N(1000))
		}
		parts = append(parts, rowsPartial(t, times, vals))
	}
	for _, args := range []messages.GetDataArgs{{Table: "t"}, {Table: "t", Limit: 17}, {Table: "t", SortCols: []string{"-v"}, Limit: 9}} {
		want, err := Merge(args, parts)
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range []int{1, 3, 16, 1000} {
			for _, reuse := range []bool{false, true} {
				got, calls := windowsAll(t, args, parts, n, reuse)
				if fmt.Sprint(got) != fmt.Sprint(want.Col("v").Ints) {
					t.Fatalf("args %+v, windows of %d (reuse %v): %v, want %v", args, n, reuse, got, want.Col("v").Ints)
				}
				if wantCalls := max(1, (len(got)+n-1)/n); calls != wantCalls {
					t.Fatalf("args %+v: %d windows of %d for %d rows, want %d", args, calls, n, len(got), wantCalls)
				}
			}
		}
	}
	// No partial: one empty window.
	if got, calls := windowsAll(t, messages.GetDataArgs{Table: "t"}, nil, 4, true); len(got) != 0 || calls != 1 {
		t.Fatalf("no partial: %v in %d windows", got, calls)
	}
}
