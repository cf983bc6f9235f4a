package stall

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/rs/zerolog"

	"github.com/sg-project/sg/services/loglimit"
)

// TestWake pins the rule: any lateness past the period is returned (to be
// credited), a quarter period or more counts as a stall, a whole period or
// more is warned of; the first wake, one on time and a clock that went back
// measure nothing.
func TestWake(t *testing.T) {
	const period = 100 * time.Millisecond
	var logged bytes.Buffer
	log := zerolog.New(&logged)
	stalls := prometheus.NewCounter(prometheus.CounterOpts{Name: "test_stalls_total"})
	w := Watch{Period: period, Stalls: stalls, Log: &log, Warn: "loop stalled"}
	count := func() float64 {
		var m dto.Metric
		if err := stalls.Write(&m); err != nil {
			t.Fatal(err)
		}
		return m.GetCounter().GetValue()
	}
	at := time.Unix(1_000_000, 0)
	for i, c := range []struct {
		after         time.Duration
		late          time.Duration
		stalls, warns int
	}{
		{0, 0, 0, 0}, // the first wake: nothing to measure from
		{period, 0, 0, 0},
		{period / 2, 0, 0, 0},
		{period + period/4 - 1, period/4 - 1, 0, 0}, // jitter: credited, not a stall
		{period + period/4, period / 4, 1, 0},
		{2*period - 1, period - 1, 2, 0},
		{2 * period, period, 3, 1},
		{-time.Second, 0, 3, 1}, // the clock went back: not a wake to measure from
		{time.Second + period + 7, 7, 3, 1},
	} {
		at = at.Add(c.after)
		if late := w.Wake(at); late != c.late {
			t.Fatalf("wake %d, %v after the last: late %v, want %v", i, c.after, late, c.late)
		}
		if n := count(); n != float64(c.stalls) {
			t.Fatalf("wake %d: %v stalls counted, want %d", i, n, c.stalls)
		}
		if n := strings.Count(logged.String(), "loop stalled"); n != c.warns {
			t.Fatalf("wake %d: %d warnings, want %d: %s", i, n, c.warns, logged.String())
		}
	}
}

// TestCredit: a last-heard time moves forward by the lateness, never past
// the wake; one heard at or after the wake stays.
func TestCredit(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	for _, c := range []struct {
		last, late, want time.Duration // last and want before now
	}{
		{-time.Second, 300 * time.Millisecond, -700 * time.Millisecond},
		{-time.Second, 10 * time.Second, 0},
		{-time.Second, 0, -time.Second},
		{0, time.Second, 0},
		{time.Second, time.Second, time.Second}, // heard after the wake
	} {
		if got := Credit(now.Add(c.last), c.late, now); !got.Equal(now.Add(c.want)) {
			t.Errorf("Credit(now%+v, %v): now%+v, want now%+v", c.last, c.late, got.Sub(now), c.want)
		}
		n := now.UnixNano()
		if got := CreditNanos(n+int64(c.last), int64(c.late), n); got != n+int64(c.want) {
			t.Errorf("CreditNanos(now%+v, %v): now%+v, want now%+v", c.last, c.late, time.Duration(got-n), c.want)
		}
	}
}

// TestStarvedLoopWarnsWithinTheLimit: a loop stalled at every wake (a
// starved process; the RC wakes down to every 10 ms) counts every stall but
// warns at most loglimit's burst in each of its periods, judged on the
// wakes' own times; the first warning of the next period says how many
// were not written.
func TestStarvedLoopWarnsWithinTheLimit(t *testing.T) {
	const period = 10 * time.Millisecond
	var logged bytes.Buffer
	log := zerolog.New(&logged)
	stalls := prometheus.NewCounter(prometheus.CounterOpts{Name: "test_stalls_total"})
	w := Watch{Period: period, Stalls: stalls, Log: &log, Warn: "loop stalled", Limit: loglimit.New(3, time.Second)}
	at := time.Unix(1_000_000, 0)
	w.Wake(at)
	for range 50 { // 50 wakes, each a period late: 1 s in all
		at = at.Add(2 * period)
		w.Wake(at)
	}
	var m dto.Metric
	if err := stalls.Write(&m); err != nil {
		t.Fatal(err)
	}
	if n := m.GetCounter().GetValue(); n != 50 {
		t.Fatalf("stalls counted %v, want 50", n)
	}
	if n := strings.Count(logged.String(), "loop stalled"); n != 3 {
		t.Fatalf("%d warnings for 50 stalls in one period of the limit, want its burst, 3:\n%s", n, logged.String())
	}
	logged.Reset()
	w.Wake(at.Add(2 * period)) // the limit's next period
	if got := logged.String(); !strings.Contains(got, `"lines_suppressed":47`) {
		t.Fatalf("first warning of the next period %q, want lines_suppressed 47", got)
	}
}
