package engine_test

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/sg-project/sg/messages"
	"github.com/sg-project/sg/services/agg/merge"
	"github.com/sg-project/sg/services/dap/engine"
)

// handStore holds six trades whose answers are worked out by hand below.
func handStore(t *testing.T) *engine.Store {
	s := engine.NewStore()
	def := engine.TableDef{Name: "trade", Labels: []string{"region"}, Columns: []messages.ColumnSpec{
		{Name: "time", Type: messages.TypeTimestamp}, {Name: "region", Type: messages.TypeSymbol},
		{Name: "sym", Type: messages.TypeSymbol}, {Name: "price", Type: messages.TypeFloat},
		{Name: "size", Type: messages.TypeInt}, {Name: "block", Type: messages.TypeBool}}}
	if err := s.Create(def); err != nil {
		t.Fatal(err)
	}
	if err := s.Create(engine.TableDef{Name: "instrument", Columns: []messages.ColumnSpec{
		{Name: "sym", Type: messages.TypeSymbol}, {Name: "lot", Type: messages.TypeInt}}}); err != nil {
		t.Fatal(err)
	}
	tb := messages.NewTable(def.Columns)
	sec := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Second) }
	for _, r := range [][]any{ // deliberately out of time order: Append sorts
		{sec(3), "eu", "VOD", 1.5, int64(10), false},
		{sec(1), "eu", "VOD", 1.0, int64(20), false},
		{sec(2), "us", "AAPL", 100.0, int64(5), true},
		{sec(4), "eu", "BP", 4.0, int64(7), false},
		{sec(5), "us", "AAPL", 101.0, int64(3), false},
		{sec(6), "eu", "VOD", 0.5, int64(1), true},
	} {
		if err := tb.AppendRow(r...); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Append("trade", tb); err != nil {
		t.Fatal(err)
	}
	inst := messages.NewTable([]messages.ColumnSpec{{Name: "sym", Type: messages.TypeSymbol}, {Name: "lot", Type: messages.TypeInt}})
	_ = inst.AppendRow("VOD", int64(1))
	_ = inst.AppendRow("AAPL", int64(100))
	if err := s.Append("instrument", inst); err != nil {
		t.Fatal(err)
	}
	return s
}

