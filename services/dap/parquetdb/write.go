package parquetdb

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/parquet-go/parquet-go"
	"github.com/sg-project/sg/messages"
	"github.com/sg-project/sg/services/dap/engine"
)

// DefaultRowGroupRows is the row group size of the files written here: small enough that
// a narrow time range skips most of a day, large enough to compress well.
const DefaultRowGroupRows = 16 << 10

// DateFormat names the date partitions ("date=2006-01-02").
const DateFormat = "2006-01-02"

// schemaOf is the Parquet schema of a table definition.
func schemaOf(def engine.TableDef) (*parquet.Schema, error) {
	g := parquet.Group{}
	for _, c := range def.Columns {
		var n parquet.Node
		switch c.Type {
		case messages.TypeTimestamp:
			n = parquet.Timestamp(parquet.Nanosecond)
		case messages.TypeInt:
			n = parquet.Leaf(parquet.Int64Type)
		case messages.TypeFloat:
			n = parquet.Leaf(parquet.DoubleType)
		case messages.TypeBool:
			n = parquet.Leaf(parquet.BooleanType)
		case messages.TypeSymbol, messages.TypeString:
			n = parquet.String()
		default:
			return nil, fmt.Errorf("parquetdb: table %q column %q: type %s has no Parquet form", def.Name, c.Name, c.Type)
		}
		g[c.Name] = n
	}
	return parquet.NewSchema(def.Name, g), nil
}

// Write stores the rows of a time table with time in [from, to) as one file per UTC date
// (rows outside the range are an error: the caller cut them). Each file is written to a
// temporary name, synced and renamed, and its directory synced, so a crash leaves either
// the whole file or none. It returns the files written, in time order.
func Write(dir string, def engine.TableDef, rows messages.Table, from, to int64, rowGroupRows int) ([]File, error) {
	if rowGroupRows <= 0 {
		rowGroupRows = DefaultRowGroupRows
	}
	tc := rows.Index(engine.TimeColumn)
	if tc < 0 || !def.IsTimeTable() {
		return nil, fmt.Errorf("parquetdb: table %q has no %q column", def.Name, engine.TimeColumn)
	}
	times := rows.Columns[tc].Ints
	if !sort.SliceIsSorted(times, func(i, j int) bool { return times[i] < times[j] }) {
		return nil, fmt.Errorf("parquetdb: rows of %q are not in time order", def.Name)
	}
	if n := len(times); n > 0 && (times[0] < from || times[n-1] >= to) {
		return nil, fmt.Errorf("parquetdb: rows of %q reach outside [%d, %d)", def.Name, from, to)
	}
	var out []File
	for day := dayStart(from); day < to; day = day + int64(24*time.Hour) {
		f := File{Table: def.Name, Date: time.Unix(0, day).UTC().Format(DateFormat),
			From: max(from, day), To: min(to, day+int64(24*time.Hour))}
		lo := sort.Search(len(times), func(i int) bool { return times[i] >= f.From })
		hi := sort.Search(len(times), func(i int) bool { return times[i] >= f.To })
		if lo == hi {
			continue // an empty range needs no file: the catalog's purview says it is empty
		}
		f.Path = filepath.Join(dir, def.Name, "date="+f.Date, fmt.Sprintf("%d-%d.parquet", f.From, f.To))
		part := rows.Slice(lo, hi)
		if err := writeFile(f.Path, def, &part, rowGroupRows); err != nil {
			return out, err
		}
		f.Rows = int64(hi - lo)
		out = append(out, f)
	}
	return out, nil
}

func dayStart(ns int64) int64 {
	return time.Unix(0, ns).UTC().Truncate(24 * time.Hour).UnixNano()
}

func writeFile(path string, def engine.TableDef, rows *messages.Table, rowGroupRows int) (err error) {
	schema, err := schemaOf(def)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("parquetdb: %w", err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".tmp-*.parquet")
	if err != nil {
		return fmt.Errorf("parquetdb: %w", err)
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	// Column k of the table is leaf index col[k] of the schema (Group sorts by name).
	col := make([]int, len(def.Columns))
	for k, c := range def.Columns {
		leaf, ok := schema.Lookup(c.Name)
		if !ok {
			return fmt.Errorf("parquetdb: column %q missing from the schema", c.Name)
		}
		col[k] = leaf.ColumnIndex
	}
	src := make([]*messages.Column, len(def.Columns))
	for k, c := range def.Columns {
		if src[k] = rows.Col(c.Name); src[k] == nil || src[k].Type != c.Type {
			return fmt.Errorf("parquetdb: rows lack column %q of type %s", c.Name, c.Type)
		}
	}
	w := parquet.NewWriter(tmp, schema, parquet.MaxRowsPerRowGroup(int64(rowGroupRows)),
		parquet.Compression(&parquet.Snappy), parquet.KeyValueMetadata("sg.table", def.Name))
	const batch = 1024
	buf := make([]parquet.Row, 0, batch)
	n := rows.NumRows()
	for i := 0; i < n; i++ {
		r := make(parquet.Row, len(def.Columns))
		for k, c := range src {
			var v parquet.Value
			switch c.Type {
			case messages.TypeTimestamp, messages.TypeInt:
				v = parquet.Int64Value(c.Ints[i])
			case messages.TypeFloat:
				v = parquet.DoubleValue(c.Floats[i])
			case messages.TypeBool:
				v = parquet.BooleanValue(c.Bools[i])
			default:
				v = parquet.ByteArrayValue([]byte(c.Str(i)))
			}
			r[col[k]] = v.Level(0, 0, col[k])
		}
		buf = append(buf, r)
		if len(buf) == batch || i == n-1 {
			if _, err := w.WriteRows(buf); err != nil {
				return fmt.Errorf("parquetdb: write %s: %w", path, err)
			}
			buf = buf[:0]
		}
	}
	if err := w.Close(); err != nil {
		return fmt.Errorf("parquetdb: close %s: %w", path, err)
	}
	if err := tmp.Sync(); err != nil {
		return fmt.Errorf("parquetdb: sync %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("parquetdb: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("parquetdb: %w", err)
	}
	return syncDir(filepath.Dir(path))
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("parquetdb: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil && !errors.Is(err, os.ErrInvalid) {
		return fmt.Errorf("parquetdb: sync dir %s: %w", dir, err)
	}
	return nil
}
