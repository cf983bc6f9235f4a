package test

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"testing"
	"time"

	"github.com/sg-project/sg/messages"
	"github.com/sg-project/sg/services/dap/demo"
	"github.com/sg-project/sg/services/dap/engine"
	"github.com/sg-project/sg/services/dap/live"
	"github.com/sg-project/sg/services/dap/parquetdb"
)

// An hdb DAP over a directory of Parquet date partitions brought by the user, larger in
// memory than the process may use (a memory limit, as GOMEMLIMIT sets), answers a narrow
// time range through the whole system exactly, opening one partition and reading a few
// row groups of the columns it needs.
func TestLiveHDBOverParquetLargerThanMemory(t *testing.T) {
	const days, perDay, rowGroup = 5, 150_000, 8192
	day0 := time.Date(2026, 5, 4, 0, 0, 0, 0, time.UTC)
	dir := t.TempDir()
	hdb := filepath.Join(dir, "region=eu", "hdb")
	cfg := demo.Config{Seed: 5, TradesPerDay: perDay}
	var trade engine.TableDef
	for _, d := range demo.Defs() {
		if d.Name == demo.Trade {
			trade = d
		}
	}
	for d := range days {
		from, to := day0.Add(time.Duration(d)*24*time.Hour), day0.Add(time.Duration(d+1)*24*time.Hour)
		rows, err := cfg.Rows(demo.Trade, "eu", from, to)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := parquetdb.Write(hdb, trade, rows, from.UnixNano(), to.UnixNano(), rowGroup); err != nil {
			t.Fatal(err)
		}
	}
	const inMemory = days * perDay * 8 * 8 // 8 columns of ~8 bytes a row
	const limit = 16 << 20
	runtime.GC()
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(limit))

	ls := startLiveSys(t, 3)
	g, err := live.NewGroup(live.GroupConfig{NC: ls.nc, Subjects: ls.s, Log: testLogger(t), Labels: messages.LabelSet{"region": "eu"},
		RCID: "rc-1", Dir: filepath.Join(dir, "region=eu"), Tables: demo.Defs(), Start: day0.Add(days * 24 * time.Hour),
		Concurrency: 2, Heartbeat: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(ls.ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = g.Run(ctx) }()
	defer func() { cancel(); <-done }()
	ls.waitDAPs(3)
	select {
	case <-g.Ready():
	case <-time.After(20 * time.Second):
		t.Fatal("group not ready")
	}

	from := day0.Add(2*24*time.Hour + 13*time.Hour)
	args := messages.GetDataArgs{Table: demo.Trade, StartTS: from, EndTS: from.Add(10 * time.Minute), GroupBy: []string{"sym"},
		Agg: []messages.AggSpec{{Name: "n", Func: messages.AggCount}, {Name: "vol", Func: messages.AggSum, Column: "size"}}}
	_, tbl, err := ls.getData(ls.ctx, args)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := cfg.Rows(demo.Trade, "eu", args.StartTS, args.EndTS)
	var n, vol int64
	for i := range tbl.NumRows() {
		n += tbl.Col("n").Ints[i]
		switch v := tbl.Col("vol").Value(i).(type) {
		case int64:
			vol += v
		case float64:
			vol += int64(v)
		}
	}
	var wantVol int64
	for _, s := range want.Col("size").Ints {
		wantVol += s
	}
	if n != int64(want.NumRows()) || vol != wantVol || n == 0 {
		t.Fatalf("counted %d trades of volume %d, want %d and %d", n, vol, want.NumRows(), wantVol)
	}
	var onDisk int64
	_ = filepath.Walk(hdb, func(_ string, fi os.FileInfo, _ error) error {
		if fi != nil && !fi.IsDir() {
			onDisk += fi.Size()
		}
		return nil
	})
	st := g.HDBStats()
	t.Logf("history %d rows, %d MB on disk, ~%d MB in memory, limit %d MB; read %d partition, %d file, %d row groups (%d skipped), %d column chunks, %d KB",
		days*perDay, onDisk>>20, inMemory>>20, limit>>20, st.Partitions.Load(), st.Files.Load(), st.RowGroups.Load(),
		st.RowGroupsSkipped.Load(), st.ColumnChunks.Load(), st.BytesRead.Load()>>10)
	if st.Partitions.Load() != 1 || st.Files.Load() != 1 || st.RowGroups.Load() > 2 || st.ColumnChunks.Load() != 3*st.RowGroups.Load() {
		t.Fatal("the hdb read more than the narrow range needs")
	}
	if st.BytesRead.Load() > onDisk/20 {
		t.Fatalf("read %d bytes of %d", st.BytesRead.Load(), onDisk)
	}
}
