package logwriter

import (
	"bytes"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

// out records what the writer writes, one entry per Write; gate, when set,
// holds each Write until the test lets it go (an output that stalls).
type out struct {
	mu     sync.Mutex
	writes []string
	gate   chan struct{}
	wrote  chan struct{} // a Write began (capacity 1)
}

func newOut() *out { return &out{wrote: make(chan struct{}, 1)} }

func (o *out) Write(p []byte) (int, error) {
	select {
	case o.wrote <- struct{}{}:
	default:
	}
	if o.gate != nil {
		<-o.gate
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	o.writes = append(o.writes, string(p))
	return len(p), nil
}

func (o *out) text() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return strings.Join(o.writes, "")
}

func lines(s string) []string { return strings.Split(strings.TrimSuffix(s, "\n"), "\n") }

// Every line from many goroutines comes out whole, each goroutine's in its
// order, and none is lost under the bound.
func TestLinesComeOutWholeAndInOrder(t *testing.T) {
	o := newOut()
	w := New(o, 1<<20)
	const writers, each = 8, 500
	var wg sync.WaitGroup
	for g := range writers {
		wg.Go(func() {
			log := zerolog.New(w)
			for i := range each {
				log.Info().Int("g", g).Int("i", i).Msg("line")
			}
		})
	}
	wg.Wait()
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	next := make([]int, writers)
	got := lines(o.text())
	if len(got) != writers*each {
		t.Fatalf("%d lines, want %d", len(got), writers*each)
	}
	for _, l := range got {
		var g, i int
		if _, err := fmt.Sscanf(l, `{"level":"info","g":%d,"i":%d,"message":"line"}`, &g, &i); err != nil {
			t.Fatalf("line %q: %v", l, err)
		}
		if i != next[g] {
			t.Fatalf("goroutine %d: line %d after %d", g, i, next[g]-1)
		}
		next[g]++
	}
	if w.Lost() != 0 {
		t.Fatalf("%d lines lost", w.Lost())
	}
}

// An output that stalls does not stall the logger: past the bound, lines
// are not kept, and the next batch says how many were not. An error line
// waits for the output, after what was kept before it.
func TestStalledOutputDropsAndSaysSo(t *testing.T) {
	o := newOut()
	o.gate = make(chan struct{})
	line := []byte(`{"level":"info","message":"x"}` + "\n")
	w := New(o, 10*len(line))
	log := zerolog.New(w)
	log.Info().Msg("first") // taken by the goroutine, whose Write then stalls
	select {
	case <-o.wrote:
	case <-time.After(10 * time.Second):
		t.Fatal("the first line was never written")
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range 25 {
			_, _ = w.WriteLevel(zerolog.InfoLevel, line)
		}
	}()
	select {
	case <-done: // returned while the output stalls
	case <-time.After(10 * time.Second):
		t.Fatal("logging waited on a stalled output")
	}
	if got := w.Lost(); got != 15 {
		t.Fatalf("%d lines lost, want 15 (10 fit)", got)
	}
	errDone := make(chan struct{})
	go func() {
		defer close(errDone)
		log.Error().Msg("boom")
	}()
	close(o.gate) // the output moves again
	select {
	case <-errDone:
	case <-time.After(10 * time.Second):
		t.Fatal("the error line never went out")
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	got := lines(o.text())
	if len(got) != 1+1+10+1 {
		t.Fatalf("%d lines, want first, the notice, 10 kept and the error:\n%s", len(got), o.text())
	}
	if !strings.Contains(got[0], `"first"`) || !strings.Contains(got[1], `"lines_dropped":15`) ||
		!strings.Contains(got[len(got)-1], `"boom"`) {
		t.Fatalf("order or notice wrong:\n%s", o.text())
	}
}

// Lines logged while the output is busy go out together: under load, a
// write carries many lines.
func TestLinesWaitingGoOutInOneWrite(t *testing.T) {
	o := newOut()
	o.gate = make(chan struct{})
	w := New(o, 1<<20)
	log := zerolog.New(w)
	log.Info().Msg("first")
	<-o.wrote
	for i := range 100 {
		log.Info().Int("i", i).Msg("waiting")
	}
	close(o.gate)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	o.mu.Lock()
	n := len(o.writes)
	o.mu.Unlock()
	if got := len(lines(o.text())); got != 101 {
		t.Fatalf("%d lines, want 101", got)
	}
	if n != 2 {
		t.Fatalf("%d writes for the first line and 100 waiting, want 2", n)
	}
}

// After Close, a line is written at once (a service's last words).
func TestWriteAfterClose(t *testing.T) {
	var b bytes.Buffer
	w := New(&b, 1<<20)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	log := zerolog.New(w)
	log.Info().Msg("late")
	if !strings.Contains(b.String(), `"late"`) {
		t.Fatalf("got %q", b.String())
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
}
