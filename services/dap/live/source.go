package live

import (
	"context"

	"github.com/sg-project/sg/messages"
	"github.com/sg-project/sg/services/agg/merge"
	"github.com/sg-project/sg/services/dap"
	"github.com/sg-project/sg/services/dap/engine"
	"github.com/sg-project/sg/services/dap/parquetdb"
	"github.com/sg-project/sg/subjects"
	"github.com/vmihailenco/msgpack/v5"
)

// hdbSource serves the hdb: time tables from a Parquet catalog, reference tables from
// memory. Both are immutable for the source's lifetime (a change makes a new source).
type hdbSource struct {
	cat *parquetdb.Catalog
	ref *engine.Store
}

var pingPayload = []byte{0xc3}

// ExecutePartial implements dap.PartialSource: a time table's rows from the
// Parquet catalog go to the Agg in windows, as an in-memory store's do.
func (s hdbSource) ExecutePartial(ctx context.Context, api string, args msgpack.RawMessage, l messages.LabelSet, rng messages.TimeRange) (merge.Partial, bool, error) {
	if api != subjects.APIGetData {
		return merge.Partial{}, false, nil
	}
	a, err := messages.DecodeGetDataArgsMsgpack(args)
	if err != nil {
		return merge.Partial{}, true, err
	}
	if !s.cat.Has(a.Table) {
		return dap.EngineSource{Store: s.ref}.ExecutePartial(ctx, api, args, l, rng)
	}
	p, err := dap.RunGetDataPartial(ctx, s.cat.ExecuteContext, a, rng)
	return p, true, err
}

func (s hdbSource) Execute(ctx context.Context, api string, args msgpack.RawMessage, l messages.LabelSet, rng messages.TimeRange) ([]byte, error) {
	b, _, err := s.ExecuteRows(ctx, api, args, l, rng)
	return b, err
}

func (s hdbSource) ExecuteRows(ctx context.Context, api string, args msgpack.RawMessage, l messages.LabelSet, rng messages.TimeRange) ([]byte, int64, error) {
	if api != subjects.APIGetData {
		return dap.EngineSource{Store: s.ref}.ExecuteRows(ctx, api, args, l, rng)
	}
	a, err := messages.DecodeGetDataArgsMsgpack(args)
	if err != nil {
		return nil, 0, err
	}
	if !s.cat.Has(a.Table) {
		return dap.EngineSource{Store: s.ref}.ExecuteRows(ctx, api, args, l, rng)
	}
	return dap.RunGetData(ctx, s.cat.ExecuteContext, a, rng)
}
