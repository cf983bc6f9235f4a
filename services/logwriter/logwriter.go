// Package logwriter is where a process's log lines go out: to the output by
// a goroutine of its own, in batches, so that a service never waits on a
// write system call to log. Written by the goroutine that logged, each line
// was a write(2) on a request's path: at info level (three lines a request,
// from the GW, the RC and the Agg), that added about a third to a small
// getData's latency on a 2-core machine (issue 10; BENCHMARKS.md). Batched, the
// lines of many requests share one write.
//
// An output that stalls (a full pipe, a stuck log driver) must not wedge the
// services either: past a bound (defaults.LogBuffer) of lines waiting, lines
// below error level are not kept, and the next batch begins with a line that
// says how many were not. Lines at error level and above are never dropped:
// they go out at once, after the lines waiting before them, from the
// goroutine that logged (a fatal line is out before the process exits).
package logwriter

import (
	"io"
	"strconv"
	"sync"
	"time"

	"github.com/rs/zerolog"
)

// Writer is a zerolog.LevelWriter that batches lines to out. Safe for
// concurrent use; each Write must be one whole line, as zerolog writes them.
type Writer struct {
	out io.Writer
	max int

	mu      sync.Mutex
	buf     []byte // whole lines waiting
	dropped uint64 // lines not kept since the last batch went out
	lost    uint64 // lines not kept, in all
	closed  bool

	// outMu orders the writes to out: a batch is taken from buf under mu
	// and written under outMu, taken before mu is let go, so batches and
	// lines written at once go out in the order they were logged.
	outMu sync.Mutex

	kick chan struct{} // a line waits (capacity 1)
	stop chan struct{}
	done chan struct{}
}

// New starts the writer's goroutine; Close stops it. max bounds the bytes
// waiting (the services pass defaults.LogBuffer).
func New(out io.Writer, max int) *Writer {
	w := &Writer{out: out, max: max, kick: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	go w.run()
	return w
}

// Write keeps a line of no level (zerolog.Log) as an info line.
func (w *Writer) Write(p []byte) (int, error) { return w.WriteLevel(zerolog.NoLevel, p) }

// WriteLevel queues the line p (copied: zerolog reuses it), or writes it at
// once at error level and above, and after Close.
func (w *Writer) WriteLevel(l zerolog.Level, p []byte) (int, error) {
	w.mu.Lock()
	if w.closed || (l >= zerolog.ErrorLevel && l <= zerolog.PanicLevel) {
		return w.writeNowLocked(p)
	}
	if len(w.buf)+len(p) > w.max {
		w.dropped++
		w.lost++
		w.mu.Unlock()
		return len(p), nil
	}
	w.buf = append(w.buf, p...)
	w.mu.Unlock()
	select {
	case w.kick <- struct{}{}:
	default:
	}
	return len(p), nil
}

// writeNowLocked writes what waits, then p, before returning; it unlocks mu.
func (w *Writer) writeNowLocked(p []byte) (int, error) {
	batch, dropped := w.buf, w.dropped
	w.buf, w.dropped = nil, 0
	w.outMu.Lock()
	w.mu.Unlock()
	defer w.outMu.Unlock()
	w.writeBatch(batch, dropped)
	if len(p) == 0 {
		return 0, nil
	}
	return w.out.Write(p)
}

// Lost is the number of lines not kept since New.
func (w *Writer) Lost() uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.lost
}

// Close writes the lines waiting and stops the goroutine. Lines logged
// afterwards are written at once.
func (w *Writer) Close() error {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return nil
	}
	w.closed = true
	w.mu.Unlock()
	close(w.stop)
	<-w.done
	w.mu.Lock()
	_, err := w.writeNowLocked(nil)
	return err
}

func (w *Writer) run() {
	defer close(w.done)
	var spare []byte
	for {
		select {
		case <-w.kick:
		case <-w.stop:
			return
		}
		w.mu.Lock()
		batch, dropped := w.buf, w.dropped
		w.buf, w.dropped = spare[:0], 0
		w.outMu.Lock()
		w.mu.Unlock()
		w.writeBatch(batch, dropped)
		w.outMu.Unlock()
		spare = batch
	}
}

// writeBatch writes lines waiting, after a line that says how many were
// not kept before them. Called with outMu held.
func (w *Writer) writeBatch(batch []byte, dropped uint64) {
	if dropped > 0 {
		line := `{"level":"warn","lines_dropped":` + strconv.FormatUint(dropped, 10) +
			`,"time":"` + time.Now().UTC().Format(time.RFC3339) + `","message":"log output behind: lines not written"}` + "\n"
		_, _ = io.WriteString(w.out, line)
	}
	if len(batch) > 0 {
		// A failed write has nowhere to be reported but the output itself.
		_, _ = w.out.Write(batch)
	}
}
