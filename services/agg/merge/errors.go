package merge

import "errors"

// Sentinel errors, wrapped with %w.
var (
	// ErrInvalidPartial: a partial that does not decode or is inconsistent in itself.
	ErrInvalidPartial = errors.New("invalid partial result")
	// ErrSchemaMismatch: partials of one request disagree on columns, types or aggregations.
	ErrSchemaMismatch = errors.New("partial results do not match")
	// ErrAggType: the aggregation does not apply to the column's type (sum of a symbol, ...).
	ErrAggType = errors.New("aggregation does not apply to column type")
	// ErrSortColumn: a sortCols entry names no output column.
	ErrSortColumn = errors.New("sort column is not an output column")
)
