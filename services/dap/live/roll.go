package live

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sg-project/sg/messages"
	"github.com/sg-project/sg/services/dap"
	"github.com/sg-project/sg/services/dap/parquetdb"
)

// errNotReady: rolls wait for the replay, which rebuilds the state they move.
var errNotReady = errors.New("live: the group is still replaying the stream")

func (g *Group) doRoll(ctx context.Context, kind rollKind, at int64) error {
	if !g.isReady() {
		return errNotReady
	}
	if err := g.catchUp(ctx); err != nil {
		return err
	}
	switch kind {
	case rollEOD:
		return g.endOfDay(at)
	case rollEOI:
		return g.endOfInterval(at)
	}
	return nil
}

func ts(ns int64) string { return time.Unix(0, ns).UTC().Format(time.RFC3339Nano) }

// endOfInterval moves the rdb's rows of [R, T) to the idb, in the order of the package
// doc (receiving tier first, unavailable; then the giving tier shrinks; then available).
func (g *Group) endOfInterval(T int64) error {
	R, H := g.man.rdbStart(), g.man.HDBEnd
	if T <= R {
		return nil // nothing closed since the last cut
	}
	start := time.Now()
	yes, no := true, false
	// 1. The idb loads the interval while unavailable, then extends its purview.
	g.idb.Apply(dap.Change{Available: &no, Reason: idbLoadingReason})
	moved := 0
	for _, d := range g.time {
		rows, err := g.rdbStore.Rows(d.Name, R, T)
		if err == nil {
			err = g.idbSt.Append(d.Name, rows)
		}
		if err != nil {
			// Part of the interval may be in the idb's store, outside its purview: rebuild
			// the store from what it serves, so the next attempt does not hold it twice.
			g.idbSt = g.idbSt.Slice(H, R)
			g.idb.Apply(dap.Change{Source: g.wrap(messages.TierIDB, dap.EngineSource{Store: g.idbSt}), Available: &yes})
			return fmt.Errorf("live: end of interval at %s: %w", ts(T), err)
		}
		moved += rows.NumRows()
	}
	idbPurview := messages.TimeRange{Start: H, End: T}
	g.idb.Apply(dap.Change{Purview: &idbPurview, BumpPurviewVersion: true,
		Source: g.wrap(messages.TierIDB, dap.EngineSource{Store: g.idbSt})})
	// 2. The rdb drops the interval in one step: new store, purview and version together.
	next := g.rdbStore.Slice(T, messages.TSMax)
	rdbPurview := messages.TimeRange{Start: T, End: messages.TSMax}
	g.rdb.Apply(dap.Change{Purview: &rdbPurview, BumpPurviewVersion: true,
		Source: g.wrap(messages.TierRDB, dap.EngineSource{Store: next})})
	g.rdbStore = next
	g.man.Cuts = append(g.man.Cuts, cut{Seq: g.lastSeq, RDBStart: T})
	if err := g.man.save(g.cfg.Dir); err != nil {
		// The cut is live; a restart before the next save replays with the previous cut,
		// which puts the same rows in the rdb instead of the idb: nothing lost or doubled.
		g.log.Error().Err(err).Msg("manifest not saved after end of interval")
	}
	// 3. The idb serves the interval.
	g.idb.Apply(dap.Change{Available: &yes})
	g.stats.EOIs.Add(1)
	g.log.Info().Str("from", ts(R)).Str("to", ts(T)).Int("rows", moved).Dur("took", time.Since(start)).
		Msg("end of interval: rdb -> idb")
	return nil
}

// endOfDay moves the idb's rows of [H, D) to Parquet files of the hdb.
func (g *Group) endOfDay(D int64) error {
	if D > g.man.rdbStart() {
		if err := g.endOfInterval(D); err != nil {
			return err
		}
	}
	H, R := g.man.HDBEnd, g.man.rdbStart()
	D = min(D, R)
	if D <= H {
		return nil
	}
	start := time.Now()
	yes, no := true, false
	// 1. The hdb writes the day while unavailable, then extends its purview.
	g.hdb.Apply(dap.Change{Available: &no, Reason: hdbWritingReason})
	var files []parquetdb.File
	rows := 0
	for _, d := range g.time {
		part, err := g.idbSt.Rows(d.Name, H, D)
		if err == nil && part.NumRows() > 0 {
			var fs []parquetdb.File
			fs, err = parquetdb.Write(g.hdbDir(), d, part, H, D, g.cfg.RowGroupRows)
			files = append(files, fs...)
		}
		if err != nil {
			// Files written so far start at or after H: the next start deletes them, and
			// the next end of day writes them again under the same names.
			g.hdb.Apply(dap.Change{Available: &yes})
			return fmt.Errorf("live: end of day at %s: %w", ts(D), err)
		}
		rows += part.NumRows()
	}
	// Record D before the idb drops the rows: from now on a restart deletes nothing and
	// replays only rows at or after D.
	prev := g.man
	g.man.HDBEnd = D
	kept := g.held[:0]
	for _, h := range g.held {
		if h.maxTime >= D {
			kept = append(kept, h)
		}
	}
	g.held = kept
	g.man.ReplayFrom = g.lastSeq + 1
	if len(g.held) > 0 {
		g.man.ReplayFrom = g.held[0].seq
	}
	if err := g.man.save(g.cfg.Dir); err != nil {
		g.man = prev
		g.hdb.Apply(dap.Change{Available: &yes})
		return fmt.Errorf("live: end of day at %s: %w", ts(D), err)
	}
	g.cat = g.cat.With(files...)
	hdbPurview := messages.TimeRange{Start: messages.TSMin, End: D}
	g.hdb.Apply(dap.Change{Purview: &hdbPurview, BumpPurviewVersion: true,
		Source: g.wrap(messages.TierHDB, hdbSource{g.cat, g.ref})})
	// 2. The idb drops the day in one step.
	g.idbSt = g.idbSt.Slice(D, R)
	src := g.wrap(messages.TierIDB, dap.EngineSource{Store: g.idbSt})
	if D == R {
		g.idb.Apply(dap.Change{Available: &no, Reason: emptyIDBReason, BumpPurviewVersion: true, Source: src})
	} else {
		idbPurview := messages.TimeRange{Start: D, End: R}
		g.idb.Apply(dap.Change{Purview: &idbPurview, BumpPurviewVersion: true, Source: src})
	}
	// 3. The hdb serves the day.
	g.hdb.Apply(dap.Change{Available: &yes})
	g.stats.EODs.Add(1)
	g.log.Info().Str("from", ts(H)).Str("to", ts(D)).Int("rows", rows).Int("files", len(files)).
		Dur("took", time.Since(start)).Msg("end of day: idb -> hdb (Parquet)")
	return nil
}
