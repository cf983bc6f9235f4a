package loglimit

import (
	"bytes"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/sg-project/sg/services/defaults"
)

// Error is Warn at error level: a test's line of another level than the
// services write (they warn only), kept here since no service needs it.
func (l *Limiter) Error(log *zerolog.Logger, kind string) *zerolog.Event {
	return l.event(log, zerolog.ErrorLevel, kind)
}

// TestAllowBurstThenPeriod: a kind writes burst lines in a period, none
// more; the first of the next period says how many were not written; kinds
// are limited apart. The time is passed in: no sleeps.
func TestAllowBurstThenPeriod(t *testing.T) {
	l := New(3, 10*time.Second)
	t0 := time.Unix(1000, 0)
	for i := range 3 {
		if ok, n := l.Allow("a", t0.Add(time.Duration(i)*time.Second)); !ok || n != 0 {
			t.Fatalf("line %d of the burst: ok %t suppressed %d, want written, 0", i, ok, n)
		}
	}
	for i := range 5 {
		if ok, _ := l.Allow("a", t0.Add(9*time.Second)); ok {
			t.Fatalf("line %d past the burst written", i)
		}
	}
	if ok, n := l.Allow("b", t0.Add(9*time.Second)); !ok || n != 0 {
		t.Fatalf("another kind: ok %t suppressed %d, want written, 0: kinds are limited apart", ok, n)
	}
	// The period began with the first line, at t0: it ends at t0+10s.
	if ok, _ := l.Allow("a", t0.Add(10*time.Second-time.Nanosecond)); ok {
		t.Fatal("line written before the period ended")
	}
	ok, n := l.Allow("a", t0.Add(10*time.Second))
	if !ok || n != 6 {
		t.Fatalf("first line of the next period: ok %t suppressed %d, want written, 6", ok, n)
	}
	if ok, n := l.Allow("a", t0.Add(11*time.Second)); !ok || n != 0 {
		t.Fatalf("second line of the next period: ok %t suppressed %d, want written, 0 (told once)", ok, n)
	}
	// A clock stepped back starts a period: the kind is not silenced for
	// the step's length.
	l.Allow("a", t0.Add(12*time.Second)) // the third: the burst is used up
	if ok, _ := l.Allow("a", t0.Add(13*time.Second)); ok {
		t.Fatal("fourth line of a period written")
	}
	if ok, n := l.Allow("a", t0); !ok || n != 1 {
		t.Fatalf("after the clock stepped back: ok %t suppressed %d, want written, 1", ok, n)
	}
}

// TestNilLimitsNothing: a nil limiter writes every line.
func TestNilLimitsNothing(t *testing.T) {
	var l *Limiter
	var buf bytes.Buffer
	log := zerolog.New(&buf)
	for range 100 {
		l.Warn(&log, "k").Msg("x")
	}
	if n := strings.Count(buf.String(), "\n"); n != 100 {
		t.Fatalf("%d lines, want 100", n)
	}
}

// TestWarnWritesBurstAndTellsSuppressed: through the logger, a flood of one
// kind writes burst lines, and a line of the next period carries the number
// not written (the clock is the limiter's, moved by the test).
func TestWarnWritesBurstAndTellsSuppressed(t *testing.T) {
	l := New(2, time.Minute)
	now := time.Unix(1000, 0)
	l.now = func() time.Time { return now }
	var buf bytes.Buffer
	log := zerolog.New(&buf)
	for range 1000 {
		l.Warn(&log, "k").Str("f", "v").Msg("bad")
	}
	if n := strings.Count(buf.String(), "\n"); n != 2 {
		t.Fatalf("%d lines for a flood of 1000, want the burst, 2:\n%s", n, buf.String())
	}
	now = now.Add(time.Minute)
	buf.Reset()
	l.Error(&log, "k").Msg("bad")
	if got := buf.String(); !strings.Contains(got, `"level":"error"`) || !strings.Contains(got, `"lines_suppressed":998`) {
		t.Fatalf("line after the flood: %s, want an error line with lines_suppressed 998", got)
	}
	// A line the logger's level drops does not use up the kind's lines.
	quiet := log.Level(zerolog.ErrorLevel)
	for range 10 {
		l.Warn(&quiet, "q").Msg("dropped by level")
	}
	buf.Reset()
	l.Warn(&log, "q").Msg("written")
	if !strings.Contains(buf.String(), "written") || strings.Contains(buf.String(), "lines_suppressed") {
		t.Fatalf("line after lines dropped by level: %q, want written, nothing suppressed", buf.String())
	}
}

// TestREADMENamesTheDefaults: README's paragraph on hostile input in the
// logs states the defaults as they are.
func TestREADMENamesTheDefaults(t *testing.T) {
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("at most %d lines of one kind (one call\nsite; for poison records, one stream) in each %d s per service",
		defaults.LogBurst, int(defaults.LogPeriod/time.Second))
	if !strings.Contains(string(b), want) {
		t.Fatalf("README does not say %q", want)
	}
}
