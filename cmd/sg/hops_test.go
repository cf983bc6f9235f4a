package main

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/sg-project/sg/subjects"
)

// TestHopBreakdown measures where a small request's time goes, hop by hop:
// a monitor connection (in process, as the services') subscribed to every
// subject stamps each message as the server delivers it, and the gaps
// between the messages of one request, averaged over SG_HOPS sequential
// requests, are what each service and hop cost (the monitor's own delivery
// delay is in every stamp alike). Plain NATS request-reply to an echo
// responder is measured the same way beside it. It is a measurement (its only
// check: every request's messages on the critical path were seen and named),
// so it runs only with SG_HOPS set, e.g.
//
//	SG_HOPS=3000 go test ./cmd/sg -run TestHopBreakdown -v -count=1
//
// With SG_HOPS_QUIET set there is no monitor, for an execution trace of the
// requests alone (go test -trace; the goroutine wake-ups per request).
func TestHopBreakdown(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("SG_HOPS"))
	if n <= 0 {
		t.Skip("a measurement: set SG_HOPS to the number of requests")
	}
	for _, withLog := range []bool{true, false} {
		t.Run(fmt.Sprintf("log=%v", withLog), func(t *testing.T) { hopBreakdown(t, n, withLog) })
	}
}

type stamp struct {
	subject, reply string
	at             time.Time
}

