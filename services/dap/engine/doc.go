// Package engine is the DAP's in-memory columnar store and its getData executor.
//
// A Store holds tables. A table with a timestamp column named "time" is time-partitioned:
// its rows are kept sorted by time, so that the rows of a time range are found by binary
// search. A table without one (a reference table such as instrument) has no time
// restriction. Label columns (e.g. region) carry the label set of each row, so that a
// request's label selector is applied like a filter.
//
// Execute runs getData on the rows of one portion and returns a merge.Partial: the partial
// result type and its algebra (avg as sum and count, first/last with their time, the exact
// row order, local limits) live in services/agg/merge, which both the DAP and the Agg use.
//
// Errors wrap the sentinels of errors.go, merge.ErrAggType and merge.ErrSortColumn, and
// messages.ErrInvalidGetDataArgs, so that the DAP can map them to return codes.
package engine
