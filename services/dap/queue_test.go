package dap

import "testing"

// A queue that drains keeps its array: a DAP that takes portions one at a
// time queues and pops them without allocating.
func TestQueueDrainedKeepsItsArray(t *testing.T) {
	q := newFIFO()
	p := dispatch(1, nil)
	if _, ok := q.push(p, 10); !ok {
		t.Fatal("push refused")
	}
	q.pop()
	allocs := testing.AllocsPerRun(100, func() {
		q.push(p, 10)
		if _, ok := q.pop(); !ok {
			t.Fatal("nothing popped")
		}
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per push and pop", allocs)
	}
}
