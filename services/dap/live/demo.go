package live

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"github.com/sg-project/sg/messages"
	"github.com/sg-project/sg/services/dap/demo"
	"github.com/sg-project/sg/services/dap/parquetdb"
	"github.com/sg-project/sg/subjects"
)

// DemoConfig configures the live demo: a group per demo region (eu, us, asia) with
// generated history in Parquet, and optionally a feed of generated trades and quotes.
type DemoConfig struct {
	NC       *nats.Conn
	Subjects subjects.Subjects
	Log      zerolog.Logger
	RCID     string
	Assembly string
	Dir      string // one directory per region below it: <Dir>/region=<region>

	Seed    uint64
	History time.Duration // history generated into a fresh region's hdb; default 72h, negative: none

	EOIEvery, EODEvery, Lateness time.Duration

	FeedRate int           // rows a second over all regions (1 in 5 a trade); 0: no feed
	FeedTick time.Duration // feed publishes every FeedTick; default 100ms
	RefEvery time.Duration // a reference (instrument) update every RefEvery; 0: none

	Concurrency int
	Heartbeat   time.Duration
	Registry    prometheus.Registerer // the groups' sg_live_* counters; nil: none
}

// DemoDAPs is the number of DAPs RunDemo starts.
func DemoDAPs() int { return 3 * len(demo.Regions) }

// RunDemo runs the live demo until ctx ends.
func RunDemo(ctx context.Context, cfg DemoConfig) error {
	if cfg.History == 0 {
		cfg.History = 72 * time.Hour
	}
	if cfg.FeedTick == 0 {
		cfg.FeedTick = 100 * time.Millisecond
	}
	if cfg.Concurrency == 0 {
		cfg.Concurrency = 4
	}
	if cfg.Subjects.Prefix() == "" {
		cfg.Subjects = subjects.Default()
	}
	now := time.Now().UTC()
	start := now.Truncate(time.Second)
	hist := demo.Config{Seed: cfg.Seed}
	var groups []*Group
	for _, region := range demo.Regions {
		dir := filepath.Join(cfg.Dir, "region="+region)
		if cfg.History > 0 {
			if err := seedHistory(dir, hist, region, start.Add(-cfg.History), start); err != nil {
				return err
			}
		}
		inst, err := hist.Rows(demo.Instrument, region, time.Time{}, time.Time{})
		if err != nil {
			return err
		}
		g, err := NewGroup(GroupConfig{NC: cfg.NC, Subjects: cfg.Subjects, Log: cfg.Log, Labels: messages.LabelSet{demo.LabelKey: region},
			RCID: cfg.RCID, Assembly: cfg.Assembly, Dir: dir, Tables: demo.Defs(),
			Reference: map[string]messages.Table{demo.Instrument: inst}, Start: start,
			EOIEvery: cfg.EOIEvery, EODEvery: cfg.EODEvery, Lateness: cfg.Lateness,
			Concurrency: cfg.Concurrency, Heartbeat: cfg.Heartbeat, Registry: cfg.Registry})
		if err != nil {
			return err
		}
		groups = append(groups, g)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	errc := make(chan error, len(groups)+1)
	for _, g := range groups {
		wg.Go(func() {
			if err := g.Run(ctx); err != nil {
				errc <- err
				cancel()
			}
		})
	}
	if cfg.FeedRate > 0 || cfg.RefEvery > 0 {
		wg.Go(func() {
			if err := runFeed(ctx, cfg, groups); err != nil && !errors.Is(err, context.Canceled) {
				errc <- err
				cancel()
			}
		})
	}
	wg.Wait()
	close(errc)
	var err error
	for e := range errc {
		err = errors.Join(err, e)
	}
	return err
}

// seedHistory writes generated trades and quotes of [from, to) into a fresh region's hdb
// (a directory with a manifest is left as it is: its data is the user's, or a former run's).
func seedHistory(dir string, cfg demo.Config, region string, from, to time.Time) error {
	if _, err := os.Stat(filepath.Join(dir, manifestName)); err == nil {
		return nil
	}
	for _, def := range demo.Defs() {
		if !def.IsTimeTable() {
			continue
		}
		for day := from; day.Before(to); day = day.Add(24 * time.Hour) {
			end := day.Add(24 * time.Hour)
			if end.After(to) {
				end = to
			}
			rows, err := cfg.Rows(def.Name, region, day, end)
			if err != nil {
				return err
			}
			if _, err := parquetdb.Write(filepath.Join(dir, "hdb"), def, rows, day.UnixNano(), end.UnixNano(), 0); err != nil {
				return fmt.Errorf("live: demo history of %s: %w", region, err)
			}
		}
	}
	return nil
}

// runFeed publishes generated rows of [last, now) every FeedTick, and an instrument
// update every RefEvery, until ctx ends.
func runFeed(ctx context.Context, cfg DemoConfig, groups []*Group) error {
	for _, g := range groups { // rows before a group's start would be late
		select {
		case <-g.Ready():
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	pub, err := NewPublisher(cfg.NC, cfg.Subjects, demo.LabelKey)
	if err != nil {
		return err
	}
	perRegionDay := cfg.FeedRate * 86400 / len(demo.Regions)
	gen := demo.Config{Seed: cfg.Seed ^ 0x5eed, TradesPerDay: max(perRegionDay/5, 1), QuotesPerDay: max(perRegionDay*4/5, 1)}
	tick := time.NewTicker(cfg.FeedTick)
	defer tick.Stop()
	var ref <-chan time.Time
	if cfg.RefEvery > 0 {
		t := time.NewTicker(cfg.RefEvery)
		defer t.Stop()
		ref = t.C
	}
	last, refs := time.Now().UTC(), 0
	cfg.Log.Info().Int("rows_per_second", cfg.FeedRate).Dur("ref_every", cfg.RefEvery).Msg("demo feed started")
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-ref:
			refs++
			region := demo.Regions[refs%len(demo.Regions)]
			inst, err := gen.Rows(demo.Instrument, region, time.Time{}, time.Time{})
			if err != nil {
				return err
			}
			inst = inst.Slice(0, 1)
			inst.Col("lotSize").Ints[0] += int64(refs) // a corporate action: the lot size changes
			if _, err := pub.Publish(ctx, demo.Instrument, inst); err != nil && ctx.Err() == nil {
				cfg.Log.Warn().Err(err).Msg("demo feed: reference update not published")
			}
		case now := <-tick.C:
			if cfg.FeedRate <= 0 {
				continue
			}
			now = now.UTC()
			for _, region := range demo.Regions {
				for _, table := range []string{demo.Trade, demo.Quote} {
					rows, err := gen.Rows(table, region, last, now)
					if err != nil {
						return err
					}
					if rows.NumRows() == 0 {
						continue
					}
					if _, err := pub.Publish(ctx, table, rows); err != nil && ctx.Err() == nil {
						cfg.Log.Warn().Err(err).Str("table", table).Msg("demo feed: rows not published")
					}
				}
			}
			last = now
		}
	}
}
