package dap

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"github.com/sg-project/sg/messages"
	"github.com/sg-project/sg/services/dap/demo"
	"github.com/sg-project/sg/services/dap/engine"
	"github.com/sg-project/sg/subjects"
)

// DemoFleetConfig configures the demo fleet: a DAP per region (eu, us, asia), tier and
// replica, each with its own store holding its shard of the seeded demo data.
type DemoFleetConfig struct {
	NC       *nats.Conn
	Subjects subjects.Subjects // zero value: subjects.Default()
	Log      zerolog.Logger
	RCID     string // the RC that owns the DAPs; "" = any
	Assembly string // assembly of every DAP; "" = none

	Seed       uint64
	Start, End time.Time // the data's range; default: the 3 days ending now
	Replicas   int       // DAPs per region and tier; default 1

	IDPrefix     string        // DAP ids are <IDPrefix>-<region>-<tier>-<replica>; default "dap"
	Concurrency  int           // per DAP; default 4
	Heartbeat    time.Duration // default DefaultHeartbeat
	MaxQueue     int           // per DAP; default DefaultMaxQueue
	TradesPerDay int           // per region; 0 = demo's default
	QuotesPerDay int           // per region; 0 = demo's default

	// Registry receives the DAPs' metrics (labelled dap); nil: none.
	Registry prometheus.Registerer

	// Wrap, when set, wraps each DAP's source (sg run --throttle: ThrottleDemo).
	Wrap func(DemoShard, Source) Source
}

// DemoShard is one DAP of the demo fleet: its data shard and its configuration (without
// NC, Log and Source, which RunDemoFleet fills).
type DemoShard struct {
	Shard  demo.Shard
	Config Config
}

// DemoFleet is the layout of the demo fleet, so that tests can compute expected
// answers directly with the engine (Data.Load / LoadAll).
type DemoFleet struct {
	Data   demo.Config
	Layout demo.Layout
	Shards []DemoShard
}

// Tables of the demo DAPs. trade and quote are partitioned by region and time on every
// tier. instrument is reference data: the demo loads it on the hdb tier only (once per
// region, so it is never counted twice), so it is registered as sharded (one portion per
// region, no time split) by the hdb DAPs alone.
var (
	demoTimeTables = []messages.TableInfo{{Name: demo.Trade, Kind: messages.TablePartitioned}, {Name: demo.Quote, Kind: messages.TablePartitioned}}
	demoHDBTables  = append(append([]messages.TableInfo(nil), demoTimeTables...), messages.TableInfo{Name: demo.Instrument, Kind: messages.TableSharded})
)

// demoLayout cuts [start, end) among the tiers: rdb the last hour, idb the 12 hours
// before, hdb the rest (each at most a quarter of a short range, so none is empty).
func demoLayout(start, end time.Time) demo.Layout {
	span := end.Sub(start)
	rdb := end.Add(-min(time.Hour, span/4))
	idb := rdb.Add(-min(12*time.Hour, span/4))
	return demo.Layout{Start: start, IDBStart: idb, RDBStart: rdb, End: end}
}

// DemoFleetInfo returns the fleet RunDemoFleet starts with the same config. Purviews:
// each tier's range, except that hdb's starts at -0Wp and rdb's ends at 0Wp, so that a
// request reaching beyond the data is answered with the data there is.
func DemoFleetInfo(cfg DemoFleetConfig) (DemoFleet, error) {
	if cfg.End.IsZero() {
		cfg.End = time.Now().UTC()
	}
	if cfg.Start.IsZero() {
		cfg.Start = cfg.End.Add(-72 * time.Hour)
	}
	if cfg.Replicas == 0 {
		cfg.Replicas = 1
	}
	if cfg.IDPrefix == "" {
		cfg.IDPrefix = "dap"
	}
	if cfg.Concurrency == 0 {
		cfg.Concurrency = 4
	}
	f := DemoFleet{Data: demo.Config{Seed: cfg.Seed, TradesPerDay: cfg.TradesPerDay, QuotesPerDay: cfg.QuotesPerDay},
		Layout: demoLayout(cfg.Start, cfg.End)}
	shards, err := demo.Fleet(f.Layout, cfg.Replicas)
	if err != nil {
		return DemoFleet{}, fmt.Errorf("dap: demo fleet: %w", err)
	}
	for _, s := range shards {
		c := Config{
			ID: fmt.Sprintf("%s-%s-%s-%d", cfg.IDPrefix, s.Region, s.Tier, s.Replica), RCID: cfg.RCID, Assembly: cfg.Assembly,
			Labels: messages.LabelSet{demo.LabelKey: s.Region}, Tier: messages.Tier(s.Tier),
			Purview: messages.TimeRange{Start: s.Start.UnixNano(), End: s.End.UnixNano()},
			Tables:  demoTimeTables, PurviewVersion: 1, ReferenceVintage: 1,
			Concurrency: cfg.Concurrency, Heartbeat: cfg.Heartbeat, MaxQueue: cfg.MaxQueue, Subjects: cfg.Subjects,
		}
		switch s.Tier {
		case demo.TierHDB:
			c.Purview.Start, c.Tables = messages.TSMin, demoHDBTables
		case demo.TierRDB:
			c.Purview.End = messages.TSMax
		}
		f.Shards = append(f.Shards, DemoShard{Shard: s, Config: c})
	}
	return f, nil
}

// Store returns a new store loaded with the shard's data (instrument on hdb only).
func (f DemoFleet) Store(s DemoShard) (*engine.Store, error) {
	st := engine.NewStore()
	return st, f.Data.LoadShard(st, s.Shard)
}

// LoadAll returns one store with all the fleet's data, once: the answer of any request
// on it is the answer the fleet must give.
func (f DemoFleet) LoadAll() (*engine.Store, error) {
	st := engine.NewStore()
	for _, r := range demo.Regions {
		if err := f.Data.Load(st, r, f.Layout.Start, f.Layout.End, true); err != nil {
			return nil, err
		}
	}
	return st, nil
}

// RunDemoFleet loads the demo fleet's data (every DAP its own store, loaded in parallel),
// then runs all its DAPs on cfg.NC until ctx ends. It returns the first error of a DAP,
// after stopping the others.
func RunDemoFleet(ctx context.Context, cfg DemoFleetConfig) error {
	f, err := DemoFleetInfo(cfg)
	if err != nil {
		return err
	}
	daps := make([]*DAP, len(f.Shards))
	errs := make([]error, len(f.Shards))
	var wg sync.WaitGroup
	for i, s := range f.Shards {
		wg.Go(func() {
			store, err := f.Store(s)
			if err != nil {
				errs[i] = fmt.Errorf("dap: load %s: %w", s.Config.ID, err)
				return
			}
			c := s.Config
			c.NC, c.Log, c.Source, c.Registry = cfg.NC, cfg.Log, EngineSource{Store: store}, cfg.Registry
			if cfg.Wrap != nil {
				c.Source = cfg.Wrap(s, c.Source)
			}
			daps[i], errs[i] = New(c)
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	cfg.Log.Info().Int("daps", len(daps)).Time("start", f.Layout.Start).Time("end", f.Layout.End).Msg("demo fleet loaded")

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var once sync.Once
	var first error
	for _, d := range daps {
		wg.Go(func() {
			if err := d.Run(ctx); err != nil {
				once.Do(func() { first = err })
				cancel()
			}
		})
	}
	wg.Wait()
	return first
}
