package parquetdb

import (
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"testing"
	"time"

	"github.com/sg-project/sg/messages"
	"github.com/sg-project/sg/services/agg/merge"
	"github.com/sg-project/sg/services/dap/demo"
	"github.com/sg-project/sg/services/dap/engine"
)

var day0 = time.Date(2026, 3, 2, 0, 0, 0, 0, time.UTC)

func tradeDef() engine.TableDef {
	for _, d := range demo.Defs() {
		if d.Name == demo.Trade {
			return d
		}
	}
	panic("no trade table")
}

// writeDays writes days of demo trades for eu, one Write per day, and returns the rows.
func writeDays(t *testing.T, dir string, cfg demo.Config, days, rowGroup int) *engine.Store {
	t.Helper()
	all := engine.NewStore()
	if err := all.Create(tradeDef()); err != nil {
		t.Fatal(err)
	}
	for d := range days {
		from, to := day0.Add(time.Duration(d)*24*time.Hour), day0.Add(time.Duration(d+1)*24*time.Hour)
		rows, err := cfg.Rows(demo.Trade, "eu", from, to)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := Write(dir, tradeDef(), rows, from.UnixNano(), to.UnixNano(), rowGroup); err != nil {
			t.Fatal(err)
		}
		if err := all.Append(demo.Trade, rows); err != nil {
			t.Fatal(err)
		}
	}
	return all
}

func same(t *testing.T, q messages.GetDataArgs, got, want merge.Partial) {
	t.Helper()
	g, err := merge.Merge(q, []merge.Partial{got})
	if err != nil {
		t.Fatal(err)
	}
	w, _ := merge.Merge(q, []merge.Partial{want})
	gb, _ := g.MarshalJSON()
	wb, _ := w.MarshalJSON()
	if string(gb) != string(wb) {
		t.Fatalf("answer differs from the in-memory engine\n got %.400s\nwant %.400s", gb, wb)
	}
}

// The Parquet tier answers exactly like the in-memory engine, for every kind of query,
// across partition boundaries, with portion and request ranges that cut row groups.
func TestSameAnswersAsEngine(t *testing.T) {
	dir := t.TempDir()
	all := writeDays(t, dir, demo.Config{Seed: 4, TradesPerDay: 20_000}, 3, 1000)
	cat, err := Open(dir, demo.Defs(), 0)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(cat.Files(demo.Trade)); n != 3 {
		t.Fatalf("%d files, want 3", n)
	}
	ps, pe := day0.Add(20*time.Hour+17*time.Second), day0.Add(49*time.Hour+3*time.Millisecond)
	for _, q := range []messages.GetDataArgs{
		{Table: demo.Trade},
		{Table: demo.Trade, StartTS: day0.Add(23 * time.Hour), EndTS: day0.Add(25 * time.Hour), Columns: []string{"time", "sym", "price"}},
		{Table: demo.Trade, GroupBy: []string{"sym"}, Agg: []messages.AggSpec{{Name: "n", Func: "count"}, {Name: "v", Func: "sum", Column: "size"},
			{Name: "o", Func: "first", Column: "price"}}, Filter: []messages.Filter{{Op: "=", Column: "block", Value: true}}},
		{Table: demo.Trade, SortCols: []string{"-size"}, Limit: 20, Columns: []string{"sym", "size"}},
		{Table: demo.Trade, Labels: messages.LabelSelector{"region": {"eu"}}, Limit: 7},
	} {
		got, err := cat.Execute(q, ps, pe)
		if err != nil {
			t.Fatal(err)
		}
		want, err := all.Execute(q, ps, pe)
		if err != nil {
			t.Fatal(err)
		}
		same(t, q, got, want)
	}
	if _, err := cat.Execute(messages.GetDataArgs{Table: demo.Trade, Columns: []string{"nope"}}, time.Time{}, time.Time{}); err == nil {
		t.Fatal("unknown column accepted")
	}
}

