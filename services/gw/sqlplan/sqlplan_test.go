package sqlplan

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/sg-project/sg/messages"
)

var schema = Schema{IsLabel: func(c string) bool { return c == "region" || c == "desk" }}

func ts(s string) time.Time {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		panic(err)
	}
	return t
}

func f(op messages.FilterOp, col string, v any) messages.Filter {
	return messages.Filter{Op: op, Column: col, Value: v}
}

// Each statement and the getData arguments it must plan to: the same
// request a getData caller would send.
func TestPlansOntoGetData(t *testing.T) {
	ns := time.Nanosecond
	for _, c := range []struct {
		sql  string
		want messages.GetDataArgs
	}{
		{"SELECT * FROM trade", messages.GetDataArgs{Table: "trade"}},
		{"select sym, price from trade", messages.GetDataArgs{Table: "trade", Columns: []string{"sym", "price"}}},
		{"SELECT `time`, sym FROM `trade`", messages.GetDataArgs{Table: "trade", Columns: []string{"time", "sym"}}},
		{"SELECT * FROM trade LIMIT 10", messages.GetDataArgs{Table: "trade", Limit: 10}},
		// Time conditions become the range, open or closed, exclusive at the end.
		{"SELECT * FROM trade WHERE time >= '2026-11-22T10:00:00Z'",
			messages.GetDataArgs{Table: "trade", StartTS: ts("2026-11-22T10:00:00Z")}},
		{"SELECT * FROM trade WHERE time < '2026-11-22T11:00:00Z'",
			messages.GetDataArgs{Table: "trade", EndTS: ts("2026-11-22T11:00:00Z")}},
		{"SELECT * FROM trade WHERE time >= '2026-11-22T10:00:00Z' AND time < '2026-11-22T11:00:00Z'",
			messages.GetDataArgs{Table: "trade", StartTS: ts("2026-11-22T10:00:00Z"), EndTS: ts("2026-11-22T11:00:00Z")}},
		{"SELECT * FROM trade WHERE time > '2026-11-22T10:00:00Z' AND time <= '2026-11-22T11:00:00Z'",
			messages.GetDataArgs{Table: "trade", StartTS: ts("2026-11-22T10:00:00Z").Add(ns), EndTS: ts("2026-11-22T11:00:00Z").Add(ns)}},
		{"SELECT * FROM trade WHERE time BETWEEN '2026-11-22T10:00:00Z' AND '2026-11-22T11:00:00Z'",
			messages.GetDataArgs{Table: "trade", StartTS: ts("2026-11-22T10:00:00Z"), EndTS: ts("2026-11-22T11:00:00Z").Add(ns)}},
		{"SELECT * FROM trade WHERE time = '2026-11-22T10:00:00.5Z'",
			messages.GetDataArgs{Table: "trade", StartTS: ts("2026-11-22T10:00:00.5Z"), EndTS: ts("2026-11-22T10:00:00.5Z").Add(ns)}},
		{"SELECT * FROM trade WHERE '2026-11-22T10:00:00Z' <= time",
			messages.GetDataArgs{Table: "trade", StartTS: ts("2026-11-22T10:00:00Z")}},
		{"SELECT * FROM trade WHERE time >= '2026-11-22' AND time >= '2026-11-21'",
			messages.GetDataArgs{Table: "trade", StartTS: ts("2026-11-22T00:00:00Z")}},
		{"SELECT * FROM trade WHERE time >= '2026-11-22 10:00:00'",
			messages.GetDataArgs{Table: "trade", StartTS: ts("2026-11-22T10:00:00Z")}},
		// An open bound stays open while the other end narrows.
		{"SELECT * FROM trade WHERE time <= '2026-11-22T11:00:00Z' AND time < '2026-11-22T12:00:00Z'",
			messages.GetDataArgs{Table: "trade", EndTS: ts("2026-11-22T11:00:00Z").Add(ns)}},
		// Past the timestamps sg holds (messages.TSMin, TSMax) a bound is
		// the open one, as every service reads the range.
		{"SELECT * FROM trade WHERE time >= '1600-01-01' AND time < '2026-11-22'",
			messages.GetDataArgs{Table: "trade", EndTS: ts("2026-11-22T00:00:00Z")}},
		{"SELECT * FROM trade WHERE time < '2300-01-01'", messages.GetDataArgs{Table: "trade"}},
		// Label conditions become the selector.
		{"SELECT * FROM trade WHERE region = 'eu'",
			messages.GetDataArgs{Table: "trade", Labels: messages.LabelSelector{"region": {"eu"}}}},
		{"SELECT * FROM trade WHERE region IN ('eu', 'us')",
			messages.GetDataArgs{Table: "trade", Labels: messages.LabelSelector{"region": {"eu", "us"}}}},
		{"SELECT * FROM trade WHERE region = 'eu' OR region = 'us'",
			messages.GetDataArgs{Table: "trade", Labels: messages.LabelSelector{"region": {"eu", "us"}}}},
		{"SELECT * FROM trade WHERE (region = 'eu' OR region IN ('us', 'eu')) AND desk = 'fx'",
			messages.GetDataArgs{Table: "trade", Labels: messages.LabelSelector{"region": {"eu", "us"}, "desk": {"fx"}}}},
		{"SELECT * FROM trade WHERE region IN ('eu','us','asia') AND region IN ('us','asia')",
			messages.GetDataArgs{Table: "trade", Labels: messages.LabelSelector{"region": {"us", "asia"}}}},
		// Other columns become filters.
		{"SELECT * FROM trade WHERE size > 100",
			messages.GetDataArgs{Table: "trade", Filter: []messages.Filter{f(">", "size", int64(100))}}},
		{"SELECT * FROM trade WHERE 100 < size",
			messages.GetDataArgs{Table: "trade", Filter: []messages.Filter{f(">", "size", int64(100))}}},
		{"SELECT * FROM trade WHERE price <= 10.5 AND price >= -2",
			messages.GetDataArgs{Table: "trade", Filter: []messages.Filter{f("<=", "price", 10.5), f(">=", "price", int64(-2))}}},
		{"SELECT * FROM trade WHERE sym = 'VOD.L'",
			messages.GetDataArgs{Table: "trade", Filter: []messages.Filter{f("=", "sym", "VOD.L")}}},
		{"SELECT * FROM trade WHERE sym <> 'VOD.L'",
			messages.GetDataArgs{Table: "trade", Filter: []messages.Filter{f("<>", "sym", "VOD.L")}}},
		{"SELECT * FROM trade WHERE sym != 'VOD.L'",
			messages.GetDataArgs{Table: "trade", Filter: []messages.Filter{f("<>", "sym", "VOD.L")}}},
		{"SELECT * FROM trade WHERE sym IN ('A', 'B')",
			messages.GetDataArgs{Table: "trade", Filter: []messages.Filter{f("in", "sym", []any{"A", "B"})}}},
		{"SELECT * FROM trade WHERE price BETWEEN 10 AND 20",
			messages.GetDataArgs{Table: "trade", Filter: []messages.Filter{f("within", "price", []any{int64(10), int64(20)})}}},
		{"SELECT * FROM trade WHERE sym LIKE 'VO%'",
			messages.GetDataArgs{Table: "trade", Filter: []messages.Filter{f("like", "sym", "VO*")}}},
		{"SELECT * FROM trade WHERE sym LIKE 'V_D.L'",
			messages.GetDataArgs{Table: "trade", Filter: []messages.Filter{f("like", "sym", "V?D.L")}}},
		{"SELECT * FROM trade WHERE sym LIKE 'A\\%B'",
			messages.GetDataArgs{Table: "trade", Filter: []messages.Filter{f("like", "sym", "A%B")}}},
		{"SELECT * FROM trade WHERE flag = TRUE",
			messages.GetDataArgs{Table: "trade", Filter: []messages.Filter{f("=", "flag", int64(1))}}},
		// Grouping and aggregates.
		{"SELECT sym, count(*) AS n FROM trade GROUP BY sym",
			messages.GetDataArgs{Table: "trade", GroupBy: []string{"sym"}, Agg: []messages.AggSpec{{Name: "n", Func: "count"}}}},
		{"SELECT count(*) FROM trade",
			messages.GetDataArgs{Table: "trade", Agg: []messages.AggSpec{{Name: "count", Func: "count"}}}},
		{"SELECT count(1) AS n, count(price) AS np FROM trade",
			messages.GetDataArgs{Table: "trade", Agg: []messages.AggSpec{{Name: "n", Func: "count"}, {Name: "np", Func: "count", Column: "price"}}}},
		{"SELECT sym, sum(size) AS vol, avg(price) px, min(price) AS lo, max(price) AS hi FROM trade GROUP BY sym",
			messages.GetDataArgs{Table: "trade", GroupBy: []string{"sym"}, Agg: []messages.AggSpec{
				{Name: "vol", Func: "sum", Column: "size"}, {Name: "px", Func: "avg", Column: "price"},
				{Name: "lo", Func: "min", Column: "price"}, {Name: "hi", Func: "max", Column: "price"}}}},
		{"SELECT sym, first(price) AS open, last(price) AS close FROM trade GROUP BY sym",
			messages.GetDataArgs{Table: "trade", GroupBy: []string{"sym"}, Agg: []messages.AggSpec{
				{Name: "open", Func: "first", Column: "price"}, {Name: "close", Func: "last", Column: "price"}}}},
		{"SELECT sym, LAST (price) AS px FROM trade WHERE sym <> 'first(' GROUP BY sym",
			messages.GetDataArgs{Table: "trade", GroupBy: []string{"sym"}, Agg: []messages.AggSpec{{Name: "px", Func: "last", Column: "price"}},
				Filter: []messages.Filter{f("<>", "sym", "first(")}}},
		{"SELECT sum(size) FROM trade",
			messages.GetDataArgs{Table: "trade", Agg: []messages.AggSpec{{Name: "sum_size", Func: "sum", Column: "size"}}}},
		{"SELECT DISTINCT sym FROM trade",
			messages.GetDataArgs{Table: "trade", GroupBy: []string{"sym"}}},
		{"SELECT sym FROM trade GROUP BY sym",
			messages.GetDataArgs{Table: "trade", GroupBy: []string{"sym"}}},
		// Order and limit.
		{"SELECT sym, count(*) AS n FROM trade GROUP BY sym ORDER BY n DESC, sym LIMIT 5",
			messages.GetDataArgs{Table: "trade", GroupBy: []string{"sym"}, Agg: []messages.AggSpec{{Name: "n", Func: "count"}},
				SortCols: []string{"-n", "sym"}, Limit: 5}},
		{"SELECT * FROM trade ORDER BY price ASC, time DESC",
			messages.GetDataArgs{Table: "trade", SortCols: []string{"price", "-time"}}},
		// The example, whole.
		{"SELECT sym, count(*) AS n, avg(price) AS px FROM trade WHERE region IN ('eu','us') AND time >= '2026-11-22T10:00:00Z' GROUP BY sym ORDER BY n DESC LIMIT 5",
			messages.GetDataArgs{Table: "trade", StartTS: ts("2026-11-22T10:00:00Z"), Labels: messages.LabelSelector{"region": {"eu", "us"}},
				GroupBy: []string{"sym"}, Agg: []messages.AggSpec{{Name: "n", Func: "count"}, {Name: "px", Func: "avg", Column: "price"}},
				SortCols: []string{"-n"}, Limit: 5}},
		{"SELECT * FROM trade WHERE region = 'eu' AND size > 10 AND time < '2026-11-23' AND sym IN ('A')",
			messages.GetDataArgs{Table: "trade", EndTS: ts("2026-11-23T00:00:00Z"), Labels: messages.LabelSelector{"region": {"eu"}},
				Filter: []messages.Filter{f(">", "size", int64(10)), f("in", "sym", []any{"A"})}}},
	} {
		t.Run(c.sql, func(t *testing.T) {
			p, err := Parse(c.sql, schema)
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if p.Where != nil {
				t.Errorf("Where = %s, want everything pushed into the getData arguments", p.Where)
			}
			if !reflect.DeepEqual(p.Args, c.want) {
				t.Errorf("planned\n %+v\nwant\n %+v", p.Args, c.want)
			}
		})
	}
}

