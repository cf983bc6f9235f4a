package engine

import (
	"fmt"
	"slices"
	"sort"

	"github.com/sg-project/sg/messages"
)

// IsTimeTable reports whether a table is time-partitioned (has the time column).
func (d TableDef) IsTimeTable() bool {
	for _, c := range d.Columns {
		if c.Name == TimeColumn {
			return true
		}
	}
	return false
}

// Rows returns a copy of the rows of a time-partitioned table with time in [from, to)
// (in time order), or of all rows of a reference table. Errors wrap ErrUnknownTable.
func (s *Store) Rows(name string, from, to int64) (messages.Table, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	t, ok := s.tables[name]
	if !ok {
		return messages.Table{}, fmt.Errorf("%w: %q", ErrUnknownTable, name)
	}
	lo, hi := t.nsRange(from, to)
	idx := make([]int, hi-lo)
	for i := range idx {
		idx[i] = lo + i
	}
	return t.data.Take(idx), nil
}

// nsRange is the rows [lo, hi) of a time table with time in [from, to); all rows of a
// reference table.
func (t *table) nsRange(from, to int64) (lo, hi int) {
	n := t.data.NumRows()
	if t.timeCol < 0 {
		return 0, n
	}
	times := t.data.Columns[t.timeCol].Ints
	lo = sort.Search(n, func(i int) bool { return times[i] >= from })
	hi = sort.Search(n, func(i int) bool { return times[i] >= to })
	return lo, max(lo, hi)
}

// Slice returns a new store with the same tables, holding copies of the rows of every
// time-partitioned table with time in [from, to) and of every row of the reference
// tables. The receiver is not changed: readers that hold it keep their view.
func (s *Store) Slice(from, to int64) *Store {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := NewStore()
	for name, t := range s.tables {
		lo, hi := t.nsRange(from, to)
		idx := make([]int, hi-lo)
		for i := range idx {
			idx[i] = lo + i
		}
		out.tables[name] = &table{def: t.def, data: t.data.Take(idx), timeCol: t.timeCol}
	}
	return out
}

// Replace sets the rows of a table (schema as in Append), sorting a time table by time.
func (s *Store) Replace(name string, rows messages.Table) error {
	s.mu.Lock()
	t, ok := s.tables[name]
	if ok {
		t.data, t.dicts = newData(t.def), nil
	}
	s.mu.Unlock()
	if !ok {
		return fmt.Errorf("%w: %q", ErrUnknownTable, name)
	}
	return s.Append(name, rows)
}

// Upsert merges rows into a reference table: a row whose first column equals that of an
// existing row replaces it, the others are appended. It is how reference updates (e.g.
// an instrument's new lot size) apply. Errors wrap ErrUnknownTable or ErrSchema.
func (s *Store) Upsert(name string, rows messages.Table) error {
	if err := rows.Validate(); err != nil {
		return fmt.Errorf("%w: upsert into %q: %v", ErrSchema, name, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.tables[name]
	if !ok {
		return fmt.Errorf("%w: %q", ErrUnknownTable, name)
	}
	if t.timeCol >= 0 {
		return fmt.Errorf("%w: upsert into %q: only reference tables are keyed", ErrSchema, name)
	}
	if !slices.Equal(rows.Schema(), t.def.Columns) {
		return fmt.Errorf("%w: upsert into %q: columns %v, table has %v", ErrSchema, name, rows.Schema(), t.def.Columns)
	}
	key := func(tb *messages.Table, i int) string { return fmt.Sprint(tb.Columns[0].Value(i)) }
	at := make(map[string]int, t.data.NumRows())
	for i := range t.data.NumRows() {
		at[key(&t.data, i)] = i
	}
	// Copy first: readers of the old arrays keep their view.
	next := t.data.Take(seq(t.data.NumRows()))
	for i := range rows.NumRows() {
		k := key(&rows, i)
		if j, ok := at[k]; ok {
			for c := range next.Columns {
				next.Columns[c].SetFrom(j, &rows.Columns[c], i)
			}
			continue
		}
		at[k] = next.NumRows()
		next.AppendRowFrom(&rows, i)
	}
	t.data, t.dicts = next, nil // next's columns may be uncoded: dictionaries start again from them
	return nil
}

func seq(n int) []int {
	idx := make([]int, n)
	for i := range idx {
		idx[i] = i
	}
	return idx
}
