package main

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/sg-project/sg/subjects"
)

// The pass sg bench calls "request log on" runs a GW that writes the log
// (each answered request leaves its `answered` record, until its TTL), and
// the pass "request log off" one that writes nothing: TestBenchRunsEndToEnd
// sees only the passes' names.
func TestBenchPassesWriteTheRequestLogOrNot(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: starts sg twice")
	}
	const n = 5
	for _, withLog := range []bool{true, false} {
		t.Run(fmt.Sprintf("log=%v", withLog), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			srv := testNATSServer(t)
			var records uint64
			var found bool
			_, err := runBenchSystem(ctx, srv, benchConfig{}, withLog, zerolog.Nop(), func() (benchResult, error) {
				c, err := nats.Connect(srv.ClientURL())
				if err != nil {
					return benchResult{}, err
				}
				defer c.Close()
				s, _ := subjects.New(subjects.DefaultPrefix)
				args, err := smallArgs().MarshalJSON()
				if err != nil {
					return benchResult{}, err
				}
				for range n {
					if _, err := jsonCall(ctx, c, s, args); err != nil {
						return benchResult{}, err
					}
				}
				js, err := jetstream.New(c)
				if err != nil {
					return benchResult{}, err
				}
				st, err := js.Stream(ctx, s.RequestLogStream())
				switch {
				case errors.Is(err, jetstream.ErrStreamNotFound):
					return benchResult{}, nil
				case err != nil:
					return benchResult{}, err
				}
				found, records = true, st.CachedInfo().State.Msgs
				return benchResult{}, nil
			})
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case withLog && (!found || records != n):
				t.Fatalf("log on: %d records in the request log (stream found: %v), want %d `answered`", records, found, n)
			case !withLog && records != 0:
				t.Fatalf("log off: %d records in the request log", records)
			}
		})
	}
}
