package engine

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/sg-project/sg/messages"
	"github.com/sg-project/sg/services/agg/merge"
)

// Execute runs getData on the rows of the portion [portionStart, portionEnd): the time
// range is the intersection of that and [args.StartTS, args.EndTS) (a zero time leaves a
// side open), found by binary search on the time column; reference tables ignore it.
// Then label selector and filters, then projection (row queries) or partial aggregation.
func (s *Store) Execute(args messages.GetDataArgs, portionStart, portionEnd time.Time) (merge.Partial, error) {
	return s.ExecuteContext(context.Background(), args, portionStart, portionEnd)
}

// BatchRows is how many rows the engine scans between two looks at its context: a
// cancelled or expired portion stops within one batch, and the check costs nothing
// measurable per row.
const BatchRows = 8192

// ExecuteContext is Execute that stops between batches of BatchRows rows (and between
// columns of the projection) once ctx ends, returning ctx's error: a cancelled portion or
// one past its deadline frees its DAP slot at once instead of scanning to the end.
func (s *Store) ExecuteContext(ctx context.Context, args messages.GetDataArgs, portionStart, portionEnd time.Time) (merge.Partial, error) {
	if err := ctx.Err(); err != nil {
		return merge.Partial{}, err
	}
	if err := args.Validate(); err != nil {
		return merge.Partial{}, err
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	t, ok := s.tables[args.Table]
	if !ok {
		return merge.Partial{}, fmt.Errorf("%w: %q", ErrUnknownTable, args.Table)
	}
	preds, err := t.predicates(&args)
	if err != nil {
		return merge.Partial{}, err
	}
	lo, hi := t.timeRange(args.StartTS, args.EndTS, portionStart, portionEnd)
	var times []int64
	if t.timeCol >= 0 {
		times = t.data.Columns[t.timeCol].Ints
	}
	if args.Aggregating() {
		keys, inputs, err := t.aggColumns(&args)
		if err != nil {
			return merge.Partial{}, err
		}
		sel, err := selectRows(ctx, lo, hi, preds, nil, 0)
		if err != nil {
			return merge.Partial{}, err
		}
		return merge.AggregatePartial(&args, keys, inputs, times, sel)
	}
	cols := args.Columns
	if len(cols) == 0 {
		for _, c := range t.def.Columns {
			cols = append(cols, c.Name)
		}
	}
	proj := messages.Table{Columns: make([]messages.Column, len(cols))}
	for k, name := range cols {
		if t.data.Index(name) < 0 {
			return merge.Partial{}, fmt.Errorf("%w: column %q of %q", ErrUnknownColumn, name, args.Table)
		}
		proj.Columns[k] = messages.Column{Name: name, Type: t.data.Col(name).Type}
	}
	// Without sortCols, the first Limit rows in time order are all a DAP can contribute
	// (ties at the cut are kept for the canonical order; merge.RowsPartial cuts exactly).
	stopAt := 0
	if times != nil {
		stopAt = args.TimeOrderLimit()
	}
	// Without a filter or a limit every row of [lo, hi) is taken: no list of
	// them is built (8 bytes a row) only to find that they follow each other.
	var sel []int
	consecutive := len(preds) == 0 && stopAt == 0
	if consecutive {
		if err := ctx.Err(); err != nil {
			return merge.Partial{}, err
		}
	} else {
		if sel, err = selectRows(ctx, lo, hi, preds, times, stopAt); err != nil {
			return merge.Partial{}, err
		}
		if n := len(sel); n > 0 && sel[n-1]-sel[0] == n-1 {
			lo, hi, consecutive = sel[0], sel[0]+n, true
		}
	}
	if consecutive && hi > lo {
		// Consecutive rows (a time range without a filter: every large
		// answer): a view, not a copy. The store never writes a value in
		// place (appends go past a view's end, sorts and upserts make new
		// arrays), so the view stays what it was.
		for k, name := range cols {
			proj.Columns[k] = t.data.Col(name).Slice(lo, hi)
		}
		var selTimes []int64
		if times != nil {
			selTimes = times[lo:hi:hi]
		}
		return merge.RowsPartial(&args, proj, selTimes)
	}
	for k, name := range cols {
		if err := ctx.Err(); err != nil {
			return merge.Partial{}, err
		}
		proj.Columns[k] = t.data.Col(name).Take(sel)
	}
	var selTimes []int64
	if times != nil {
		selTimes = make([]int64, len(sel))
		for k, i := range sel {
			selTimes[k] = times[i]
		}
	}
	return merge.RowsPartial(&args, proj, selTimes)
}

// timeRange returns the rows [lo, hi) inside both ranges (messages.TimeRange
// is the home of the intersection and of the open ends).
func (t *table) timeRange(start, end, portionStart, portionEnd time.Time) (lo, hi int) {
	n := t.data.NumRows()
	if t.timeCol < 0 {
		return 0, n
	}
	r, ok := messages.TimeRangeOf(start, end).Intersect(messages.TimeRangeOf(portionStart, portionEnd))
	if !ok {
		return 0, 0
	}
	times := t.data.Columns[t.timeCol].Ints
	lo, hi = 0, n
	if r.Start != messages.TSMin {
		lo = sort.Search(n, func(i int) bool { return times[i] >= r.Start })
	}
	if r.End != messages.TSMax {
		hi = sort.Search(n, func(i int) bool { return times[i] >= r.End })
	}
	return lo, max(lo, hi)
}

// Matcher is the selection Execute makes before it projects or aggregates, for
// a reader that holds a table's rows in pieces (the Parquet tier): whether row
// i of data, which has def's columns or some of them, passes the request's
// label selector, filters and where. nil: every row passes. Errors are
// Execute's (ErrUnknownColumn, ErrFilterType).
func Matcher(def TableDef, data *messages.Table, args *messages.GetDataArgs) (func(i int) bool, error) {
	preds, err := predicates(def, data, args)
	if err != nil || len(preds) == 0 {
		return nil, err
	}
	return func(i int) bool {
		for _, p := range preds {
			if !p(i) {
				return false
			}
		}
		return true
	}, nil
}

func (t *table) predicates(args *messages.GetDataArgs) ([]pred, error) {
	return predicates(t.def, &t.data, args)
}

// predicates compiles the label selector (on label columns only: a label the table does
// not carry is a routing label, already satisfied by the DAP's placement) and the filters.
func predicates(def TableDef, data *messages.Table, args *messages.GetDataArgs) ([]pred, error) {
	var preds []pred
	for _, key := range def.Labels {
		vals, ok := args.Labels[key]
		if !ok {
			continue
		}
		in := make([]any, len(vals))
		for k, v := range vals {
			in[k] = v
		}
		p, err := compileFilter(data, messages.Filter{Op: messages.FilterIn, Column: key, Value: in})
		if err != nil {
			return nil, err
		}
		preds = append(preds, p)
	}
	for _, f := range args.Filter {
		p, err := compileFilter(data, f)
		if err != nil {
			return nil, err
		}
		preds = append(preds, p)
	}
	if args.Where != nil { // where.go
		p, err := compileWhere(data, &args.Where.Root)
		if err != nil {
			return nil, err
		}
		preds = append(preds, p)
	}
	return preds, nil
}

// selectRows returns the rows of [lo, hi) that pass every predicate. With stopAt > 0 it
// stops once it holds stopAt rows and the time has moved past that of the last one. It
// gives up with ctx's error, looking at ctx once per BatchRows rows.
func selectRows(ctx context.Context, lo, hi int, preds []pred, times []int64, stopAt int) ([]int, error) {
	sel := make([]int, 0, min(hi-lo, 1<<16))
rows:
	for i := lo; i < hi; i++ {
		if (i-lo)%BatchRows == 0 {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
		}
		if stopAt > 0 && len(sel) >= stopAt && times[i] > times[sel[stopAt-1]] {
			break
		}
		for _, p := range preds {
			if !p(i) {
				continue rows
			}
		}
		sel = append(sel, i)
	}
	return sel, nil
}

// aggColumns resolves the groupBy and agg input columns, and checks that sortCols name
// output columns, so that a bad request fails at the DAP rather than after the merge.
func (t *table) aggColumns(args *messages.GetDataArgs) (keys, inputs []*messages.Column, err error) {
	outputs := slices.Clone(args.GroupBy)
	for _, g := range args.GroupBy {
		c := t.data.Col(g)
		if c == nil {
			return nil, nil, fmt.Errorf("%w: groupBy %q of %q", ErrUnknownColumn, g, args.Table)
		}
		keys = append(keys, c)
	}
	for _, a := range args.Agg {
		outputs = append(outputs, a.Name)
		if a.Column == "" {
			inputs = append(inputs, nil)
			continue
		}
		c := t.data.Col(a.Column)
		if c == nil {
			return nil, nil, fmt.Errorf("%w: agg %q over %q of %q", ErrUnknownColumn, a.Name, a.Column, args.Table)
		}
		inputs = append(inputs, c)
	}
	for _, s := range args.SortCols {
		if name, _ := messages.SortKey(s); !slices.Contains(outputs, name) {
			return nil, nil, fmt.Errorf("%w: %q (outputs: %v)", merge.ErrSortColumn, name, outputs)
		}
	}
	return keys, inputs, nil
}
