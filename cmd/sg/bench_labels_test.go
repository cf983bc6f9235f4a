package main

import (
	"bytes"
	"context"
	"fmt"
	"runtime/pprof"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"
)

// natsReader is how nats.go's connection reader shows in a goroutine
// profile (the package path escaped).
const natsReader = "nats-io/nats%2ego.(*Conn).readLoop"

// goroutineGroups is the goroutine profile's groups (debug=1: one group per
// stack and label set, its labels on its first line).
func goroutineGroups(t *testing.T) []string {
	t.Helper()
	var b bytes.Buffer
	if err := pprof.Lookup("goroutine").WriteTo(&b, 1); err != nil {
		t.Fatal(err)
	}
	return strings.Split(b.String(), "\n\n")
}

// The phase profiles tell who a CPU sample was spent for by their labels:
// every service's goroutines carry sg=<role> and its connection's
// sg_conn=<role> (go tool pprof -tags reads them; BENCHMARKS.md's breakdown
// is made so).
func TestBenchLabelsItsGoroutines(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: starts sg")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	srv := testNATSServer(t)
	var groups []string
	if _, err := runBenchSystem(ctx, srv, benchConfig{}, false, zerolog.Nop(), func() (benchResult, error) {
		groups = goroutineGroups(t)
		return benchResult{}, nil
	}); err != nil {
		t.Fatal(err)
	}
	for _, role := range []string{"gw", "rc", "agg", "dap"} {
		work := fmt.Sprintf(`# labels: {"sg":%q}`, role)
		conn := fmt.Sprintf(`# labels: {"sg_conn":%q}`, role)
		var works, conns int
		for _, g := range groups {
			switch {
			case strings.Contains(g, work) && strings.Contains(g, "sg-project/sg/services/"):
				works++
			case strings.Contains(g, conn) && strings.Contains(g, natsReader):
				conns++
			}
		}
		if works == 0 || conns == 0 {
			t.Errorf("%s: %d groups of its own goroutines labelled sg=%s, %d connection readers labelled sg_conn=%s; want both",
				role, works, role, conns, role)
		}
	}
}

// dialAs labels the connection's goroutines with sg_conn alone, and leaves
// the labels of the goroutine that called it as they were.
func TestDialAsLabelsOnlyTheConnection(t *testing.T) {
	srv := testNATSServer(t)
	release := make(chan struct{})
	defer close(release)
	pprof.Do(context.Background(), pprof.Labels(labelWork, "caller"), func(context.Context) {
		nc, err := dialAs("floor", func() (*nats.Conn, error) { return nats.Connect(srv.ClientURL()) })
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		if err := nc.Flush(); err != nil { // its reader has read
			t.Fatal(err)
		}
		// A goroutine started now shows the labels this one carries.
		started := make(chan struct{})
		go parkLabelled(started, release)
		<-started
	})
	var conn, after bool
	for _, g := range goroutineGroups(t) {
		switch {
		case strings.Contains(g, natsReader):
			conn = conn || strings.Contains(g, `# labels: {"sg_conn":"floor"}`)
		case strings.Contains(g, "cmd/sg.parkLabelled"):
			after = strings.Contains(g, `# labels: {"sg":"caller"}`)
		}
	}
	if !conn || !after {
		t.Fatalf("connection reader labelled sg_conn=floor only: %v; the caller's goroutine still sg=caller after: %v", conn, after)
	}
}

// parkLabelled waits for release: a goroutine TestDialAsLabelsOnlyTheConnection
// finds by name.
func parkLabelled(started chan<- struct{}, release <-chan struct{}) {
	close(started)
	<-release
}
