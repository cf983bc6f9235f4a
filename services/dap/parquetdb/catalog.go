package parquetdb

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/parquet-go/parquet-go"
	"github.com/sg-project/sg/messages"
	"github.com/sg-project/sg/services/agg/merge"
	"github.com/sg-project/sg/services/dap/engine"
)

// File is one Parquet file of a table: its path, date partition and time range [From, To).
type File struct {
	Path     string
	Table    string
	Date     string
	From, To int64
	Rows     int64 // 0 when unknown (not read)
}

// Stats counts what queries read. All counters only grow.
type Stats struct {
	Partitions       atomic.Int64 // date partitions a query opened a file in
	Files            atomic.Int64 // files opened (footer read)
	RowGroups        atomic.Int64 // row groups read
	RowGroupsSkipped atomic.Int64 // row groups of opened files skipped by their time statistics (outside the range, or past a limit met)
	ColumnChunks     atomic.Int64 // column chunks read
	BytesRead        atomic.Int64 // bytes read from files
	Rows             atomic.Int64 // rows decoded
}

// Catalog is an immutable set of files per table; With returns a larger one. Queries on
// a catalog see exactly its files, so a DAP can swap catalogs atomically with its purview.
type Catalog struct {
	defs  map[string]engine.TableDef
	files map[string][]File // per table, sorted by From
	stats *Stats
}

// Open scans dir for the files of the given time tables. Files that start at or after
// end (when end != 0) are left over from an end of day interrupted before it was
// recorded: they are deleted, so their rows are not served twice once the stream is
// replayed. Files of one table that overlap are an error.
func Open(dir string, defs []engine.TableDef, end int64) (*Catalog, error) {
	c := &Catalog{defs: map[string]engine.TableDef{}, files: map[string][]File{}, stats: &Stats{}}
	for _, def := range defs {
		if !def.IsTimeTable() {
			continue
		}
		c.defs[def.Name] = def
		parts, err := filepath.Glob(filepath.Join(dir, def.Name, "date=*"))
		if err != nil {
			return nil, fmt.Errorf("parquetdb: %w", err)
		}
		for _, part := range parts {
			date := strings.TrimPrefix(filepath.Base(part), "date=")
			if _, err := time.Parse(DateFormat, date); err != nil {
				return nil, fmt.Errorf("parquetdb: partition %s: date %q: want YYYY-MM-DD", part, date)
			}
			names, err := filepath.Glob(filepath.Join(part, "*.parquet"))
			if err != nil {
				return nil, fmt.Errorf("parquetdb: %w", err)
			}
			for _, path := range names {
				if strings.HasPrefix(filepath.Base(path), ".tmp-") {
					_ = os.Remove(path) // an interrupted write
					continue
				}
				f := File{Path: path, Table: def.Name, Date: date}
				if f.From, f.To, err = rangeOf(path); err != nil {
					return nil, err
				}
				if end != 0 && f.From >= end {
					if err := os.Remove(path); err != nil {
						return nil, fmt.Errorf("parquetdb: remove unrecorded file: %w", err)
					}
					continue
				}
				c.files[def.Name] = append(c.files[def.Name], f)
			}
		}
		fs := c.files[def.Name]
		sort.Slice(fs, func(i, j int) bool { return fs[i].From < fs[j].From })
		for i := 1; i < len(fs); i++ {
			if fs[i].From < fs[i-1].To {
				return nil, fmt.Errorf("parquetdb: files %s and %s overlap", fs[i-1].Path, fs[i].Path)
			}
		}
	}
	return c, nil
}

// rangeOf is the range in a file's name, or else the range of its time statistics.
func rangeOf(path string) (from, to int64, err error) {
	name := strings.TrimSuffix(filepath.Base(path), ".parquet")
	if a, b, ok := strings.Cut(name, "-"); ok {
		from, err1 := strconv.ParseInt(a, 10, 64)
		to, err2 := strconv.ParseInt(b, 10, 64)
		if err1 == nil && err2 == nil && from < to {
			return from, to, nil
		}
	}
	fh, err := os.Open(path)
	if err != nil {
		return 0, 0, fmt.Errorf("parquetdb: %w", err)
	}
	defer fh.Close()
	fi, err := fh.Stat()
	if err != nil {
		return 0, 0, fmt.Errorf("parquetdb: %w", err)
	}
	pf, err := parquet.OpenFile(fh, fi.Size(), parquet.SkipPageIndex(true), parquet.SkipBloomFilters(true))
	if err != nil {
		return 0, 0, fmt.Errorf("parquetdb: open %s: %w", path, err)
	}
	leaf, ok := pf.Schema().Lookup(engine.TimeColumn)
	if !ok {
		return 0, 0, fmt.Errorf("parquetdb: %s has no %q column", path, engine.TimeColumn)
	}
	from, to = int64(1<<63-1), int64(-1<<63)
	for _, rg := range pf.RowGroups() {
		lo, hi, ok := chunkBounds(rg.ColumnChunks()[leaf.ColumnIndex])
		if !ok {
			return 0, 0, fmt.Errorf("parquetdb: %s: a row group has no time statistics; name the file <from>-<to>.parquet", path)
		}
		from, to = min(from, lo), max(to, hi+1)
	}
	if from >= to {
		return 0, 0, fmt.Errorf("parquetdb: %s has no rows", path)
	}
	return from, to, nil
}

