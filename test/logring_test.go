package test

import (
	"strings"
	"sync"
	"testing"

	"github.com/rs/zerolog"
)

// Log lines kept for a failure carry their time to the microsecond: what
// such a failure turns on is usually which of two events came first.
func init() { zerolog.TimeFieldFormat = "15:04:05.000000" }

// logRingLines is how many lines of each kind (warnings and errors; the
// rest) a failing test prints: per-request info lines must not push out the
// warnings that explain a failure.
const logRingLines = 300

// ring keeps the last lines written to it.
type ring struct {
	lines []string
	next  int
	full  bool
}

func (r *ring) add(line string) {
	if len(r.lines) < logRingLines {
		r.lines = append(r.lines, line)
		return
	}
	r.lines[r.next] = line
	r.next = (r.next + 1) % logRingLines
	r.full = true
}

func (r *ring) writeTo(b *strings.Builder) {
	if r.full {
		b.WriteString("(earlier lines dropped)\n")
	}
	for i := range r.lines {
		b.WriteString(r.lines[(r.next+i)%len(r.lines)])
	}
}

// logRing keeps the last warnings and errors, and the last other lines.
type logRing struct {
	mu         sync.Mutex
	warn, info ring
}

func (r *logRing) Write(p []byte) (int, error) { return r.WriteLevel(zerolog.InfoLevel, p) }

func (r *logRing) WriteLevel(l zerolog.Level, p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if l >= zerolog.WarnLevel {
		r.warn.add(string(p))
	} else {
		r.info.add(string(p))
	}
	return len(p), nil
}

func (r *logRing) String() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var b strings.Builder
	b.WriteString("-- warnings and errors:\n")
	r.warn.writeTo(&b)
	b.WriteString("-- info:\n")
	r.info.writeTo(&b)
	return b.String()
}

// testLogger is the services' logger in a test. With -v every line goes to
// the test's output. Without it (as CI runs), info and above are kept in a
// ring and printed only if the test fails (warnings apart): a failure that shows up only
// under CI's load comes with the services' own account of it. Benchmarks
// log nothing.
func testLogger(t testing.TB) zerolog.Logger {
	if testing.Verbose() {
		return zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.DebugLevel)
	}
	if _, bench := t.(*testing.B); bench {
		return zerolog.Nop()
	}
	r := &logRing{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the services' last log lines (info and above):\n%s", r)
		}
	})
	return zerolog.New(r).Level(zerolog.InfoLevel).With().Timestamp().Logger()
}