// A WHERE that getData's filters cannot express stays whole for the DAP;
// the range and selector it implies still narrow the portions.
func TestResidualWhere(t *testing.T) {
	for _, c := range []struct {
		sql, where string
		start      time.Time
		labels     messages.LabelSelector
	}{
		{"SELECT * FROM trade WHERE size > 100 OR price < 5", "([> size 100] or [< price 5])", time.Time{}, nil},
		{"SELECT * FROM trade WHERE NOT sym = 'A'", "not [= sym A]", time.Time{}, nil},
		{"SELECT * FROM trade WHERE sym NOT IN ('A','B')", "not [in sym [A B]]", time.Time{}, nil},
		{"SELECT * FROM trade WHERE sym NOT LIKE 'A%'", "not [like sym A*]", time.Time{}, nil},
		{"SELECT * FROM trade WHERE price NOT BETWEEN 1 AND 2", "not [within price [1 2]]", time.Time{}, nil},
		{"SELECT * FROM trade WHERE region = 'eu' AND time >= '2026-11-22' AND (size > 100 OR sym = 'A')",
			"([= region eu] and [>= time 2026-11-22] and ([> size 100] or [= sym A]))", ts("2026-11-22T00:00:00Z"), messages.LabelSelector{"region": {"eu"}}},
		{"SELECT * FROM trade WHERE time < '2026-11-22' OR time >= '2026-11-23'", "([< time 2026-11-22] or [>= time 2026-11-23])", time.Time{}, nil},
	} {
		t.Run(c.sql, func(t *testing.T) {
			p, err := Parse(c.sql, schema)
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if p.Where == nil || p.Where.String() != c.where {
				t.Fatalf("Where = %v, want %s", p.Where, c.where)
			}
			if len(p.Args.Filter) != 0 {
				t.Errorf("filters %v beside a residual Where: the DAP must evaluate the tree alone", p.Args.Filter)
			}
			if !p.Args.StartTS.Equal(c.start) || !reflect.DeepEqual(p.Args.Labels, c.labels) {
				t.Errorf("range start %v labels %v, want %v %v", p.Args.StartTS, p.Args.Labels, c.start, c.labels)
			}
		})
	}
}

