package dap

import (
	"context"
	"sync"

	"github.com/sg-project/sg/messages"
)

// fifo holds the dispatches waiting for a slot, at most Config.MaxQueue: one RC does not
// send more than the DAP's concurrency except around retries and restarts, but several
// RCs share a DAP. A dispatch over the bound is refused, never dropped silently (the RC
// waits for a completion of each).
type fifo struct {
	mu    sync.Mutex
	items []messages.PortionDispatch
	wake  chan struct{} // one pending signal is enough: the consumer drains all
}

func newFIFO() fifo { return fifo{wake: make(chan struct{}, 1)} }

// push queues p unless limit portions wait already; it returns how many wait.
func (q *fifo) push(p messages.PortionDispatch, limit int) (int, bool) {
	q.mu.Lock()
	n := len(q.items)
	if n >= limit {
		q.mu.Unlock()
		return n, false
	}
	q.items = append(q.items, p)
	q.mu.Unlock()
	select {
	case q.wake <- struct{}{}:
	default:
	}
	return n + 1, true
}

func (q *fifo) pop() (messages.PortionDispatch, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.items) == 0 {
		return messages.PortionDispatch{}, false
	}
	p := q.items[0]
	q.items[0] = messages.PortionDispatch{} // let the args be collected
	if len(q.items) == 1 {
		// Drained: the next push reuses the array from its start. Sliced
		// past its head, the queue of a DAP that takes portions one at a
		// time lost its capacity and grew it again every portion (issue 10).
		q.items = q.items[:0]
	} else {
		q.items = q.items[1:]
	}
	if len(q.items) > 0 {
		// Several slots wait on the one signal: pass it on for the rest.
		select {
		case q.wake <- struct{}{}:
		default:
		}
	}
	return p, true
}

// remove takes the queued portions that match out of the queue.
func (q *fifo) remove(match func(*messages.PortionDispatch) bool) []messages.PortionDispatch {
	q.mu.Lock()
	defer q.mu.Unlock()
	var out []messages.PortionDispatch
	kept := q.items[:0]
	for _, p := range q.items {
		if match(&p) {
			out = append(out, p)
			continue
		}
		kept = append(kept, p)
	}
	clear(q.items[len(kept):]) // let the args be collected
	q.items = kept
	return out
}

func (q *fifo) len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.items)
}

// dispatchLoop starts queued portions in arrival order, at most Concurrency at once: one
// slot goroutine per unit of concurrency takes the oldest queued portion whenever it is
// free, and runs it on its own goroutine (runPortion). Slots live as long as the DAP, not
// a goroutine per portion: a new goroutine's stack grows again through the engine and the
// codecs every time, which cost a tenth of a small request's CPU. It returns once every
// slot has ended.
func (d *DAP) dispatchLoop(ctx context.Context) {
	var wg sync.WaitGroup
	defer wg.Wait()
	for range d.cfg.Concurrency {
		wg.Go(func() {
			s := d.newSlot(ctx)
			defer s.close()
			for {
				var ok bool
				if s.p, ok = d.nextPortion(ctx); !ok {
					return
				}
				d.runPortion(s)
			}
		})
	}
}

// nextPortion waits for the oldest queued portion; ok is false when ctx ends.
func (d *DAP) nextPortion(ctx context.Context) (messages.PortionDispatch, bool) {
	for {
		if p, ok := d.queue.pop(); ok {
			return p, true
		}
		select {
		case <-d.queue.wake:
		case <-ctx.Done():
			return messages.PortionDispatch{}, false
		}
	}
}
