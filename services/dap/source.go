package dap

import (
	"context"
	"fmt"
	"time"

	"github.com/sg-project/sg/messages"
	"github.com/sg-project/sg/services/agg/merge"
	"github.com/sg-project/sg/services/dap/engine"
	"github.com/sg-project/sg/subjects"
)

// Source executes an API on the DAP's data. Execute must return soon after ctx ends (the
// dispatch deadline, a cancel from the RC, or shutdown), e.g. by looking at ctx between
// batches of rows; the DAP keeps the slot until it does. args are the API's
// arguments in the encoding the caller sent them (msgpack or JSON): decode them
// once, with their decoder (args.GetData). payload is the API's partial answer,
// msgpack: for getData an encoded merge.Partial, for ping true.
type Source interface {
	Execute(ctx context.Context, api string, args messages.Args, labels messages.LabelSet, rng messages.TimeRange) (payload []byte, err error)
}

// RowCounter is optionally implemented by a Source that knows how many rows its payload
// holds, for the completion's Rows (metrics) without decoding the payload again.
type RowCounter interface {
	ExecuteRows(ctx context.Context, api string, args messages.Args, labels messages.LabelSet, rng messages.TimeRange) (payload []byte, rows int64, err error)
}

// PartialSource is optionally implemented by a Source whose getData partial can
// be sent in windows: it returns the partial unencoded (rows, the engine's
// view of its store where it can), and the DAP encodes and sends it window by
// window under the Agg's credit (window.go), so that the encoded partial is
// never whole in memory. ok false: the DAP calls ExecuteRows or Execute instead
// (another API).
type PartialSource interface {
	ExecutePartial(ctx context.Context, api string, args messages.Args, labels messages.LabelSet, rng messages.TimeRange) (p merge.Partial, ok bool, err error)
}

// EngineSource serves getData and ping from an in-memory engine.Store. The store holds
// only this DAP's shard, so the portion's label set needs no check here: the request's
// label selector is applied by the engine like a filter.
type EngineSource struct{ Store *engine.Store }

// SchemaSource is an optional interface of a Source: the columns of a table,
// which the DAP adds to its registration for getMeta.
type SchemaSource interface {
	Schema(table string) ([]messages.ColumnSpec, bool)
}

// Schema returns the store's columns of the table.
func (s EngineSource) Schema(table string) ([]messages.ColumnSpec, bool) {
	if s.Store == nil {
		return nil, false
	}
	def, ok := s.Store.Def(table)
	return def.Columns, ok
}

// pingPayload is the partial answer of ping: msgpack true, "this DAP is reachable".
var pingPayload = []byte{0xc3}

// Execute implements Source.
func (s EngineSource) Execute(ctx context.Context, api string, args messages.Args, labels messages.LabelSet, rng messages.TimeRange) ([]byte, error) {
	b, _, err := s.ExecuteRows(ctx, api, args, labels, rng)
	return b, err
}

// ExecuteRows implements RowCounter.
func (s EngineSource) ExecuteRows(ctx context.Context, api string, args messages.Args, _ messages.LabelSet, rng messages.TimeRange) ([]byte, int64, error) {
	if err := ctx.Err(); err != nil {
		return nil, 0, err
	}
	switch api {
	case subjects.APIPing:
		return pingPayload, 0, nil
	case subjects.APIGetData:
	default:
		return nil, 0, fmt.Errorf("%w: %q", ErrUnknownAPI, api)
	}
	if s.Store == nil {
		return nil, 0, fmt.Errorf("engine source has no store")
	}
	a, err := args.GetData()
	if err != nil {
		return nil, 0, err
	}
	// The engine looks at ctx between batches of rows: a cancel or the deadline frees
	// the slot within a batch.
	return RunGetData(ctx, s.Store.ExecuteContext, a, rng)
}

// ExecutePartial implements PartialSource for getData.
func (s EngineSource) ExecutePartial(ctx context.Context, api string, args messages.Args, _ messages.LabelSet, rng messages.TimeRange) (merge.Partial, bool, error) {
	if api != subjects.APIGetData || s.Store == nil {
		return merge.Partial{}, false, nil
	}
	a, err := args.GetData()
	if err != nil {
		return merge.Partial{}, true, err
	}
	p, err := RunGetDataPartial(ctx, s.Store.ExecuteContext, a, rng)
	return p, true, err
}

// RunGetDataPartial runs exec on the portion's range and returns the partial
// unencoded, for a PartialSource: the DAP sends it in windows.
func RunGetDataPartial(ctx context.Context, exec GetDataExecutor, a messages.GetDataArgs, rng messages.TimeRange) (merge.Partial, error) {
	start, end := rng.Times()
	p, err := exec(ctx, a, start, end)
	if err == nil {
		err = ctx.Err()
	}
	return p, err
}

// GetDataExecutor runs getData on one portion's range (the zero time is an open
// end), stopping with ctx's error when ctx ends: the engine's Store.ExecuteContext and
// the Parquet catalog's ExecuteContext.
type GetDataExecutor func(ctx context.Context, args messages.GetDataArgs, start, end time.Time) (merge.Partial, error)

// RunGetData runs exec on the portion's range and encodes the partial, with its
// row count (groups, for an aggregate): the part every getData source shares.
func RunGetData(ctx context.Context, exec GetDataExecutor, a messages.GetDataArgs, rng messages.TimeRange) ([]byte, int64, error) {
	p, err := RunGetDataPartial(ctx, exec, a, rng)
	if err != nil {
		return nil, 0, err
	}
	b, err := merge.EncodePartial(p)
	if err != nil {
		return nil, 0, fmt.Errorf("encode partial: %w", err)
	}
	return b, partialRows(&p), nil
}

// partialRows is what a completion counts of a getData partial: its rows, or
// its groups for an aggregate.
func partialRows(p *merge.Partial) int64 {
	if p.Aggregated {
		return int64(p.Groups)
	}
	return int64(p.Rows.NumRows())
}
