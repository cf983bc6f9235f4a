package demo

import (
	"fmt"
	"slices"
	"time"

	"github.com/sg-project/sg/services/dap/engine"
)

// Tiers, from the most recent data to the oldest.
const (
	TierRDB = "rdb"
	TierIDB = "idb"
	TierHDB = "hdb"
)

// Layout cuts [Start, End) among the tiers: hdb [Start, IDBStart), idb [IDBStart,
// RDBStart), rdb [RDBStart, End).
type Layout struct {
	Start, IDBStart, RDBStart, End time.Time
}

// Shard is one demo DAP: a region, a tier, a replica number and its purview [Start, End).
// Replicas of a tier hold the same data.
type Shard struct {
	Region  string
	Tier    string
	Replica int
	Start   time.Time
	End     time.Time
}

// Fleet returns a DAP per region, tier and replica (replicas >= 1); the purviews of one
// replica number cover [l.Start, l.End) once, without overlap.
func Fleet(l Layout, replicas int) ([]Shard, error) {
	if !(l.Start.Before(l.IDBStart) && l.IDBStart.Before(l.RDBStart) && l.RDBStart.Before(l.End)) || replicas < 1 {
		return nil, fmt.Errorf("demo: layout must have Start < IDBStart < RDBStart < End and replicas >= 1")
	}
	var out []Shard
	for _, region := range Regions {
		for _, tier := range []struct {
			name       string
			start, end time.Time
		}{{TierRDB, l.RDBStart, l.End}, {TierIDB, l.IDBStart, l.RDBStart}, {TierHDB, l.Start, l.IDBStart}} {
			for r := 0; r < replicas; r++ {
				out = append(out, Shard{Region: region, Tier: tier.name, Replica: r, Start: tier.start, End: tier.end})
			}
		}
	}
	return out, nil
}

// Load creates the demo tables in store (if missing) and appends the region's rows of
// [start, end), plus the region's instruments when withReference is set. A fleet loads
// the reference table on one tier per region (e.g. hdb), so that it is not counted twice.
func (c Config) Load(store *engine.Store, region string, start, end time.Time, withReference bool) error {
	tables := []string{Trade, Quote}
	if withReference {
		tables = append(tables, Instrument)
	}
	return c.LoadTables(store, region, start, end, tables...)
}

// LoadTables is Load with rows for the named tables only (every demo table
// is created): a DAP that serves trade holds no quotes, four times its rows.
func (c Config) LoadTables(store *engine.Store, region string, start, end time.Time, tables ...string) error {
	for _, def := range Defs() {
		if _, ok := store.Def(def.Name); !ok {
			if err := store.Create(def); err != nil {
				return err
			}
		}
		if !slices.Contains(tables, def.Name) {
			continue
		}
		if def.Name == Instrument {
			rows, err := c.Rows(def.Name, region, start, end)
			if err != nil {
				return err
			}
			if err := store.Append(def.Name, rows); err != nil {
				return err
			}
			continue
		}
		// A day at a time: the rows of [a, c) are those of [a, b) then [b, c)
		// (doc.go), and the DAP's memory holds its store and one day's
		// rows, not the store twice over (a DAP's peak is its load's).
		if err := store.Grow(def.Name, c.maxRows(def.Name, start, end)); err != nil {
			return err
		}
		for from := start; from.Before(end); {
			to := from.Add(loadChunk)
			if to.After(end) {
				to = end
			}
			rows, err := c.Rows(def.Name, region, from, to)
			if err != nil {
				return err
			}
			if err := store.Append(def.Name, rows); err != nil {
				return err
			}
			from = to
		}
	}
	return nil
}

// loadChunk is the time range of data LoadTables generates at once.
const loadChunk = 24 * time.Hour

// LoadShard loads one shard's data; the hdb tier carries the reference table.
func (c Config) LoadShard(store *engine.Store, s Shard) error {
	return c.Load(store, s.Region, s.Start, s.End, s.Tier == TierHDB)
}
