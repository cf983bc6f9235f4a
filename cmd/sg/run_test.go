package main

import (
	"bufio"
	"context"
	"io"
	"strings"
	"testing"
	"time"
)

// TestRunAllInOne runs `sg run` as main does, on a free port with a
// temporary data directory: the sample query must come back as a table of
// the six eu symbols, and the command must stop cleanly when ctx ends.
func TestRunAllInOne(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the whole system")
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		err := realMain(ctx, []string{"run", "--nats-listen", "127.0.0.1:0", "--data", t.TempDir(), "--log-level", "error"}, pw, io.Discard)
		pw.Close()
		done <- err
	}()
	lines := make(chan string)
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	var out []string
	bound := time.After(90 * time.Second)
wait:
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				break wait
			}
			out = append(out, l)
			if strings.HasPrefix(l, "sg run: serving") {
				break wait
			}
		case <-bound:
			t.Fatalf("no sample answer within the bound; output so far:\n%s", strings.Join(out, "\n"))
		}
	}
	text := strings.Join(out, "\n")
	if !strings.Contains(text, "(6 rows)") || !strings.Contains(text, "VOD.L") || !strings.Contains(text, "trades") {
		t.Fatalf("sample query output:\n%s", text)
	}
	cancel()
	go func() {
		for range lines {
		}
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("sg run did not stop")
	}
}
