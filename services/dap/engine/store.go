package engine

import (
	"fmt"
	"slices"
	"sort"
	"sync"

	"github.com/sg-project/sg/messages"
)

// TimeColumn is the name of the column that makes a table time-partitioned.
const TimeColumn = "time"

// TableDef defines a table: its columns, and which of them are label columns.
type TableDef struct {
	Name    string
	Columns []messages.ColumnSpec
	Labels  []string // label keys held as symbol or string columns, e.g. "region"
}

// table is one table's data; the columns of data follow def.Columns.
//
// Symbol columns are held coded (messages.Column.Codes and Dict): a partial
// of them is re-coded rather than hashed row by row when it is encoded, a
// filter tests each dictionary value once, and a row costs 4 bytes, not a
// 16-byte string header the GC scans. dicts[k] builds column k's dictionary
// (nil until the first append, and for other columns); the dictionary is only
// ever appended to, so the views handed out keep theirs.
type table struct {
	def     TableDef
	data    messages.Table
	timeCol int // index of the time column, -1 for a reference table
	dicts   []*messages.DictBuilder
}

// newData is an empty table of def's columns, its symbol columns coded.
func newData(def TableDef) messages.Table {
	t := messages.NewTable(def.Columns)
	for k := range t.Columns {
		if t.Columns[k].Type == messages.TypeSymbol {
			t.Columns[k].Dict = []string{}
		}
	}
	return t
}

// appendColumn appends src to column k, coding it when column k is coded.
// Called with the store's write lock held.
func (t *table) appendColumn(k int, src *messages.Column) {
	c := &t.data.Columns[k]
	if !c.Coded() {
		c.AppendColumn(src) // a reference table's column after Upsert
		return
	}
	if t.dicts == nil {
		t.dicts = make([]*messages.DictBuilder, len(t.data.Columns))
	}
	d := t.dicts[k]
	if d == nil {
		d = messages.NewDictBuilder(c.Dict)
		t.dicts[k] = d
	}
	c.Codes = d.AppendCodes(c.Codes, src)
	c.Dict = d.Dict()
}

// Store is a set of tables, safe for concurrent use: Execute calls run in parallel,
// Append excludes them.
type Store struct {
	mu     sync.RWMutex
	tables map[string]*table
}

// NewStore returns an empty store.
func NewStore() *Store { return &Store{tables: map[string]*table{}} }

// Create adds an empty table. Errors wrap ErrSchema.
func (s *Store) Create(def TableDef) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: table %q: %s", ErrSchema, def.Name, fmt.Sprintf(format, args...))
	}
	if def.Name == "" {
		return bad("name is required")
	}
	t := &table{def: def, data: newData(def), timeCol: -1}
	if err := t.data.Validate(); err != nil {
		return bad("%v", err)
	}
	for i, c := range def.Columns {
		if c.Name == "" {
			return bad("column %d has no name", i)
		}
		if c.Name == TimeColumn {
			if c.Type != messages.TypeTimestamp {
				return bad("column %q must be a timestamp, not %s", TimeColumn, c.Type)
			}
			t.timeCol = i
		}
	}
	for _, l := range def.Labels {
		c := t.data.Col(l)
		if c == nil || (c.Type != messages.TypeSymbol && c.Type != messages.TypeString) {
			return bad("label %q must be a symbol or string column", l)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.tables[def.Name]; ok {
		return bad("already exists")
	}
	s.tables[def.Name] = t
	return nil
}

// Append adds rows, which must have the table's schema (names and types, in order), and
// keeps a time-partitioned table sorted by time (stable: rows of equal time keep the order
// in which they arrived). Errors wrap ErrUnknownTable or ErrSchema.
func (s *Store) Append(name string, rows messages.Table) error {
	if err := rows.Validate(); err != nil {
		return fmt.Errorf("%w: append to %q: %v", ErrSchema, name, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.tables[name]
	if !ok {
		return fmt.Errorf("%w: %q", ErrUnknownTable, name)
	}
	if !slices.Equal(rows.Schema(), t.def.Columns) {
		return fmt.Errorf("%w: append to %q: columns %v, table has %v", ErrSchema, name, rows.Schema(), t.def.Columns)
	}
	old := t.data.NumRows()
	for k := range t.data.Columns {
		t.appendColumn(k, &rows.Columns[k])
	}
	if t.timeCol < 0 {
		return nil
	}
	times := t.data.Columns[t.timeCol].Ints
	if slices.IsSorted(times[max(old-1, 0):]) {
		return nil // the usual case: data arrives in time order
	}
	idx := make([]int, len(times))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool { return times[idx[a]] < times[idx[b]] })
	// New arrays: partials already handed out keep their view. Take codes
	// the copy in a dictionary of its own (the values its rows use), so the
	// builders start again from it.
	t.data, t.dicts = t.data.Take(idx), nil
	return nil
}

// Grow makes room for n more rows in table name, so that a table loaded in
// pieces allocates its columns once instead of regrowing them (a loader's
// peak memory would be the table several times over). Errors wrap
// ErrUnknownTable.
func (s *Store) Grow(name string, n int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.tables[name]
	if !ok {
		return fmt.Errorf("%w: %q", ErrUnknownTable, name)
	}
	for k := range t.data.Columns {
		t.data.Columns[k].Grow(n)
	}
	return nil
}

// Tables lists the table names, sorted.
func (s *Store) Tables() []string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	names := make([]string, 0, len(s.tables))
	for n := range s.tables {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// Def returns the definition of a table.
func (s *Store) Def(name string) (TableDef, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	t, ok := s.tables[name]
	if !ok {
		return TableDef{}, false
	}
	return t.def, true
}

// NumRows is the number of rows of a table (0 if unknown).
func (s *Store) NumRows(name string) int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if t, ok := s.tables[name]; ok {
		return t.data.NumRows()
	}
	return 0
}
