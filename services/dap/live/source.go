package live

import (
	"context"
	"fmt"

	"github.com/sg-project/sg/messages"
	"github.com/sg-project/sg/services/agg/merge"
	"github.com/sg-project/sg/services/dap"
	"github.com/sg-project/sg/services/dap/engine"
	"github.com/sg-project/sg/services/dap/parquetdb"
	"github.com/sg-project/sg/subjects"
)

// hdbSource serves the hdb: time tables from a Parquet catalog, reference tables from
// memory. Both are immutable for the source's lifetime (a change makes a new source).
type hdbSource struct {
	cat *parquetdb.Catalog
	ref *engine.Store
}

// ExecutePartial implements dap.PartialSource: a time table's rows from the
// Parquet catalog go to the Agg in windows, as an in-memory store's do.
func (s hdbSource) ExecutePartial(ctx context.Context, api string, args messages.Args, l messages.LabelSet, rng messages.TimeRange) (merge.Partial, bool, error) {
	if api != subjects.APIGetData {
		return merge.Partial{}, false, nil
	}
	a, exec, err := s.getData(args)
	if err != nil {
		return merge.Partial{}, true, err
	}
	p, err := dap.RunGetDataPartial(ctx, exec, a, rng)
	return p, true, err
}

func (s hdbSource) Execute(ctx context.Context, api string, args messages.Args, l messages.LabelSet, rng messages.TimeRange) ([]byte, error) {
	b, _, err := s.ExecuteRows(ctx, api, args, l, rng)
	return b, err
}

func (s hdbSource) ExecuteRows(ctx context.Context, api string, args messages.Args, l messages.LabelSet, rng messages.TimeRange) ([]byte, int64, error) {
	if api != subjects.APIGetData {
		return dap.EngineSource{Store: s.ref}.ExecuteRows(ctx, api, args, l, rng)
	}
	a, exec, err := s.getData(args)
	if err != nil {
		return nil, 0, err
	}
	return dap.RunGetData(ctx, exec, a, rng)
}

// getData decodes getData's arguments, once, and picks what serves their
// table: the Parquet catalog for a time table, the in-memory store for a
// reference table.
func (s hdbSource) getData(args messages.Args) (messages.GetDataArgs, dap.GetDataExecutor, error) {
	a, err := args.GetData()
	if err != nil {
		return a, nil, err
	}
	if s.cat != nil && s.cat.Has(a.Table) {
		return a, s.cat.ExecuteContext, nil
	}
	if s.ref == nil {
		// A nil store's ExecuteContext would panic in the DAP's worker.
		return a, nil, fmt.Errorf("hdb source: table %q is not in the Parquet catalog and there is no reference store", a.Table)
	}
	return a, s.ref.ExecuteContext, nil
}
