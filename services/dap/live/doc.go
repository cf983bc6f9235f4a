// Package live makes a label set's data move while people query it: ingest from a
// JetStream stream into the rdb, end of interval (rdb -> idb), end of day (idb -> hdb,
// written as date-partitioned Parquet), reference data updates that set the reference
// vintage, and restart by replaying the stream.
//
// A Group runs the three DAPs of one label set (rdb, idb, hdb) in one process, like a
// kdb+ assembly's tickerplant-fed RDB, its intraday and historical databases:
//
//   - rdb: in memory, fed by a durable JetStream consumer filtered on the label set's
//     subjects (subjects.LiveLabelSetPattern). A message is acked once its rows are in
//     the rdb (or rejected for good), never before; MaxAckPending is 1, so messages are
//     applied in stream order and a redelivery is recognised by its stream sequence.
//   - idb: in memory, the closed intervals of the current day.
//   - hdb: Parquet files under <Dir>/hdb (layout in package parquetdb) plus the
//     reference tables, whose snapshot is kept under <Dir>/ref.
//
// # Rolls and the no-gap, no-overlap argument
//
// A row t is "served" by a DAP when t is in the DAP's purview and the DAP is available:
// that is what the RC places portions on. The invariant kept at every instant, for
// every t at or after the hdb's start:
//
//	(I1) at most one available DAP of the label set has t in its purview;
//	(I2) at least one DAP (available or about to be) has t in its purview, so a portion
//	     for t is queued by the RC, never answered without it;
//	(I3) an available DAP holds exactly the rows of its purview, at the purview version it
//	     advertises; a portion dispatched against an older version is answered RETRY.
//
// All three DAPs publish on one NATS connection, so an RC sees their events in the order
// they were made. End of interval at T moves [R, T) from the rdb [R, +inf) to the idb
// [H, R):
//
//  1. idb unavailable; it loads the rows of [R, T) (outside its purview, so nothing it
//     answers changes); idb purview [H, T), version+1, still unavailable.
//     [R, T) is now in two purviews, but only the rdb's is available (I1).
//  2. rdb swaps, in one step (dap.Apply), to a store of the rows at or after T, purview
//     [T, +inf), version+1. A portion admitted before runs on the old store at the old
//     version, consistently; one dispatched at the old version and arriving after is
//     answered RETRY, and the RC retries the label set on every tier (I3).
//  3. idb available: [H, T) is served by the idb alone, [T, +inf) by the rdb alone.
//
// End of day at D (after an end of interval to D if the rdb still holds rows before D)
// moves [H, D) from the idb to the hdb [-inf, H):
//
//  1. hdb unavailable; it writes the Parquet files of [H, D) (synced, renamed); hdb
//     purview [-inf, D), version+1, still unavailable; the manifest records D.
//  2. idb drops [H, D) in one step: purview [D, R), version+1; or, when it held nothing
//     else, it stays unavailable ("holds no data until the next end of interval") with
//     its old purview, which the hdb's now covers, so (I2) holds without a second server.
//  3. hdb available.
//
// Between the steps a range is in two purviews with at most one DAP available, or in one
// purview of an unavailable DAP: portions for it wait in the RC's queue for a moment (the
// seed's queueing), and are never answered twice or without their rows.
//
// # Time and late rows
//
// Rows carry their own time. A row at or after the rdb's start R goes to the rdb. A row
// that arrives after its interval closed but while its day is open (H <= t < R) is taken
// by the idb, which swaps to a copy holding it with a purview version bump (I3). A row
// before the hdb's end H is late: its day is in Parquet, corrections to history are not
// taken; it is counted (Stats.LateRows, sg_live_late_rows_total), logged and acked.
// Automatic rolls cut Lateness behind the clock, and every roll first catches up with the
// stream (to the last sequence the stream holds for the label set), so rows published
// before a roll are never late for it.
//
// # Restart
//
// The manifest (<Dir>/manifest.json, written atomically at every roll) holds the hdb's
// end H, the history of rdb cuts with the stream sequence at which each happened, and
// ReplayFrom: the first stream sequence that may hold rows not yet in Parquet. A group
// that starts registers its DAPs unavailable ("replaying the live stream"), recreates
// its durable consumer from ReplayFrom and applies every message again: rows before H are
// in Parquet already (or were late) and are skipped, the others go to the idb or the rdb,
// as they did live (the live rule depends only on H, which only grows). Then it becomes
// available. Parquet files that start at or after H (an end of day interrupted before
// the manifest recorded it) are deleted first. Nothing is lost or doubled.
package live
