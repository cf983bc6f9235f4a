package merge

import (
	"fmt"
	"slices"

	"github.com/sg-project/sg/messages"
)

// Merger combines the partials of one getData request. Add them as they arrive, in any
// order, then call Result once. A Merger is not safe for concurrent use.
type Merger struct {
	args  messages.GetDataArgs
	n     int
	first *Partial
	rows  []*Partial // row queries: kept until Result, which merges them in one pass
	agg   *aggMerger // aggregating queries: folded in as they arrive
	// rows0 is rows' storage while there is one (a small request's).
	rows0 [1]*Partial
}

// NewMerger returns a Merger for a request with the given arguments.
func NewMerger(args messages.GetDataArgs) *Merger { return &Merger{args: args} }

// Add validates p and folds it in. Errors wrap ErrInvalidPartial or ErrSchemaMismatch;
// a rejected partial leaves the Merger unchanged.
func (m *Merger) Add(p Partial) error { return m.AddShared(&p) }

// AddShared is Add of *p itself, not a copy: the caller neither writes nor
// releases p until the Merger's Result is written (a copy was an
// allocation per partial).
func (m *Merger) AddShared(p *Partial) error {
	if err := m.check(p); err != nil {
		return err
	}
	if !p.Aggregated {
		if m.rows == nil {
			m.rows = m.rows0[:0]
		}
		m.rows = append(m.rows, p)
		return nil
	}
	if m.agg == nil {
		m.agg = newAggMerger(p)
	}
	m.agg.add(p)
	return nil
}

// check validates p (a partial, or a window of a streamed merge, which
// Stream does not keep beyond its source's turn) against the request and the
// first, and counts it.
func (m *Merger) check(p *Partial) error {
	if !p.validated {
		if err := p.Validate(); err != nil {
			return err
		}
	}
	if err := m.checkShape(p); err != nil {
		return err
	}
	if m.first == nil {
		m.first = p
	}
	m.n++
	return nil
}

// checkShape compares p with the request and with the partials already added.
func (m *Merger) checkShape(p *Partial) error {
	a := &m.args
	mismatch := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrSchemaMismatch, fmt.Sprintf(format, args...))
	}
	if p.Aggregated != a.Aggregating() {
		return mismatch("aggregated partial %t for an aggregating request %t", p.Aggregated, a.Aggregating())
	}
	if p.Aggregated {
		if len(p.Keys.Columns) != len(a.GroupBy) || len(p.Aggs) != len(a.Agg) {
			return mismatch("partial has %d keys and %d aggs, request %d and %d", len(p.Keys.Columns), len(p.Aggs), len(a.GroupBy), len(a.Agg))
		}
		for k, c := range p.Keys.Columns {
			if c.Name != a.GroupBy[k] {
				return mismatch("key %d is %q, request groups by %q", k, c.Name, a.GroupBy[k])
			}
		}
		for i, s := range p.Aggs {
			if s.Name != a.Agg[i].Name || s.Func != a.Agg[i].Func {
				return mismatch("agg %d is %s %q, request has %s %q", i, s.Func, s.Name, a.Agg[i].Func, a.Agg[i].Name)
			}
		}
		if m.agg != nil && !m.agg.sameShape(p) {
			return mismatch("key or input types differ between partials")
		}
		return nil
	}
	if len(a.Columns) > 0 && !slices.Equal(columnNames(&p.Rows), a.Columns) {
		return mismatch("partial columns %v, request columns %v", columnNames(&p.Rows), a.Columns)
	}
	if m.first != nil && !slices.Equal(p.Rows.Schema(), m.first.Rows.Schema()) {
		return mismatch("partial columns %v, earlier partial %v", p.Rows.Schema(), m.first.Rows.Schema())
	}
	return nil
}

func columnNames(t *messages.Table) []string {
	names := make([]string, len(t.Columns))
	for i, c := range t.Columns {
		names[i] = c.Name
	}
	return names
}

// Aggregated reports whether the partials added are aggregated (groupBy,
// agg): the answer is their groups, not their rows.
func (m *Merger) Aggregated() bool { return m.agg != nil }

// Partials is how many partials have been added.
func (m *Merger) Partials() int { return m.n }

// Result is the merged answer. Without any partial it is an empty table without columns.
// Errors wrap ErrSortColumn.
func (m *Merger) Result() (messages.Table, error) {
	switch {
	case m.first == nil:
		return messages.Table{}, nil
	case m.agg != nil:
		return m.agg.result(&m.args)
	}
	return mergeRows(&m.args, m.first.Rows.Schema(), m.rows)
}

// Merge merges the partials of one request at once.
func Merge(args messages.GetDataArgs, parts []Partial) (messages.Table, error) {
	m := NewMerger(args)
	for i := range parts {
		if err := m.Add(parts[i]); err != nil {
			return messages.Table{}, fmt.Errorf("partial %d: %w", i, err)
		}
	}
	return m.Result()
}
