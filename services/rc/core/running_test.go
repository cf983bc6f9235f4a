package core

import (
	"math/rand/v2"
	"testing"
)

// TestRunningIndex checks the index against a map through random puts and
// deletes, with ids that run on from one counter and a few small ones that
// come back.
func TestRunningIndex(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var x runningIndex
	want := map[PortionID]*portionState{}
	var ids []PortionID // want's keys, in a deterministic order
	next := PortionID(1)
	for step := 0; step < 200_000; step++ {
		switch op := rng.IntN(10); {
		case op < 5 || len(want) == 0:
			var id PortionID
			if rng.IntN(4) == 0 {
				id = PortionID(rng.IntN(64)) // ids near one another
			} else {
				next++
				id = next
			}
			ps := &portionState{}
			x.put(id, ps)
			if want[id] == nil {
				ids = append(ids, id)
			}
			want[id] = ps
		default:
			k := rng.IntN(len(ids))
			id := ids[k]
			if rng.IntN(5) == 0 {
				id = next + 1000 // absent
			} else {
				ids[k] = ids[len(ids)-1]
				ids = ids[:len(ids)-1]
			}
			x.del(id)
			delete(want, id)
		}
		if x.n != len(want) {
			t.Fatalf("step %d: %d entries, want %d", step, x.n, len(want))
		}
		if step%97 == 0 {
			for id, ps := range want {
				if got := x.get(id); got != ps {
					t.Fatalf("step %d: get(%d) = %p, want %p", step, id, got, ps)
				}
			}
			if x.get(next+1000) != nil {
				t.Fatalf("step %d: an absent id was found", step)
			}
		}
	}
}
