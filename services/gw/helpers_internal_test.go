package gw

import (
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/sg-project/sg/subjects"
)

// newTestGW is a GW "gw1" on nc, not started: for a test that drives its
// parts directly.
func newTestGW(t *testing.T, nc *nats.Conn) *GW {
	t.Helper()
	g, err := New(Config{ID: "gw1", NC: nc, Subjects: subjects.Default(), Log: zerolog.New(zerolog.NewTestWriter(t))})
	if err != nil {
		t.Fatal(err)
	}
	return g
}