func chunkBounds(cc parquet.ColumnChunk) (lo, hi int64, ok bool) {
	fc, isFile := cc.(*parquet.FileColumnChunk)
	if !isFile {
		return 0, 0, false
	}
	mn, mx, ok := fc.Bounds()
	if !ok || mn.IsNull() || mx.IsNull() {
		return 0, 0, false
	}
	return mn.Int64(), mx.Int64(), true
}

// With returns a catalog with the files added (the receiver is unchanged).
func (c *Catalog) With(files ...File) *Catalog {
	n := &Catalog{defs: c.defs, files: make(map[string][]File, len(c.files)), stats: c.stats}
	for t, fs := range c.files {
		n.files[t] = slices.Clone(fs)
	}
	for _, f := range files {
		n.files[f.Table] = append(n.files[f.Table], f)
	}
	for _, fs := range n.files {
		sort.Slice(fs, func(i, j int) bool { return fs[i].From < fs[j].From })
	}
	return n
}

// Files lists the files of a table, in time order.
func (c *Catalog) Files(table string) []File { return slices.Clone(c.files[table]) }

// End is the end of the last file of every table (0 if none).
func (c *Catalog) End() int64 {
	var end int64
	for _, fs := range c.files {
		if len(fs) > 0 {
			end = max(end, fs[len(fs)-1].To)
		}
	}
	return end
}

// Stats returns the counters shared by this catalog and those made from it by With.
func (c *Catalog) Stats() *Stats { return c.stats }

// Has reports whether the catalog serves a table.
func (c *Catalog) Has(table string) bool { _, ok := c.defs[table]; return ok }

// Execute runs getData on the rows of [portionStart, portionEnd) (zero: open) like
// engine.Store.Execute, reading only the files, row groups and columns it needs.
func (c *Catalog) Execute(args messages.GetDataArgs, portionStart, portionEnd time.Time) (merge.Partial, error) {
	return c.ExecuteContext(context.Background(), args, portionStart, portionEnd)
}

// ExecuteContext is Execute that stops with ctx's error once ctx ends: it looks at ctx
// before each file, row group and page it reads, and the engine then looks between
// batches of rows, so a cancelled portion stops reading within one page.
//
// A row query in time order with a limit (GetDataArgs.TimeOrderLimit) stops
// reading once it holds the limit: files and row groups that start after the
// time of the limit-th row it holds are not read.
func (c *Catalog) ExecuteContext(ctx context.Context, args messages.GetDataArgs, portionStart, portionEnd time.Time) (merge.Partial, error) {
	if err := args.Validate(); err != nil {
		return merge.Partial{}, err
	}
	def, ok := c.defs[args.Table]
	if !ok {
		return merge.Partial{}, fmt.Errorf("%w: %q", engine.ErrUnknownTable, args.Table)
	}
	rng, ok := args.Range().Intersect(messages.TimeRangeOf(portionStart, portionEnd))
	sub := neededDef(def, &args)
	sc := scan{tbl: messages.NewTable(sub.Columns), part: messages.NewTable(sub.Columns), def: sub, args: &args,
		rng: rng, limit: args.TimeOrderLimit(), cut: messages.TSMax}
	var files []File
	if ok { // else the range is empty: the engine answers with no rows
		files = c.files[args.Table]
	}
	parts := map[string]bool{}
	for _, f := range files {
		if f.From > sc.cut {
			break // files are in time order and do not overlap: no row past here is needed
		}
		if f.To <= rng.Start || f.From >= rng.End {
			continue
		}
		if !parts[f.Date] {
			parts[f.Date] = true
			c.stats.Partitions.Add(1)
		}
		if err := c.readFile(ctx, f, &sc); err != nil {
			return merge.Partial{}, err
		}
	}
	st := engine.NewStore()
	if err := st.Create(sub); err != nil {
		return merge.Partial{}, err
	}
	if err := st.Append(sub.Name, sc.tbl); err != nil {
		return merge.Partial{}, err
	}
	return st.ExecuteContext(ctx, args, portionStart, portionEnd)
}

