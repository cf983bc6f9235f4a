// Package testlog is a log sink for tests: services log into a Buffer from
// their goroutines while the test reads it.
package testlog

import (
	"bytes"
	"strings"
	"sync"
)

// Buffer is a bytes.Buffer safe for concurrent writes and reads (a
// zerolog.New(&buf) writer). The zero value is ready.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *Buffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// String is everything written so far.
func (l *Buffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// Line returns the first line written that contains every one of want, or
// "" when none does.
func (l *Buffer) Line(want ...string) string {
next:
	for _, line := range strings.Split(l.String(), "\n") {
		for _, w := range want {
			if !strings.Contains(line, w) {
				continue next
			}
		}
		return line
	}
	return ""
}
