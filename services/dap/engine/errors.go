package engine

import "errors"

// Sentinel errors, wrapped with %w.
var (
	// ErrUnknownTable: the request names a table the store does not hold.
	ErrUnknownTable = errors.New("unknown table")
	// ErrUnknownColumn: a filter, column, groupBy or agg names a column the table lacks.
	ErrUnknownColumn = errors.New("unknown column")
	// ErrFilterType: a filter value does not fit its column's type, or the operator does
	// not apply to it (like on a number, < on a bool).
	ErrFilterType = errors.New("filter value does not fit column type")
	// ErrSchema: a table definition or appended rows that do not fit the schema.
	ErrSchema = errors.New("bad table schema")
)
