package main

import (
	"context"
	"os"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"github.com/sg-project/sg/services/agg"
	"github.com/sg-project/sg/subjects"
)

// runAgg runs an Agg until ctx ends.
func runAgg(ctx context.Context, cfg AggConfig, nc *nats.Conn, s subjects.Subjects, log zerolog.Logger, reg prometheus.Registerer) error {
	a, err := newAgg(cfg, nc, s, log, reg)
	if err != nil {
		return err
	}
	return a.Run(ctx)
}

// newAgg builds the Agg of cfg (sg run waits for its Ready).
func newAgg(cfg AggConfig, nc *nats.Conn, s subjects.Subjects, log zerolog.Logger, reg prometheus.Registerer) (*agg.Agg, error) {
	c := agg.Config{ID: cfg.ID, NC: nc, Subjects: s, Log: log, MaxAnswerBytes: cfg.MaxAnswerBytes, Registry: reg}
	if err := c.LimitsFromEnv(os.LookupEnv); err != nil { // SG_AGG_MAX_BYTES...
		return nil, err
	}
	return agg.New(c)
}
