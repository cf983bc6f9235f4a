package agg

import (
	"bytes"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/sg-project/sg/services/dap/demo"
	"github.com/sg-project/sg/subjects"
)

// Answers one after another reuse one goroutine; answers at once each get
// their own (a slow one holds no other back); stop ends every answerer.
func TestAnswerersReuseAndRunConcurrently(t *testing.T) {
	var p answerers
	for range 100 {
		done := make(chan struct{})
		p.run(func() { close(done) })
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatal("job did not run")
		}
		// An answerer is idle again before the next job, or the next one
		// spawns: wait until one waits (bounded).
		for deadline := time.Now().Add(10 * time.Second); ; {
			p.mu.Lock()
			idle := p.idle
			p.mu.Unlock()
			if idle >= 1 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("answerer never went idle")
			}
			time.Sleep(time.Millisecond)
		}
	}
	// Between counting itself idle and receiving, an answerer can miss a
	// job, which then gets a goroutine of its own: rarely, never each time.
	if n := p.spawned.Load(); n > 10 {
		t.Fatalf("%d goroutines for 100 answers in a row: answerers are not reused", n)
	}
	const together = 20
	release := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(together)
	started := make(chan struct{}, together)
	for range together {
		p.run(func() {
			defer wg.Done()
			started <- struct{}{}
			<-release
		})
	}
	for range together {
		select {
		case <-started:
		case <-time.After(10 * time.Second):
			t.Fatal("an answer waited behind the others")
		}
	}
	close(release)
	wg.Wait()
	p.stop()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.idle != 0 {
		t.Fatalf("%d answerers idle after stop", p.idle)
	}
}

// A small whole answer is sent by the callback that completed it, with no
// answerer goroutine; one above inlineAnswerBytes goes to an answerer, so
// that its merge does not hold up the partials behind it.
func TestSmallAnswersNeedNoAnswerer(t *testing.T) {
	e := newEnv(t, nil)
	enc, _ := partials(t, aggArgs, demo.Config{Seed: 1})
	if len(enc[0]) > inlineAnswerBytes {
		t.Fatalf("the small partial has %d bytes", len(enc[0]))
	}
	big, err := msgpack.Marshal(bytes.Repeat([]byte("x"), inlineAnswerBytes))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		payload []byte
		spawned int64
	}{
		{enc[0], 0},
		{big, 1}, // not a table: answered with an error, by an answerer
	} {
		id := fmt.Sprint("req-", len(c.payload))
		e.expect(expectation(id, subjects.APIGetData, aggArgs, ref(1, 1)))
		e.partial(okPartial(id, ref(1, 1), "dap0", c.payload))
		if resp, _ := e.answer(); resp.Header.RequestID != id {
			t.Fatalf("answer for %q, want %q", resp.Header.RequestID, id)
		}
		if n := e.agg.answerers.spawned.Load(); n != c.spawned {
			t.Fatalf("%d bytes: %d answerers started, want %d", len(c.payload), n, c.spawned)
		}
	}
}