// What sg does not run is refused, naming the construct; wrong statements
// are invalid, saying why.
func TestRefusals(t *testing.T) {
	for _, c := range []struct {
		sql  string
		kind error
		text string
	}{
		{"SELECT * FROM trade JOIN quote ON trade.sym = quote.sym", ErrUnsupported, "joins"},
		{"SELECT * FROM trade, quote", ErrUnsupported, "joins"},
		{"SELECT * FROM (SELECT * FROM trade) t", ErrUnsupported, "subqueries"},
		{"SELECT * FROM trade WHERE sym IN (SELECT sym FROM quote)", ErrUnsupported, "subqueries"},
		{"SELECT * FROM trade WHERE EXISTS (SELECT 1 FROM quote)", ErrUnsupported, "subqueries"},
		{"SELECT * FROM trade UNION SELECT * FROM quote", ErrUnsupported, "UNION"},
		{"INSERT INTO trade VALUES (1)", ErrUnsupported, "INSERT"},
		{"UPDATE trade SET price = 1", ErrUnsupported, "UPDATE"},
		{"DELETE FROM trade", ErrUnsupported, "DELETE"},
		{"DROP TABLE trade", ErrUnsupported, "DDL"},
		{"CREATE TABLE x (a int)", ErrUnsupported, "DDL"},
		{"SELECT 1; SELECT 2", ErrUnsupported, "2 statements"},
		{"SELECT sym, count(*) FROM trade GROUP BY sym HAVING count(*) > 1", ErrUnsupported, "HAVING"},
		{"SELECT price * size FROM trade", ErrUnsupported, "expressions in the select list"},
		{"SELECT upper(sym) FROM trade", ErrUnsupported, "function upper()"},
		{"SELECT count(DISTINCT sym) FROM trade", ErrUnsupported, "DISTINCT"},
		{"SELECT * FROM trade LIMIT 10 OFFSET 5", ErrUnsupported, "OFFSET"},
		{"SELECT * FROM trade WHERE price > size", ErrUnsupported, "comparing two columns"},
		{"SELECT * FROM trade WHERE sym IS NULL", ErrUnsupported, "IS NULL"},
		{"SELECT * FROM trade WHERE region <> 'eu'", ErrUnsupported, "label region"},
		{"SELECT * FROM trade WHERE region = 'eu' OR size > 1", ErrUnsupported, "label region"},
		{"SELECT * FROM trade WHERE time <> '2026-11-22'", ErrUnsupported, "time column"},
		{"SELECT * FROM trade WHERE sym LIKE 'A*'", ErrUnsupported, "literal *"},
		{"SELECT * FROM trade t", ErrInvalid, ""}, // an alias is harmless; see below
		{"SELECT trade.sym FROM trade", ErrUnsupported, "qualified column"},
		{"SELECT sym AS s FROM trade", ErrUnsupported, "renaming"},
		{"SELECT sym, price FROM trade GROUP BY sym", ErrInvalid, "neither grouped nor aggregated"},
		{"SELECT * FROM trade WHERE time >= 'yesterday'", ErrInvalid, "not a timestamp"},
		{"SELECT * FROM trade WHERE time >= 5", ErrInvalid, "timestamp string"},
		{"SELECT * FROM trade WHERE time >= '2026-11-23' AND time < '2026-11-22'", ErrInvalid, "empty time range"},
		{"SELECT * FROM trade WHERE time >= '2300-01-01'", ErrInvalid, "empty time range"},
		{"SELECT * FROM trade WHERE region = 'eu' AND region = 'us'", ErrInvalid, "select no value"},
		{"SELECT * FROM trade LIMIT 0", ErrInvalid, "LIMIT 0"},
		{"SELEC * FROM trade", ErrInvalid, "syntax"},
		{"SELECT 1", ErrInvalid, "FROM is required"},
		{"", ErrInvalid, "no statement"},
		{"SELECT * FROM trade WHERE " + strings.Repeat("(", 40) + "size > 1" + strings.Repeat(")", 40), ErrUnsupported, "nested"},
		{"SELECT * FROM trade WHERE sym = '" + strings.Repeat("x", MaxStatementBytes) + "'", ErrInvalid, "above the limit"},
	} {
		t.Run(c.sql[:min(len(c.sql), 60)], func(t *testing.T) {
			_, err := Parse(c.sql, schema)
			if c.sql == "SELECT * FROM trade t" {
				if err != nil {
					t.Fatalf("a table alias should be accepted: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatal("accepted")
			}
			if !errors.Is(err, c.kind) || !strings.Contains(err.Error(), c.text) {
				t.Errorf("error %q, want %v containing %q", err, c.kind, c.text)
			}
		})
	}
}

// Hostile input: nothing panics, and nesting is refused before the
// recursive parser sees it.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"SELECT * FROM trade", "SELECT sym, count(*) AS n FROM trade WHERE region IN ('eu') GROUP BY sym ORDER BY n DESC LIMIT 5",
		"SELECT * FROM t WHERE NOT (a = 1 OR b LIKE 'x%')", "SELECT * FROM t WHERE a BETWEEN 1 AND 2"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, sql string) {
		p, err := Parse(sql, schema)
		if err == nil && p.Args.Validate() != nil {
			t.Fatalf("planned invalid arguments for %q: %v", sql, p.Args.Validate())
		}
	})
}