func run(t *testing.T, s *engine.Store, a messages.GetDataArgs) string {
	t.Helper()
	p, err := s.Execute(a, time.Time{}, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	tb, err := merge.Merge(a, []merge.Partial{p})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := tb.MarshalJSON()
	return string(b)
}

func TestRowsByHand(t *testing.T) {
	s := handStore(t)
	cases := []struct {
		name string
		args messages.GetDataArgs
		want string
	}{
		{"time range and filter, time order",
			messages.GetDataArgs{Table: "trade", StartTS: t0.Add(time.Second), EndTS: t0.Add(6 * time.Second),
				Filter: []messages.Filter{{Op: ">=", Column: "size", Value: int64(5)}}, Columns: []string{"sym", "size"}},
			`[{"sym":"VOD","size":20},{"sym":"AAPL","size":5},{"sym":"VOD","size":10},{"sym":"BP","size":7}]`},
		{"labels, like, sort descending, limit",
			messages.GetDataArgs{Table: "trade", Labels: messages.LabelSelector{"region": {"eu"}},
				Filter: []messages.Filter{{Op: "like", Column: "sym", Value: "?O*"}}, Columns: []string{"price"},
				SortCols: []string{"-price"}, Limit: 2},
			`[{"price":1.5},{"price":1}]`},
		{"time as RFC 3339 string, bool filter, within",
			messages.GetDataArgs{Table: "trade", Filter: []messages.Filter{
				{Op: "within", Column: "time", Value: []any{"2024-01-02T00:00:02Z", "2024-01-02T00:00:06Z"}},
				{Op: "<>", Column: "block", Value: false}}, Columns: []string{"time", "sym"}},
			`[{"time":"2024-01-02T00:00:02.000000000Z","sym":"AAPL"},{"time":"2024-01-02T00:00:06.000000000Z","sym":"VOD"}]`},
		{"reference table ignores the time range; unknown labels are routing labels",
			messages.GetDataArgs{Table: "instrument", StartTS: t0, EndTS: t0.Add(time.Second),
				Labels: messages.LabelSelector{"region": {"nowhere"}}},
			// No time: rows come in the canonical order of their values.
			`[{"sym":"AAPL","lot":100},{"sym":"VOD","lot":1}]`},
	}
	for _, c := range cases {
		if got := run(t, s, c.args); got != c.want {
			t.Errorf("%s\n got %s\nwant %s", c.name, got, c.want)
		}
	}
}

func TestEachAggByHand(t *testing.T) {
	s := handStore(t)
	a := messages.GetDataArgs{Table: "trade", GroupBy: []string{"sym"}, Agg: []messages.AggSpec{
		{Name: "n", Func: "count"}, {Name: "qty", Func: "sum", Column: "size"}, {Name: "px", Func: "sum", Column: "price"},
		{Name: "avgPx", Func: "avg", Column: "price"}, {Name: "avgQty", Func: "avg", Column: "size"},
		{Name: "lo", Func: "min", Column: "price"}, {Name: "hi", Func: "max", Column: "size"},
		{Name: "open", Func: "first", Column: "price"}, {Name: "close", Func: "last", Column: "price"},
		{Name: "lastT", Func: "last", Column: "time"}}}
	// AAPL: 100@2s size 5, 101@5s size 3. BP: 4@4s size 7. VOD: 1@1s 20, 1.5@3s 10, 0.5@6s 1.
	want := `[{"sym":"AAPL","n":2,"qty":8,"px":201,"avgPx":100.5,"avgQty":4,"lo":100,"hi":5,"open":100,"close":101,"lastT":"2024-01-02T00:00:05.000000000Z"},` +
		`{"sym":"BP","n":1,"qty":7,"px":4,"avgPx":4,"avgQty":7,"lo":4,"hi":7,"open":4,"close":4,"lastT":"2024-01-02T00:00:04.000000000Z"},` +
		`{"sym":"VOD","n":3,"qty":31,"px":3,"avgPx":1,"avgQty":10.333333333333334,"lo":0.5,"hi":20,"open":1,"close":0.5,"lastT":"2024-01-02T00:00:06.000000000Z"}]`
	if got := run(t, s, a); got != want {
		t.Errorf("groupBy sym\n got %s\nwant %s", got, want)
	}
	// Whole-table aggregate, sorted groups with limit.
	whole := messages.GetDataArgs{Table: "trade", Agg: []messages.AggSpec{{Name: "n", Func: "count"}, {Name: "v", Func: "sum", Column: "size"}}}
	if got := run(t, s, whole); got != `[{"n":6,"v":46}]` {
		t.Errorf("whole table: %s", got)
	}
	top := messages.GetDataArgs{Table: "trade", GroupBy: []string{"sym"}, Agg: []messages.AggSpec{{Name: "n", Func: "count"}},
		SortCols: []string{"-n"}, Limit: 2}
	if got := run(t, s, top); got != `[{"sym":"VOD","n":3},{"sym":"AAPL","n":2}]` {
		t.Errorf("top 2: %s", got)
	}
	distinct := messages.GetDataArgs{Table: "trade", GroupBy: []string{"region", "block"}}
	if got := run(t, s, distinct); got != `[{"region":"eu","block":false},{"region":"eu","block":true},{"region":"us","block":false},{"region":"us","block":true}]` {
		t.Errorf("distinct: %s", got)
	}
}

func TestPortionIntersectsRange(t *testing.T) {
	s := handStore(t)
	a := messages.GetDataArgs{Table: "trade", StartTS: t0.Add(2 * time.Second), EndTS: t0.Add(10 * time.Second), Columns: []string{"size"}}
	p, err := s.Execute(a, t0, t0.Add(4*time.Second)) // rows at 2s and 3s
	if err != nil {
		t.Fatal(err)
	}
	if got := p.Rows.Col("size").Ints; len(got) != 2 || got[0] != 5 || got[1] != 10 {
		t.Fatalf("portion rows %v, want [5 10]", got)
	}
}

func TestExecuteErrors(t *testing.T) {
	s := handStore(t)
	base := messages.GetDataArgs{Table: "trade"}
	cases := []struct {
		name string
		mut  func(*messages.GetDataArgs)
		want error
	}{
		{"unknown table", func(a *messages.GetDataArgs) { a.Table = "nope" }, engine.ErrUnknownTable},
		{"unknown column", func(a *messages.GetDataArgs) { a.Columns = []string{"nope"} }, engine.ErrUnknownColumn},
		{"unknown filter column", func(a *messages.GetDataArgs) { a.Filter = []messages.Filter{{Op: "=", Column: "x", Value: "a"}} }, engine.ErrUnknownColumn},
		{"unknown groupBy", func(a *messages.GetDataArgs) { a.GroupBy = []string{"nope"} }, engine.ErrUnknownColumn},
		{"unknown agg column", func(a *messages.GetDataArgs) {
			a.Agg = []messages.AggSpec{{Name: "m", Func: "max", Column: "nope"}}
		}, engine.ErrUnknownColumn},
		{"string for int", func(a *messages.GetDataArgs) { a.Filter = []messages.Filter{{Op: ">", Column: "size", Value: "5"}} }, engine.ErrFilterType},
		{"fraction for int", func(a *messages.GetDataArgs) { a.Filter = []messages.Filter{{Op: ">", Column: "size", Value: 2.5}} }, engine.ErrFilterType},
		{"number for symbol", func(a *messages.GetDataArgs) { a.Filter = []messages.Filter{{Op: "=", Column: "sym", Value: int64(1)}} }, engine.ErrFilterType},
		{"bad time string", func(a *messages.GetDataArgs) {
			a.Filter = []messages.Filter{{Op: "<", Column: "time", Value: "noon"}}
		}, engine.ErrFilterType},
		{"like on float", func(a *messages.GetDataArgs) {
			a.Filter = []messages.Filter{{Op: "like", Column: "price", Value: "1*"}}
		}, engine.ErrFilterType},
		{"order on bool", func(a *messages.GetDataArgs) { a.Filter = []messages.Filter{{Op: "<", Column: "block", Value: true}} }, engine.ErrFilterType},
		{"sum of symbol", func(a *messages.GetDataArgs) { a.Agg = []messages.AggSpec{{Name: "s", Func: "sum", Column: "sym"}} }, merge.ErrAggType},
		{"avg of time", func(a *messages.GetDataArgs) { a.Agg = []messages.AggSpec{{Name: "s", Func: "avg", Column: "time"}} }, merge.ErrAggType},
		{"sort on non-output", func(a *messages.GetDataArgs) { a.Columns, a.SortCols = []string{"sym"}, []string{"price"} }, merge.ErrSortColumn},
		{"agg sort on non-output", func(a *messages.GetDataArgs) {
			a.GroupBy, a.SortCols = []string{"sym"}, []string{"price"}
		}, merge.ErrSortColumn},
		{"invalid args", func(a *messages.GetDataArgs) { a.Limit = -1 }, messages.ErrInvalidGetDataArgs},
	}
	for _, c := range cases {
		a := base
		c.mut(&a)
		if _, err := s.Execute(a, time.Time{}, time.Time{}); !errors.Is(err, c.want) {
			t.Errorf("%s: error %v, want %v", c.name, err, c.want)
		}
	}
}

func TestStoreSchemaErrors(t *testing.T) {
	s := engine.NewStore()
	bad := []engine.TableDef{
		{Name: ""},
		{Name: "a", Columns: []messages.ColumnSpec{{Name: "time", Type: messages.TypeInt}}},
		{Name: "b", Columns: []messages.ColumnSpec{{Name: "x", Type: messages.TypeInt}}, Labels: []string{"x"}},
		{Name: "c", Columns: []messages.ColumnSpec{{Name: "x", Type: 99}}},
	}
	for _, d := range bad {
		if err := s.Create(d); !errors.Is(err, engine.ErrSchema) {
			t.Errorf("create %+v: %v, want ErrSchema", d, err)
		}
	}
	ok := engine.TableDef{Name: "ok", Columns: []messages.ColumnSpec{{Name: "x", Type: messages.TypeInt}}}
	if err := s.Create(ok); err != nil {
		t.Fatal(err)
	}
	if err := s.Create(ok); !errors.Is(err, engine.ErrSchema) {
		t.Errorf("duplicate create: %v", err)
	}
	wrong := messages.NewTable([]messages.ColumnSpec{{Name: "x", Type: messages.TypeFloat}})
	if err := s.Append("ok", wrong); !errors.Is(err, engine.ErrSchema) {
		t.Errorf("append wrong type: %v", err)
	}
	if err := s.Append("nope", wrong); !errors.Is(err, engine.ErrUnknownTable) {
		t.Errorf("append unknown: %v", err)
	}
}

// TestRowsViewSurvivesWrites: a row query over consecutive rows returns a view
// of the store, not a copy; later appends (in and out of time order), upserts
// and replaces must leave a partial already handed out as it was.
func TestRowsViewSurvivesWrites(t *testing.T) {
	s := handStore(t)
	args := messages.GetDataArgs{Table: "trade"}
	p, err := s.Execute(args, time.Time{}, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	before, err := merge.EncodePartial(p)
	if err != nil {
		t.Fatal(err)
	}
	def, _ := s.Def("trade")
	for _, at := range []time.Duration{10 * time.Second, 0} { // after the last row, then before the first (a sort)
		tb := messages.NewTable(def.Columns)
		if err := tb.AppendRow(t0.Add(at), "eu", "NEW", 9.0, int64(99), true); err != nil {
			t.Fatal(err)
		}
		if err := s.Append("trade", tb); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Replace("trade", messages.NewTable(def.Columns)); err != nil {
		t.Fatal(err)
	}
	after, err := merge.EncodePartial(p)
	if err != nil {
		t.Fatal(err)
	}
	if string(before) != string(after) || p.Rows.NumRows() != 6 {
		t.Fatalf("a partial handed out changed under later writes (%d rows)", p.Rows.NumRows())
	}
}

// TestLimitIsPushedDownToTheDAP: a row query with a limit and no sortCols
// makes a DAP send the first Limit rows in time order, not its whole time
// range; the merge relies on each partial being in time order. A DAP that left
// the cut to the Agg would send the whole range here.
func TestLimitIsPushedDownToTheDAP(t *testing.T) {
	s := engine.NewStore()
	def := engine.TableDef{Name: "trade", Labels: []string{"region"}, Columns: []messages.ColumnSpec{
		{Name: "time", Type: messages.TypeTimestamp}, {Name: "region", Type: messages.TypeSymbol},
		{Name: "size", Type: messages.TypeInt}}}
	if err := s.Create(def); err != nil {
		t.Fatal(err)
	}
	const rows = 100_000
	tb := messages.NewTable(def.Columns)
	for i := range rows {
		// Pairs of rows share a time: rows 2k and 2k+1 are tied.
		if err := tb.AppendRow(t0.Add(time.Duration(i/2)*time.Millisecond), "eu", int64(i%10)); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Append("trade", tb); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		args messages.GetDataArgs
	}{
		{"no filter", messages.GetDataArgs{Table: "trade", Limit: 7}},
		{"filter", messages.GetDataArgs{Table: "trade", Limit: 5,
			Filter: []messages.Filter{{Op: "=", Column: "size", Value: int64(3)}}}},
		{"time range", messages.GetDataArgs{Table: "trade", Limit: 4, StartTS: t0.Add(time.Second)}},
	} {
		p, err := s.Execute(c.args, time.Time{}, time.Time{})
		if err != nil {
			t.Fatal(err)
		}
		if n := p.Rows.NumRows(); n != c.args.Limit {
			t.Errorf("%s: limit %d: the DAP's partial has %d of %d rows", c.name, c.args.Limit, n, rows)
		}
		// The rows the limit must keep: the first matching ones in time order.
		var want []int64
		for i := 0; len(want) < c.args.Limit; i++ {
			at := t0.Add(time.Duration(i/2) * time.Millisecond)
			if at.Before(c.args.StartTS) || (len(c.args.Filter) > 0 && int64(i%10) != c.args.Filter[0].Value) {
				continue
			}
			want = append(want, at.UnixNano())
		}
		if !slices.Equal([]int64(p.Times), want) {
			t.Errorf("%s: the partial's times %v, want the first %d matching in time order %v", c.name, p.Times, c.args.Limit, want)
		}
	}
	// Without a limit a large partial is the whole range, in time order.
	p, err := s.Execute(messages.GetDataArgs{Table: "trade"}, time.Time{}, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	if p.Rows.NumRows() != rows {
		t.Fatalf("no limit: %d rows, want %d", p.Rows.NumRows(), rows)
	}
	for i := 1; i < len(p.Times); i++ {
		if p.Times[i] < p.Times[i-1] {
			t.Fatalf("no limit: row %d before row %d in time", i, i-1)
		}
	}
}
