package merge

import (
	"fmt"
	"slices"

	"github.com/sg-project/sg/messages"
)

// AggregatePartial is the DAP side of an aggregating query (groupBy and/or agg). keys are
// the groupBy columns of the source table, in args.GroupBy order; inputs the input column
// of each args.Agg entry (nil for count without a column); times the source time column
// (nil for a reference table); rows the selected source rows. Errors wrap ErrAggType.
func AggregatePartial(args *messages.GetDataArgs, keys, inputs []*messages.Column, times []int64, rows []int) (Partial, error) {
	if len(keys) != len(args.GroupBy) || len(inputs) != len(args.Agg) {
		return Partial{}, fmt.Errorf("aggregate: %d key and %d input columns for %d groupBy and %d agg",
			len(keys), len(inputs), len(args.GroupBy), len(args.Agg))
	}
	schema := make([]messages.ColumnSpec, len(keys))
	for k, c := range keys {
		schema[k] = messages.ColumnSpec{Name: args.GroupBy[k], Type: c.Type}
	}
	groups := newGroupIndex(schema)
	states := make([]AggState, len(args.Agg))
	for a, spec := range args.Agg {
		var typ messages.ColumnType
		if inputs[a] != nil {
			typ = inputs[a].Type
		}
		s, err := newAggState(spec, typ)
		if err != nil {
			return Partial{}, fmt.Errorf("agg %q over %q: %w", spec.Name, spec.Column, err)
		}
		states[a] = s
	}
	for _, i := range rows {
		var t int64
		if times != nil {
			t = times[i]
		}
		g, isNew := groups.lookup(keys, i)
		for a := range states {
			if isNew {
				states[a].appendRow(inputs[a], i, t)
			} else {
				states[a].addRow(g, inputs[a], i, t)
			}
		}
	}
	return Partial{Version: PartialVersion, Aggregated: true, Groups: groups.n, Keys: groups.keys, Aggs: states}, nil
}

// aggMerger is the Agg side of an aggregating query: it folds partials into running
// states as they arrive, so memory grows with the number of groups, not of partials.
type aggMerger struct {
	groups *groupIndex
	states []AggState
}

func newAggMerger(first *Partial) *aggMerger {
	m := &aggMerger{groups: newGroupIndex(first.Keys.Schema()), states: make([]AggState, len(first.Aggs))}
	for a, s := range first.Aggs {
		m.states[a], _ = newAggState(messages.AggSpec{Name: s.Name, Func: s.Func}, s.Type) // validated
	}
	return m
}

// sameShape reports whether p has the keys and aggregations of the merger.
func (m *aggMerger) sameShape(p *Partial) bool {
	if !slices.Equal(p.Keys.Schema(), m.groups.keys.Schema()) || len(p.Aggs) != len(m.states) {
		return false
	}
	for a := range p.Aggs {
		x, y := &p.Aggs[a], &m.states[a]
		if x.Name != y.Name || x.Func != y.Func || x.Type != y.Type {
			return false
		}
	}
	return true
}

func (m *aggMerger) add(p *Partial) {
	src := make([]*messages.Column, len(p.Keys.Columns))
	for k := range src {
		src[k] = &p.Keys.Columns[k]
	}
	for h := 0; h < p.Groups; h++ {
		g, isNew := m.groups.lookup(src, h)
		for a := range m.states {
			if isNew {
				m.states[a].appendGroup(&p.Aggs[a], h)
			} else {
				m.states[a].combine(g, &p.Aggs[a], h)
			}
		}
	}
}

// result builds the answer: groupBy columns then one column per agg, groups in ascending
// key order, then sortCols (stable), then limit (doc item 5).
func (m *aggMerger) result(args *messages.GetDataArgs) (messages.Table, error) {
	out := messages.Table{Columns: slices.Clone(m.groups.keys.Columns)}
	for a := range m.states {
		out.Columns = append(out.Columns, m.states[a].output())
	}
	keys, err := resolveSort(out.Schema(), args.SortCols)
	if err != nil {
		return messages.Table{}, err
	}
	kt := &m.groups.keys
	idx := identity(m.groups.n)
	slices.SortFunc(idx, func(i, j int) int { return compareValues(kt, i, kt, j) })
	if len(keys) > 0 {
		slices.SortStableFunc(idx, func(i, j int) int { return compareSort(keys, &out, i, &out, j) })
	}
	if args.Limit > 0 && len(idx) > args.Limit {
		idx = idx[:args.Limit]
	}
	return out.Take(idx), nil
}
