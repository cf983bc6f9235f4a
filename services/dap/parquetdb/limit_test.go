package parquetdb

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/sg-project/sg/messages"
	"github.com/sg-project/sg/services/dap/demo"
	"github.com/sg-project/sg/services/dap/engine"
)

// A row query in time order with a limit stops reading once it holds the
// limit: a small limit over a long range opens one file and reads the first
// row groups, and answers as the in-memory engine does.
func TestLimitStopsReading(t *testing.T) {
	dir := t.TempDir()
	const days, perDay, rowGroup = 3, 20_000, 1000
	all := writeDays(t, dir, demo.Config{Seed: 5, TradesPerDay: perDay}, days, rowGroup)
	for _, c := range []struct {
		name      string
		q         messages.GetDataArgs
		maxGroups int64 // row groups read, at most
	}{
		{"rows", messages.GetDataArgs{Table: demo.Trade, Limit: 10}, 2},
		{"columns from day 2", messages.GetDataArgs{Table: demo.Trade, Limit: 10, StartTS: day0.Add(30 * time.Hour), Columns: []string{"sym", "price"}}, 2},
		// One row in six is BP.L: 500 of them are in the first ~3,000 rows.
		{"filter", messages.GetDataArgs{Table: demo.Trade, Limit: 500, Filter: []messages.Filter{{Op: "=", Column: "sym", Value: "BP.L"}}}, 5},
		{"labels", messages.GetDataArgs{Table: demo.Trade, Limit: 10, Labels: messages.LabelSelector{"region": {"eu"}}}, 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			cat, err := Open(dir, demo.Defs(), 0)
			if err != nil {
				t.Fatal(err)
			}
			got, err := cat.Execute(c.q, time.Time{}, time.Time{})
			if err != nil {
				t.Fatal(err)
			}
			want, err := all.Execute(c.q, time.Time{}, time.Time{})
			if err != nil {
				t.Fatal(err)
			}
			same(t, c.q, got, want)
			st := cat.Stats()
			if st.Files.Load() != 1 || st.RowGroups.Load() > c.maxGroups {
				t.Fatalf("read %d files and %d row groups (%d rows) of %d and %d, want 1 file and at most %d row groups",
					st.Files.Load(), st.RowGroups.Load(), st.Rows.Load(), days, days*perDay/rowGroup, c.maxGroups)
			}
		})
	}
	// Without the first rows in time order to stop at (sortCols, an
	// aggregate), every row group of the range is read.
	for _, q := range []messages.GetDataArgs{
		{Table: demo.Trade, Limit: 10, SortCols: []string{"-size"}},
		{Table: demo.Trade, Limit: 2, GroupBy: []string{"sym"}, Agg: []messages.AggSpec{{Name: "n", Func: messages.AggCount}}},
	} {
		cat, err := Open(dir, demo.Defs(), 0)
		if err != nil {
			t.Fatal(err)
		}
		got, err := cat.Execute(q, time.Time{}, time.Time{})
		if err != nil {
			t.Fatal(err)
		}
		want, _ := all.Execute(q, time.Time{}, time.Time{})
		same(t, q, got, want)
		if n := cat.Stats().RowGroups.Load(); n != days*perDay/rowGroup {
			t.Fatalf("%+v: read %d row groups, want all %d", q, n, days*perDay/rowGroup)
		}
	}
}

// Rows of equal time are all kept at the cut, also when they run on into
// the next row groups: the merge orders ties by their values before it cuts.
func TestLimitKeepsTiesAcrossRowGroups(t *testing.T) {
	dir := t.TempDir()
	from := day0
	rows, err := demo.Config{Seed: 6, TradesPerDay: 3000}.Rows(demo.Trade, "eu", from, from.Add(24*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	times := rows.Col("time").Ints
	for i := range times { // runs of 7 rows of one time, in row groups of 5
		times[i] = from.UnixNano() + int64(i/7)*int64(time.Second)
	}
	if _, err := Write(dir, tradeDef(), rows, from.UnixNano(), from.Add(24*time.Hour).UnixNano(), 5); err != nil {
		t.Fatal(err)
	}
	all := engine.NewStore()
	if err := all.Create(tradeDef()); err != nil {
		t.Fatal(err)
	}
	if err := all.Append(demo.Trade, rows); err != nil {
		t.Fatal(err)
	}
	cat, err := Open(dir, demo.Defs(), 0)
	if err != nil {
		t.Fatal(err)
	}
	ps := from.Add(3 * time.Second) // a portion starting inside a run
	for limit := 1; limit <= 30; limit++ {
		for _, q := range []messages.GetDataArgs{
			{Table: demo.Trade, Limit: limit},
			{Table: demo.Trade, Limit: limit, Columns: []string{"time", "side"}, Filter: []messages.Filter{{Op: "=", Column: "side", Value: "B"}}},
		} {
			got, err := cat.Execute(q, ps, time.Time{})
			if err != nil {
				t.Fatal(err)
			}
			want, _ := all.Execute(q, ps, time.Time{})
			same(t, q, got, want)
		}
	}
}

// A file brought by a user with its row groups out of time order still gives
// the first rows in time order: row groups after one past the cut are looked at.
func TestLimitOverRowGroupsOutOfOrder(t *testing.T) {
	dir := t.TempDir()
	from, to := day0, day0.Add(24*time.Hour)
	rows, err := demo.Config{Seed: 8, TradesPerDay: 4000}.Rows(demo.Trade, "eu", from, to)
	if err != nil {
		t.Fatal(err)
	}
	n := rows.NumRows()
	order := make([]int, 0, n) // the later half first
	for i := n / 2; i < n; i++ {
		order = append(order, i)
	}
	for i := range n / 2 {
		order = append(order, i)
	}
	shuffled := rows.Take(order)
	path := filepath.Join(dir, demo.Trade, "date="+from.Format(DateFormat), fmt.Sprintf("%d-%d.parquet", from.UnixNano(), to.UnixNano()))
	if err := writeFile(path, tradeDef(), &shuffled, 500); err != nil {
		t.Fatal(err)
	}
	all := engine.NewStore()
	if err := all.Create(tradeDef()); err != nil {
		t.Fatal(err)
	}
	if err := all.Append(demo.Trade, rows); err != nil {
		t.Fatal(err)
	}
	cat, err := Open(dir, demo.Defs(), 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []messages.GetDataArgs{
		{Table: demo.Trade, Limit: 10},
		{Table: demo.Trade, Limit: 700},
		{Table: demo.Trade, Limit: 10, Filter: []messages.Filter{{Op: "=", Column: "sym", Value: "VOD.L"}}},
	} {
		got, err := cat.Execute(q, time.Time{}, time.Time{})
		if err != nil {
			t.Fatal(err)
		}
		want, _ := all.Execute(q, time.Time{}, time.Time{})
		same(t, q, got, want)
	}
}
