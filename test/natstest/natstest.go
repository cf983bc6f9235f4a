// Package natstest starts an embedded nats-server for tests: loopback only,
// a random port, JetStream in a temporary directory, shut down when the test
// ends; and holds the bounded waits those tests share (Subscribe, Receive).
package natstest

import (
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// Start runs a server for the test and returns it; tune adjusts its options
// (e.g. MaxPayload).
func Start(t testing.TB, tune ...func(*server.Options)) *server.Server {
	t.Helper()
	opts := &server.Options{
		Host:      "127.0.0.1",
		Port:      -1,
		NoLog:     true,
		NoSigs:    true,
		JetStream: true,
		StoreDir:  t.TempDir(),
	}
	for _, f := range tune {
		f(opts)
	}
	s, err := server.NewServer(opts)
	if err != nil {
		t.Fatalf("natstest: new server: %v", err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		s.Shutdown()
		t.Fatal("natstest: server not ready within 10s")
	}
	t.Cleanup(func() {
		s.Shutdown()
		s.WaitForShutdown()
	})
	return s
}

// Connect opens a client connection, closed when the test ends.
func Connect(t testing.TB, s *server.Server) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(s.ClientURL(), nats.Name(t.Name()))
	if err != nil {
		t.Fatalf("natstest: connect: %v", err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// Subscribe is a synchronous subscription that buffers without limit, so a
// test that reads late loses nothing; the server has it when it returns.
func Subscribe(t testing.TB, nc *nats.Conn, subject string) *nats.Subscription {
	t.Helper()
	sub, err := nc.SubscribeSync(subject)
	if err != nil {
		t.Fatalf("natstest: subscribe %s: %v", subject, err)
	}
	if err := sub.SetPendingLimits(-1, -1); err != nil {
		t.Fatalf("natstest: pending limits: %v", err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatalf("natstest: flush: %v", err)
	}
	return sub
}

// Receive is the next value on ch, waited for at most within: a value that
// never comes fails the test (naming what was awaited), not the whole run
// at its timeout.
func Receive[T any](t testing.TB, ch <-chan T, what string, within time.Duration) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(within):
		t.Fatalf("no %s within %s", what, within)
		panic("unreachable")
	}
}
