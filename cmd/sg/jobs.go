package main

import (
	"flag"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sg-project/sg/services/auth"
	"github.com/sg-project/sg/services/defaults"
	"github.com/sg-project/sg/services/gw"
	"github.com/sg-project/sg/services/retryafter"
)

// Async jobs and the dynamic Retry-After (issue 11). Defaults live in
// services/defaults; the environment is read by retryafter.FromEnv and here.
var (
	envJobRetention = envVar{"SG_JOB_RETENTION", ""} // how long a finished job's answer is kept
	envMaxJobs      = envVar{"SG_GW_MAX_JOBS", ""}   // async jobs one GW runs at once
	envJobsCreds    = envVar{"SG_GW_JOBS_CREDS", ""} // GW: client credential its async jobs run on
)

// JobsConfig configures the GW's async jobs and everyone's Retry-After.
type JobsConfig struct {
	Retention  time.Duration
	MaxRunning int
	RetryAfter retryafter.Config
	// Creds (SG_GW_JOBS_CREDS): the client credential `sg gw` runs its async
	// jobs on; "" with --creds: the client credential beside it, if sg auth
	// made one (see clientCreds).
	Creds string
}

func loadJobsConfig(look lookupFunc) (JobsConfig, error) {
	c := JobsConfig{}
	var err error
	if c.Retention, err = envDuration(look, envJobRetention, defaults.JobRetention); err != nil {
		return c, err
	}
	if c.MaxRunning, err = envInt(look, envMaxJobs, defaults.GWMaxJobs, 1); err != nil {
		return c, err
	}
	if c.RetryAfter, err = retryafter.FromEnv(retryafter.Config{}.WithDefaults(), look); err != nil {
		return c, err
	}
	c.Creds = envString(look, envJobsCreds, "")
	return c, nil
}

// addJobsFlags adds the flags of JobsConfig (same names as the env, lower case).
func addJobsFlags(fs *flag.FlagSet, c *JobsConfig) {
	fs.DurationVar(&c.Retention, "job-retention", c.Retention, "how long a finished async job's answer is kept; its record twice as long (env SG_JOB_RETENTION)")
	fs.IntVar(&c.MaxRunning, "max-jobs", c.MaxRunning, "async jobs one GW runs at once; past it RATE_LIMITED (env SG_GW_MAX_JOBS)")
	fs.StringVar(&c.Creds, "jobs-creds", c.Creds, "client credential the GW's async jobs run on, under NATS auth (default: client.nk beside --creds) (env SG_GW_JOBS_CREDS)")
	addRetryAfterFlags(fs, &c.RetryAfter)
}

// addRetryAfterFlags: the seed's parameters (env SG_RETRY_*).
func addRetryAfterFlags(fs *flag.FlagSet, c *retryafter.Config) {
	fs.DurationVar(&c.Min, "retry-min", c.Min, "Retry-After floor, min_seconds (env SG_RETRY_MIN)")
	fs.DurationVar(&c.Max, "retry-max", c.Max, "Retry-After ceiling, max_seconds (env SG_RETRY_MAX)")
	fs.Float64Var(&c.SafetyMargin, "retry-safety-margin", c.SafetyMargin, "multiplier on the ETA, safety_margin 0.0-1.0 (env SG_RETRY_SAFETY_MARGIN)")
	fs.DurationVar(&c.NominalExec, "retry-nominal-exec", c.NominalExec, "a portion's execution time until one is measured, P (env SG_RETRY_NOMINAL_EXEC)")
	fs.DurationVar(&c.NominalAgg, "retry-nominal-agg", c.NominalAgg, "the Agg's merge and the way back, T (env SG_RETRY_NOMINAL_AGG)")
}

// clientCreds is the credential the GW's async jobs run on: Creds, else,
// when the GW has a credential (auth on), the client credential sg auth
// made beside it; "" means the GW's own connection.
func (c JobsConfig) clientCreds(gwCreds string) string {
	if c.Creds != "" {
		return c.Creds
	}
	return auth.ClientSeedBeside(gwCreds)
}

// gw is the GW's Jobs; nil without JetStream (async is then NOT_SUPPORTED).
// nc: the client connection jobs run on (nil: the GW's own; see gw.Jobs.NC).
func (c JobsConfig) gw(d DurabilityConfig, nc *nats.Conn) *gw.Jobs {
	if !d.JetStream {
		return nil
	}
	ra := c.RetryAfter
	ra.NoDefaults = true // every field is set: a margin of 0 stays 0
	return &gw.Jobs{Retention: c.Retention, MaxRunning: c.MaxRunning, Replicas: d.Replicas, Memory: d.Storage == "memory", RetryAfter: ra, NC: nc}
}
