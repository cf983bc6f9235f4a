package agg

import (
	"sync"
	"sync/atomic"
)

// answerers run the Agg's answers (merge, encode, send), each on its own
// goroutine as before, but a goroutine that finished one waits a while for
// the next instead of ending: a new goroutine's stack grows again through
// the merge and the codecs for every answer, which cost a tenth of a small
// request's CPU. At most maxIdleAnswerers wait; more answers at once still
// get a goroutine each, so a large merge never holds a small answer back.
type answerers struct {
	jobs    chan func() // unbuffered: a send succeeds only into an idle answerer
	once    sync.Once
	done    chan struct{}
	mu      sync.Mutex
	idle    int
	running sync.WaitGroup
	spawned atomic.Int64 // goroutines started, for tests
}

// maxIdleAnswerers bounds the answer goroutines kept waiting for work.
const maxIdleAnswerers = 8

func (p *answerers) init() {
	p.once.Do(func() {
		p.jobs = make(chan func())
		p.done = make(chan struct{})
	})
}

// run runs job on an idle answerer, or on a new one.
func (p *answerers) run(job func()) {
	p.init()
	select {
	case p.jobs <- job:
	default:
		p.spawned.Add(1)
		p.running.Go(func() { p.loop(job) })
	}
}

// loop runs job, then the jobs handed to it while it waits, until stop, or
// until enough others already wait.
func (p *answerers) loop(job func()) {
	for {
		job()
		p.mu.Lock()
		if p.idle >= maxIdleAnswerers {
			p.mu.Unlock()
			return
		}
		p.idle++
		p.mu.Unlock()
		select {
		case job = <-p.jobs:
		case <-p.done:
			job = nil
		}
		p.mu.Lock()
		p.idle--
		p.mu.Unlock()
		if job == nil {
			return
		}
	}
}

// stop ends the idle answerers and waits for every answerer; the caller has
// waited for the answers in progress already.
func (p *answerers) stop() {
	p.init()
	close(p.done)
	p.running.Wait()
}
