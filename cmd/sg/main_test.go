package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"
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