func hopBreakdown(t *testing.T, n int, withLog bool) {
	ctx := context.Background()
	srv := testNATSServer(t)
	log := zerolog.New(os.Stderr).Level(zerolog.ErrorLevel)
	_, err := runBenchSystem(ctx, srv, benchConfig{}, withLog, log, func() (benchResult, error) {
		mon, err := nats.Connect(srv.ClientURL(), inProcess(srv))
		if err != nil {
			return benchResult{}, err
		}
		defer mon.Close()
		var mu sync.Mutex
		var stamps []stamp
		on := false
		watch := ">"
		if os.Getenv("SG_HOPS_QUIET") != "" {
			watch = "_sg_hops.nothing" // no monitor: a trace (-trace) sees the request alone
		}
		sub, err := mon.Subscribe(watch, func(m *nats.Msg) {
			at := time.Now()
			mu.Lock()
			if on {
				stamps = append(stamps, stamp{m.Subject, m.Reply, at})
			}
			mu.Unlock()
		})
		if err != nil {
			return benchResult{}, err
		}
		_ = sub.SetPendingLimits(-1, -1)
		if err := mon.Flush(); err != nil {
			return benchResult{}, err
		}
		c, err := nats.Connect(srv.ClientURL())
		if err != nil {
			return benchResult{}, err
		}
		defer c.Close()
		resp, err := nats.Connect(srv.ClientURL())
		if err != nil {
			return benchResult{}, err
		}
		defer resp.Close()
		if _, err := resp.Subscribe("_sg_bench.echo", func(m *nats.Msg) { _ = m.Respond(m.Data) }); err != nil {
			return benchResult{}, err
		}
		_ = resp.Flush()
		s, _ := subjects.New(subjects.DefaultPrefix)
		args, err := smallArgs().MarshalJSON()
		if err != nil {
			return benchResult{}, err
		}
		calls := map[string]func() error{
			"plain": func() error { _, err := c.Request("_sg_bench.echo", args, 10*time.Second); return err },
			"json":  func() error { _, err := jsonCall(ctx, c, s, args); return err },
		}
		for _, name := range []string{"plain", "json"} {
			for range 200 { // warm up
				if err := calls[name](); err != nil {
					return benchResult{}, err
				}
			}
			mu.Lock()
			stamps, on = stamps[:0], true
			mu.Unlock()
			var rtt []float64
			for range n {
				t0 := time.Now()
				if err := calls[name](); err != nil {
					return benchResult{}, err
				}
				rtt = append(rtt, float64(time.Since(t0).Nanoseconds())/1e3)
			}
			mu.Lock()
			on = false
			got := slices.Clone(stamps)
			mu.Unlock()
			report(t, name, withLog, got, rtt)
		}
		return benchResult{}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// class names a message of a small request by what it is.
func class(st stamp, clientInbox string, seenEntry bool) string {
	sub := st.subject
	switch {
	case sub == "_sg_bench.echo":
		return "0 plain request"
	case sub == "sg.api.getData":
		return "1 client->GW"
	case strings.HasSuffix(sub, ".submit"):
		return "2 GW->RC submit"
	case strings.HasSuffix(sub, ".portion"):
		return "3 RC->DAP portion"
	case strings.HasSuffix(sub, ".expect"):
		return "4 RC->Agg expect"
	case strings.HasSuffix(sub, ".partial"):
		return "5 DAP->Agg partial"
	case strings.HasSuffix(sub, ".completion"):
		return "6 DAP->RC completion"
	case strings.HasPrefix(sub, "sg.gw.") && strings.Contains(sub, ".answer."):
		return "7 Agg->GW answer"
	case strings.HasSuffix(sub, ".aggdone"):
		return "9 Agg->RC aggdone"
	case strings.HasPrefix(sub, "sg.log.req."):
		if seenEntry {
			return "L2 answered write"
		}
		return "L1 entry write"
	case clientInbox != "" && strings.HasPrefix(sub, clientInbox):
		return "8 GW->client reply"
	case strings.HasPrefix(sub, "_INBOX."):
		return "LA log ack"
	}
	return "other " + sub
}

// report prints, per message class, the median and mean time since the
// request's first message, and the client's round trip.
func report(t *testing.T, name string, withLog bool, stamps []stamp, rtt []float64) {
	since := map[string][]float64{}
	counts := map[string]int{}
	var t0 time.Time
	inbox := ""
	entry := false
	acks := 0
	requests := 0
	for _, st := range stamps {
		if st.subject == "_sg_bench.echo" || st.subject == "sg.api.getData" {
			t0, inbox, entry, acks = st.at, st.reply, false, 0
			requests++
		}
		if t0.IsZero() {
			continue
		}
		c := class(st, inbox, entry)
		if c == "L1 entry write" {
			entry = true
		}
		if c == "LA log ack" {
			acks++
			c = fmt.Sprintf("LA%d log ack", acks)
		}
		if name == "plain" && c == "8 GW->client reply" {
			c = "0 plain reply"
		}
		since[c] = append(since[c], float64(st.at.Sub(t0).Nanoseconds())/1e3)
		counts[c]++
	}
	keys := make([]string, 0, len(since))
	for k := range since {
		keys = append(keys, k)
	}
	// In the order they come, by median.
	med := func(k string) float64 { return median(since[k]) }
	slices.SortFunc(keys, func(a, b string) int {
		switch {
		case med(a) < med(b):
			return -1
		case med(a) > med(b):
			return 1
		}
		return strings.Compare(a, b)
	})
	// The messages on the critical path were seen and named for (nearly:
	// the monitor's stamps of the first and last requests may fall outside
	// the window) every request: a change of subjects that class no longer
	// knows fails here rather than leaving the table without them.
	want := []string{"0 plain request", "0 plain reply"}
	if name != "plain" {
		want = []string{"1 client->GW", "2 GW->RC submit", "3 RC->DAP portion", "5 DAP->Agg partial", "7 Agg->GW answer", "8 GW->client reply"}
		if withLog {
			want = append(want, "L1 entry write", "L2 answered write")
		}
	}
	for _, k := range want {
		if counts[k] < requests*9/10 {
			t.Errorf("%s, log %v: %q seen %d times in %d requests", name, withLog, k, counts[k], requests)
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\n%s, log %v: %d requests, client round trip median %.1f µs, mean %.1f µs\n", name, withLog, requests, median(rtt), mean(rtt))
	fmt.Fprintf(&b, "  %-24s %6s %10s %10s %10s\n", "message", "count", "median µs", "mean µs", "gap µs")
	prev := 0.0
	for _, k := range keys {
		if counts[k] < requests/2 {
			continue
		}
		m := med(k)
		fmt.Fprintf(&b, "  %-24s %6d %10.1f %10.1f %10.1f\n", k, counts[k], m, mean(since[k]), m-prev)
		prev = m
	}
	t.Log(b.String())
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}

func mean(v []float64) float64 {
	sum := 0.0
	for _, x := range v {
		sum += x
	}
	return sum / float64(max(len(v), 1))
}