// History larger than the memory the process is given: a narrow query opens one
// partition, reads a few row groups and only the columns it names.
func TestNarrowQueryReadsLittle(t *testing.T) {
	dir := t.TempDir()
	const days, perDay, rowGroup = 5, 150_000, 8192
	cfg := demo.Config{Seed: 9, TradesPerDay: perDay}
	for d := range days {
		from, to := day0.Add(time.Duration(d)*24*time.Hour), day0.Add(time.Duration(d+1)*24*time.Hour)
		rows, err := cfg.Rows(demo.Trade, "eu", from, to)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := Write(dir, tradeDef(), rows, from.UnixNano(), to.UnixNano(), rowGroup); err != nil {
			t.Fatal(err)
		}
	}
	var onDisk int64
	_ = filepath.Walk(dir, func(_ string, fi os.FileInfo, _ error) error {
		if fi != nil && !fi.IsDir() {
			onDisk += fi.Size()
		}
		return nil
	})
	// In memory the history is 8 columns of ~8-byte values and short strings per row.
	const inMemory = days * perDay * 8 * 8
	const limit = 16 << 20
	if inMemory < 2*limit {
		t.Fatalf("history of %d bytes in memory is not larger than the limit %d", inMemory, limit)
	}
	runtime.GC()
	old := debug.SetMemoryLimit(limit)
	defer debug.SetMemoryLimit(old)

	cat, err := Open(dir, demo.Defs(), 0)
	if err != nil {
		t.Fatal(err)
	}
	from := day0.Add(3*24*time.Hour + 10*time.Hour)
	q := messages.GetDataArgs{Table: demo.Trade, StartTS: from, EndTS: from.Add(5 * time.Minute),
		GroupBy: []string{"sym"}, Agg: []messages.AggSpec{{Name: "n", Func: "count"}, {Name: "px", Func: "avg", Column: "price"}}}
	p, err := cat.Execute(q, time.Time{}, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	res, err := merge.Merge(q, []merge.Partial{p})
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, v := range res.Col("n").Ints {
		n += v
	}
	wantRows, _ := cfg.Rows(demo.Trade, "eu", from, from.Add(5*time.Minute))
	if n != int64(wantRows.NumRows()) || n == 0 {
		t.Fatalf("counted %d trades, want %d", n, wantRows.NumRows())
	}
	st := cat.Stats()
	totalGroups := int64(days * (perDay/rowGroup + 1))
	t.Logf("history: %d rows, %d MB on disk, ~%d MB in memory, limit %d MB; read: %d partitions, %d files, %d row groups (%d skipped of %d), %d column chunks, %d KB",
		days*perDay, onDisk>>20, inMemory>>20, limit>>20, st.Partitions.Load(), st.Files.Load(), st.RowGroups.Load(),
		st.RowGroupsSkipped.Load(), totalGroups, st.ColumnChunks.Load(), st.BytesRead.Load()>>10)
	if st.Partitions.Load() != 1 || st.Files.Load() != 1 {
		t.Fatalf("opened %d partitions and %d files, want 1 and 1", st.Partitions.Load(), st.Files.Load())
	}
	if st.RowGroups.Load() > 2 || st.RowGroupsSkipped.Load() < int64(perDay/rowGroup)-2 {
		t.Fatalf("read %d row groups, skipped %d", st.RowGroups.Load(), st.RowGroupsSkipped.Load())
	}
	if want := st.RowGroups.Load() * 3; st.ColumnChunks.Load() != want { // time, sym, price
		t.Fatalf("read %d column chunks, want %d", st.ColumnChunks.Load(), want)
	}
	if st.BytesRead.Load() > onDisk/20 {
		t.Fatalf("read %d bytes of %d", st.BytesRead.Load(), onDisk)
	}
}

// A file written by someone else, named without a range, is placed by its statistics;
// files left by an unrecorded end of day are removed.
func TestOpenRangesAndOrphans(t *testing.T) {
	dir := t.TempDir()
	writeDays(t, dir, demo.Config{Seed: 1, TradesPerDay: 5000}, 2, 500)
	fs, _ := filepath.Glob(filepath.Join(dir, demo.Trade, "date=*", "*.parquet"))
	if len(fs) != 2 {
		t.Fatalf("files %v", fs)
	}
	renamed := filepath.Join(filepath.Dir(fs[0]), "mine.parquet")
	if err := os.Rename(fs[0], renamed); err != nil {
		t.Fatal(err)
	}
	cat, err := Open(dir, demo.Defs(), day0.Add(24*time.Hour).UnixNano())
	if err != nil {
		t.Fatal(err)
	}
	files := cat.Files(demo.Trade)
	if len(files) != 1 || files[0].Path != renamed || files[0].From < day0.UnixNano() || files[0].To > day0.Add(24*time.Hour).UnixNano() {
		t.Fatalf("files %+v", files)
	}
	if _, err := os.Stat(fs[1]); !os.IsNotExist(err) {
		t.Fatalf("orphan %s kept: %v", fs[1], err)
	}
}