// neededDef is the table definition restricted to the columns the request reads. Names
// the table does not have are left to the engine, which reports them.
func neededDef(def engine.TableDef, a *messages.GetDataArgs) engine.TableDef {
	need := map[string]bool{engine.TimeColumn: true}
	if a.Aggregating() {
		for _, g := range a.GroupBy {
			need[g] = true
		}
		for _, s := range a.Agg {
			need[s.Column] = true
		}
	} else if len(a.Columns) == 0 {
		for _, c := range def.Columns {
			need[c.Name] = true
		}
	} else {
		for _, c := range a.Columns {
			need[c] = true
		}
		for _, s := range a.SortCols {
			name, _ := messages.SortKey(s)
			need[name] = true
		}
	}
	for _, f := range a.Filter {
		need[f.Column] = true
	}
	for k := range a.Labels {
		need[k] = true
	}
	if a.Where != nil { // the sql API's residual condition
		for _, c := range a.Where.Columns() {
			need[c] = true
		}
	}
	out := engine.TableDef{Name: def.Name}
	for _, c := range def.Columns {
		if need[c.Name] {
			out.Columns = append(out.Columns, c)
		}
	}
	for _, l := range def.Labels {
		if need[l] {
			out.Labels = append(out.Labels, l)
		}
	}
	return out
}

// countingReader counts the bytes a query reads from a file.
type countingReader struct {
	r io.ReaderAt
	n *atomic.Int64
}

func (c countingReader) ReadAt(p []byte, off int64) (int, error) {
	n, err := c.r.ReadAt(p, off)
	c.n.Add(int64(n))
	return n, err
}

// scan is what a query has read so far, and what it still needs.
type scan struct {
	tbl  messages.Table // the rows read that are in rng and pass the request's selection
	part messages.Table // the rows of the row group being read that are in rng (reused)
	def  engine.TableDef
	args *messages.GetDataArgs
	rng  messages.TimeRange
	// limit is the request's TimeOrderLimit (0: none). Once tbl holds limit
	// rows, cut is the time of the limit-th in time order: no row after it
	// can be in the answer, so files and row groups that start after it are
	// not read. TSMax until then.
	limit int
	cut   int64
}

// readFile appends to sc.tbl the rows of f with time in sc.rng that pass the
// request's selection, reading only the row groups whose time statistics meet
// the range (and start no later than sc.cut) and only tbl's columns.
func (c *Catalog) readFile(ctx context.Context, f File, sc *scan) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	fh, err := os.Open(f.Path)
	if err != nil {
		return fmt.Errorf("parquetdb: %w", err)
	}
	defer fh.Close()
	fi, err := fh.Stat()
	if err != nil {
		return fmt.Errorf("parquetdb: %w", err)
	}
	c.stats.Files.Add(1)
	pf, err := parquet.OpenFile(countingReader{fh, &c.stats.BytesRead}, fi.Size(),
		parquet.SkipPageIndex(true), parquet.SkipBloomFilters(true), parquet.ReadBufferSize(32<<10))
	if err != nil {
		return fmt.Errorf("parquetdb: open %s: %w", f.Path, err)
	}
	tbl := &sc.tbl
	leaves := make([]int, len(tbl.Columns))
	for k := range tbl.Columns {
		leaf, ok := pf.Schema().Lookup(tbl.Columns[k].Name)
		if !ok {
			return fmt.Errorf("parquetdb: %s lacks column %q", f.Path, tbl.Columns[k].Name)
		}
		if err := compatible(leaf.Node.Type().Kind(), tbl.Columns[k].Type); err != nil {
			return fmt.Errorf("parquetdb: %s column %q: %w", f.Path, tbl.Columns[k].Name, err)
		}
		leaves[k] = leaf.ColumnIndex
	}
	tk := tbl.Index(engine.TimeColumn)
	lo, hi := sc.rng.Start, sc.rng.End
	for _, rg := range pf.RowGroups() {
		if err := ctx.Err(); err != nil {
			return err
		}
		chunks := rg.ColumnChunks()
		// Every row group is looked at, not only those up to the first one past
		// the cut: a file brought by a user may hold row groups out of order.
		if mn, mx, ok := chunkBounds(chunks[leaves[tk]]); ok && (mx < lo || mn >= hi || mn > sc.cut) {
			c.stats.RowGroupsSkipped.Add(1)
			continue
		}
		c.stats.RowGroups.Add(1)
		cols := make([][]parquet.Value, len(leaves))
		for k, leaf := range leaves {
			c.stats.ColumnChunks.Add(1)
			if cols[k], err = readChunk(ctx, chunks[leaf], rg.NumRows()); err != nil {
				return fmt.Errorf("parquetdb: %s column %q: %w", f.Path, tbl.Columns[k].Name, err)
			}
			if int64(len(cols[k])) != rg.NumRows() {
				return fmt.Errorf("parquetdb: %s column %q: %d values in a row group of %d rows (nulls are not supported)",
					f.Path, tbl.Columns[k].Name, len(cols[k]), rg.NumRows())
			}
		}
		part := &sc.part
		part.Truncate()
		for i := range cols[tk] {
			if t := cols[tk][i].Int64(); t < lo || t >= hi || t > sc.cut {
				continue
			}
			for k := range part.Columns {
				appendValue(&part.Columns[k], cols[k][i])
			}
			c.stats.Rows.Add(1)
		}
		if err := sc.keep(); err != nil {
			return err
		}
	}
	return nil
}

