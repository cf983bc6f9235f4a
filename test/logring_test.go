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

// logRingLines is how many of the services' last log lines a failing test prints.
const logRingLines = 400

// logRing keeps the last log lines written to it.
type logRing struct {
	mu    sync.Mutex
	lines []string
	next  int
	full  bool
}

func (r *logRing) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	line := string(p)
	if len(r.lines) < logRingLines {
		r.lines = append(r.lines, line)
		return len(p), nil
	}
	r.lines[r.next] = line
	r.next = (r.next + 1) % logRingLines
	r.full = true
	return len(p), nil
}

func (r *logRing) String() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var b strings.Builder
	if r.full {
		b.WriteString("(earlier lines dropped)\n")
	}
	for i := range r.lines {
		b.WriteString(r.lines[(r.next+i)%len(r.lines)])
	}
	return b.String()
}

// testLogger is the services' logger in a test. With -v every line goes to
// the test's output. Without it (as CI runs), info and above are kept in a
// ring and printed only if the test fails: a failure that shows up only
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
