package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/sg-project/sg/services/defaults"
)

func TestHelpEverySubcommand(t *testing.T) {
	for name := range commands {
		t.Run(name, func(t *testing.T) {
			var out, errb bytes.Buffer
			if err := realMain(context.Background(), []string{name, "--help"}, &out, &errb); err != nil {
				t.Fatalf("sg %s --help: %v (stderr %s)", name, err, errb.String())
			}
			if !strings.Contains(out.String(), "Usage: sg "+name) || !strings.Contains(out.String(), "Flags:") {
				t.Fatalf("sg %s --help printed:\n%s", name, out.String())
			}
		})
	}
	var out bytes.Buffer
	if err := realMain(context.Background(), []string{"--help"}, &out, &out); err != nil || !strings.Contains(out.String(), "SG_TIMEOUT_MARGIN") {
		t.Fatalf("sg --help: %v\n%s", err, out.String())
	}
	// Each setting's own line has its names, help and default: a default
	// shared by several (none, "") found on any line would prove nothing.
	lines := map[string][]string{}
	for l := range strings.Lines(out.String()) {
		if f := strings.Fields(l); len(f) > 0 && strings.HasPrefix(f[0], "SG_") {
			lines[f[0]] = append(lines[f[0]], strings.TrimSuffix(l, "\n"))
		}
	}
	for _, s := range defaults.Table { // one home: README's table is checked against the same
		name := s.Env
		if s.KXI != "" {
			name += " / " + s.KXI
		}
		d := strings.ReplaceAll(s.Default, "`", "")
		if l := lines[s.Env]; len(l) != 1 || !strings.HasPrefix(strings.TrimSpace(l[0]), name+" ") ||
			!strings.HasSuffix(l[0], " "+s.Help+"; default "+d) {
			t.Errorf("sg --help's lines of %s are %q, want one: %s, %s; default %s", s.Env, l, name, s.Help, d)
		}
	}
}

func TestBadCommandLines(t *testing.T) {
	for _, args := range [][]string{
		{},
		{"nope"},
		{"gw", "--bogus"},
		{"query"},
		{"query", "getData", "{}", "extra"},
		{"query", "getData", "--format", "xml"},
		{"query", "getData", "--opts", `{"timeoutx":1}`},
		{"gw", "--affinity", "medium"},
		{"nats", "--listen", "nowhere", "--data", "x"},
	} {
		var out, errb bytes.Buffer
		if err := realMain(context.Background(), args, &out, &errb); err == nil {
			t.Errorf("sg %q: no error", args)
		}
	}
}

func TestNATSCommandStartsAndStops(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	var out, errb bytes.Buffer
	done := make(chan error, 1)
	go func() {
		done <- realMain(ctx, []string{"nats", "--listen", "127.0.0.1:0", "--data", t.TempDir()}, &out, &errb)
	}()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("sg nats did not stop")
	}
}

// sg bench runs end to end on its own system and writes a table in which
// every figure was measured (no zero, no missing ratio).
func TestBenchWritesTable(t *testing.T) {
	if testing.Short() {
		t.Skip("starts two systems")
	}
	out := filepath.Join(t.TempDir(), "BENCHMARKS.md")
	var stdout, stderr bytes.Buffer
	err := realMain(context.Background(), []string{"bench", "--requests", "10", "--clients", "2", "--duration", "200ms", "--large", "1", "--large-last", "20m", "--publish-mib", "8", "--out", out}, &stdout, &stderr)
	if err != nil {
		t.Fatalf("sg bench: %v\n%s", err, stderr.String())
	}
	doc, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"request log on", "request log off", "- command: `sg bench --requests 10", "- machine: ", "small getData p50", "large answer", "large answer, CPU (plain: publish) | core-ms/MB", "Large answers run: 1 JSON"} {
		if !strings.Contains(string(doc), want) {
			t.Errorf("BENCHMARKS.md lacks %q:\n%s", want, doc)
		}
	}
	for _, line := range strings.Split(string(doc), "\n") {
		if strings.HasPrefix(line, "| small") || strings.HasPrefix(line, "| large") {
			if strings.Contains(line, "| - |") || strings.Contains(line, "| 0.00 |") {
				t.Errorf("a figure was not measured: %s", line)
			}
		}
	}
}

// testNATSServer starts the embedded NATS server with JetStream in a
// temporary directory, on a free loopback port, shut down when t ends.
func testNATSServer(t testing.TB) *server.Server {
	t.Helper()
	srv, err := startNATSServer("127.0.0.1:0", t.TempDir(), false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
	return srv
}