// keep appends the rows of sc.part that pass the request's selection to
// sc.tbl, and moves the cut once the limit is met.
func (sc *scan) keep() error {
	match, err := engine.Matcher(sc.def, &sc.part, sc.args)
	if err != nil {
		return err
	}
	if match == nil {
		for k := range sc.tbl.Columns {
			sc.tbl.Columns[k].AppendColumn(&sc.part.Columns[k])
		}
	} else {
		for i, n := 0, sc.part.NumRows(); i < n; i++ {
			if match(i) {
				sc.tbl.AppendRowFrom(&sc.part, i)
			}
		}
	}
	if sc.limit == 0 || sc.tbl.NumRows() < sc.limit {
		return nil
	}
	times := sc.tbl.Col(engine.TimeColumn).Ints
	if !slices.IsSorted(times) { // a user's file, rows out of order: the engine sorts them
		sorted := slices.Clone(times)
		slices.Sort(sorted)
		sc.cut = sorted[sc.limit-1]
		return nil
	}
	sc.cut = times[sc.limit-1]
	// The rows after the cut (and its ties) are not needed: drop them now.
	if n := sort.Search(len(times), func(i int) bool { return times[i] > sc.cut }); n < len(times) {
		sc.tbl = sc.tbl.Slice(0, n)
	}
	return nil
}

func compatible(k parquet.Kind, t messages.ColumnType) error {
	want := map[messages.ColumnType]parquet.Kind{
		messages.TypeTimestamp: parquet.Int64, messages.TypeInt: parquet.Int64, messages.TypeFloat: parquet.Double,
		messages.TypeBool: parquet.Boolean, messages.TypeSymbol: parquet.ByteArray, messages.TypeString: parquet.ByteArray,
	}[t]
	if k != want {
		return fmt.Errorf("Parquet type %s cannot hold a %s column (want %s)", k, t, want)
	}
	return nil
}

func readChunk(ctx context.Context, cc parquet.ColumnChunk, numRows int64) ([]parquet.Value, error) {
	pages := cc.Pages()
	defer pages.Close()
	out := make([]parquet.Value, 0, numRows)
	buf := make([]parquet.Value, 1024)
	for {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		p, err := pages.ReadPage()
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		vr := p.Values()
		for {
			n, err := vr.ReadValues(buf)
			for _, v := range buf[:n] {
				if v.IsNull() {
					parquet.Release(p)
					return nil, fmt.Errorf("null values are not supported")
				}
				out = append(out, v.Clone())
			}
			if err == io.EOF {
				break
			}
			if err != nil {
				parquet.Release(p)
				return nil, err
			}
		}
		parquet.Release(p)
	}
}

func appendValue(c *messages.Column, v parquet.Value) {
	switch c.Type {
	case messages.TypeTimestamp, messages.TypeInt:
		c.Ints = append(c.Ints, v.Int64())
	case messages.TypeFloat:
		c.Floats = append(c.Floats, v.Double())
	case messages.TypeBool:
		c.Bools = append(c.Bools, v.Boolean())
	default:
		c.Strings = append(c.Strings, string(v.ByteArray()))
	}
}
