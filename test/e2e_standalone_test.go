package test

import (
	"bufio"
	"context"
	"io"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"
	"time"
)

// The end-to-end test against a standalone nats-server process, as
// production runs it. The test builds the server from the nats-server
// module already in go.mod, so nothing but Go is needed.
func TestEndToEndAgainstStandaloneServer(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and starts a nats-server process")
	}
	url := startStandaloneServer(t)
	checkGetDataAcrossTiers(t, startSystem(t, systemOptions{url: url}))
}

var listening = regexp.MustCompile(`Listening for client connections on (\S+:\d+)`)

func startStandaloneServer(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	bin := filepath.Join(dir, "nats-server")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, "github.com/nats-io/nats-server/v2")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build nats-server: %v\n%s", err, out)
	}
	srv := exec.Command(bin, "-a", "127.0.0.1", "-p", "-1", "-js", "-sd", filepath.Join(dir, "js"), "-l", "/dev/stderr")
	stderr, err := srv.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		t.Fatalf("start nats-server: %v", err)
	}
	t.Cleanup(func() {
		_ = srv.Process.Kill()
		_ = srv.Wait()
	})
	// Wait for the server's own word that it listens, with a bound.
	found := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if m := listening.FindStringSubmatch(sc.Text()); m != nil {
				found <- "nats://" + m[1]
				break
			}
		}
		_, _ = io.Copy(io.Discard, stderr) // keep the pipe drained until exit
	}()
	select {
	case url := <-found:
		return url
	case <-time.After(30 * time.Second):
		t.Fatal("nats-server did not report its client port within 30s")
		return ""
	}
}
