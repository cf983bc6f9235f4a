package test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/sg-project/sg/messages"
	"github.com/sg-project/sg/subjects"
)

func (sys *system) sql(query string) (messages.Response, messages.Table) {
	sys.t.Helper()
	ctx, cancel := context.WithTimeout(sys.ctx, 60*time.Second)
	defer cancel()
	resp, err := sys.client.Do(ctx, subjects.APISQL, messages.SQLArgs{Query: query}, messages.Opts{})
	if err != nil {
		sys.t.Fatalf("sql: %v", err)
	}
	var tbl messages.Table
	if resp.Header.Status.IsOK() {
		if err := msgpack.Unmarshal(resp.Payload, &tbl); err != nil {
			sys.t.Fatalf("decode sql answer: %v", err)
		}
	}
	return resp, tbl
}

// TestSQLEqualsGetData: every statement's answer, run as sql on a running
// system (GW -> RC plans -> DAPs -> Agg), equals the answer of the getData
// it means. Statements whose WHERE getData cannot express (OR across
// columns, NOT) are checked against counts that getData can compute.
func TestSQLEqualsGetData(t *testing.T) {
	sys := startSystem(t, systemOptions{})
	sys.startDemo(demoFleetConfig(sys, 3000))
	ts := func(s string) time.Time {
		t.Helper()
		v, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	const day = "2026-11-19T00:00:00Z"
	const noon = "2026-11-19T12:00:00Z"
	eu := messages.LabelSelector{"region": {"eu"}}
	euus := messages.LabelSelector{"region": {"eu", "us"}}
	f := func(op, col string, v any) messages.Filter {
		return messages.Filter{Op: messages.FilterOp(op), Column: col, Value: v}
	}
	cnt := messages.AggSpec{Name: "n", Func: messages.AggCount}
	cases := []struct {
		sql  string
		args messages.GetDataArgs
	}{
		// The example.
		{"SELECT sym, count(*) AS n, avg(price) AS px FROM trade WHERE region IN ('eu','us') AND time >= '" + day + "' GROUP BY sym ORDER BY n DESC LIMIT 5",
			messages.GetDataArgs{Table: "trade", Labels: euus, StartTS: ts(day), GroupBy: []string{"sym"},
				Agg: []messages.AggSpec{cnt, {Name: "px", Func: messages.AggAvg, Column: "price"}}, SortCols: []string{"-n"}, Limit: 5}},
		{"SELECT * FROM trade WHERE region = 'eu' AND time >= '" + noon + "' LIMIT 50",
			messages.GetDataArgs{Table: "trade", Labels: eu, StartTS: ts(noon), Limit: 50}},
		{"SELECT sym, price FROM trade WHERE region = 'eu' AND time < '" + day + "'",
			messages.GetDataArgs{Table: "trade", Labels: eu, EndTS: ts(day), Columns: []string{"sym", "price"}}},
		{"SELECT count(*) AS n FROM trade", messages.GetDataArgs{Table: "trade", Agg: []messages.AggSpec{cnt}}},
		{"SELECT count(*) AS n FROM quote", messages.GetDataArgs{Table: "quote", Agg: []messages.AggSpec{cnt}}},
		{"SELECT count(*) AS n FROM instrument", messages.GetDataArgs{Table: "instrument", Agg: []messages.AggSpec{cnt}}},
		{"SELECT * FROM instrument WHERE region = 'us'", messages.GetDataArgs{Table: "instrument", Labels: messages.LabelSelector{"region": {"us"}}}},
		{"SELECT sym, currency FROM instrument WHERE currency = 'GBP'",
			messages.GetDataArgs{Table: "instrument", Columns: []string{"sym", "currency"}, Filter: []messages.Filter{f("=", "currency", "GBP")}}},
		{"SELECT region, count(*) AS n FROM trade GROUP BY region",
			messages.GetDataArgs{Table: "trade", GroupBy: []string{"region"}, Agg: []messages.AggSpec{cnt}}},
		{"SELECT sym, sum(size) AS vol FROM trade WHERE region = 'us' GROUP BY sym ORDER BY vol DESC",
			messages.GetDataArgs{Table: "trade", Labels: messages.LabelSelector{"region": {"us"}}, GroupBy: []string{"sym"},
				Agg: []messages.AggSpec{{Name: "vol", Func: messages.AggSum, Column: "size"}}, SortCols: []string{"-vol"}}},
		{"SELECT sym, min(price) AS lo, max(price) AS hi FROM trade WHERE region IN ('asia') GROUP BY sym ORDER BY sym",
			messages.GetDataArgs{Table: "trade", Labels: messages.LabelSelector{"region": {"asia"}}, GroupBy: []string{"sym"},
				Agg: []messages.AggSpec{{Name: "lo", Func: messages.AggMin, Column: "price"}, {Name: "hi", Func: messages.AggMax, Column: "price"}}, SortCols: []string{"sym"}}},
		{"SELECT sym, first(price) AS open, last(price) AS close FROM trade WHERE region = 'eu' GROUP BY sym",
			messages.GetDataArgs{Table: "trade", Labels: eu, GroupBy: []string{"sym"},
				Agg: []messages.AggSpec{{Name: "open", Func: messages.AggFirst, Column: "price"}, {Name: "close", Func: messages.AggLast, Column: "price"}}}},
		{"SELECT venue, avg(size) AS s FROM trade WHERE region = 'eu' GROUP BY venue ORDER BY venue",
			messages.GetDataArgs{Table: "trade", Labels: eu, GroupBy: []string{"venue"},
				Agg: []messages.AggSpec{{Name: "s", Func: messages.AggAvg, Column: "size"}}, SortCols: []string{"venue"}}},
		{"SELECT side, venue, count(*) AS n FROM trade WHERE region = 'us' GROUP BY side, venue",
			messages.GetDataArgs{Table: "trade", Labels: messages.LabelSelector{"region": {"us"}}, GroupBy: []string{"side", "venue"}, Agg: []messages.AggSpec{cnt}}},
		{"SELECT DISTINCT sym FROM trade WHERE region = 'eu'", messages.GetDataArgs{Table: "trade", Labels: eu, GroupBy: []string{"sym"}}},
		{"SELECT sym FROM trade WHERE region = 'us' GROUP BY sym", messages.GetDataArgs{Table: "trade", Labels: messages.LabelSelector{"region": {"us"}}, GroupBy: []string{"sym"}}},
		{"SELECT * FROM trade WHERE sym = 'VOD.L' AND time >= '" + noon + "'",
			messages.GetDataArgs{Table: "trade", StartTS: ts(noon), Filter: []messages.Filter{f("=", "sym", "VOD.L")}}},
		{"SELECT count(*) AS n FROM trade WHERE sym <> 'VOD.L'", messages.GetDataArgs{Table: "trade", Agg: []messages.AggSpec{cnt}, Filter: []messages.Filter{f("<>", "sym", "VOD.L")}}},
		{"SELECT count(*) AS n FROM trade WHERE sym != 'AAPL'", messages.GetDataArgs{Table: "trade", Agg: []messages.AggSpec{cnt}, Filter: []messages.Filter{f("<>", "sym", "AAPL")}}},
		{"SELECT count(*) AS n FROM trade WHERE sym IN ('VOD.L', 'AAPL', '7203.T')",
			messages.GetDataArgs{Table: "trade", Agg: []messages.AggSpec{cnt}, Filter: []messages.Filter{f("in", "sym", []any{"VOD.L", "AAPL", "7203.T"})}}},
		{"SELECT count(*) AS n FROM trade WHERE size > 500", messages.GetDataArgs{Table: "trade", Agg: []messages.AggSpec{cnt}, Filter: []messages.Filter{f(">", "size", int64(500))}}},
		{"SELECT count(*) AS n FROM trade WHERE size >= 500", messages.GetDataArgs{Table: "trade", Agg: []messages.AggSpec{cnt}, Filter: []messages.Filter{f(">=", "size", int64(500))}}},
		{"SELECT count(*) AS n FROM trade WHERE size < 100", messages.GetDataArgs{Table: "trade", Agg: []messages.AggSpec{cnt}, Filter: []messages.Filter{f("<", "size", int64(100))}}},
		{"SELECT count(*) AS n FROM trade WHERE 100 >= size", messages.GetDataArgs{Table: "trade", Agg: []messages.AggSpec{cnt}, Filter: []messages.Filter{f("<=", "size", int64(100))}}},
		{"SELECT count(*) AS n FROM trade WHERE price BETWEEN 100 AND 200",
			messages.GetDataArgs{Table: "trade", Agg: []messages.AggSpec{cnt}, Filter: []messages.Filter{f("within", "price", []any{int64(100), int64(200)})}}},
		{"SELECT count(*) AS n FROM trade WHERE price > 150.5", messages.GetDataArgs{Table: "trade", Agg: []messages.AggSpec{cnt}, Filter: []messages.Filter{f(">", "price", 150.5)}}},
		{"SELECT count(*) AS n FROM trade WHERE sym LIKE 'V%'", messages.GetDataArgs{Table: "trade", Agg: []messages.AggSpec{cnt}, Filter: []messages.Filter{f("like", "sym", "V*")}}},
		{"SELECT count(*) AS n FROM trade WHERE sym LIKE '%.L'", messages.GetDataArgs{Table: "trade", Agg: []messages.AggSpec{cnt}, Filter: []messages.Filter{f("like", "sym", "*.L")}}},
		{"SELECT count(*) AS n FROM trade WHERE sym LIKE 'BP_L'", messages.GetDataArgs{Table: "trade", Agg: []messages.AggSpec{cnt}, Filter: []messages.Filter{f("like", "sym", "BP?L")}}},
		{"SELECT count(*) AS n FROM trade WHERE block = TRUE", messages.GetDataArgs{Table: "trade", Agg: []messages.AggSpec{cnt}, Filter: []messages.Filter{f("=", "block", true)}}},
		{"SELECT count(*) AS n FROM trade WHERE time BETWEEN '" + day + "' AND '" + noon + "'",
			messages.GetDataArgs{Table: "trade", Agg: []messages.AggSpec{cnt}, StartTS: ts(day), EndTS: ts(noon).Add(time.Nanosecond)}},
		{"SELECT count(*) AS n FROM trade WHERE time > '" + day + "' AND time <= '" + noon + "'",
			messages.GetDataArgs{Table: "trade", Agg: []messages.AggSpec{cnt}, StartTS: ts(day).Add(time.Nanosecond), EndTS: ts(noon).Add(time.Nanosecond)}},
		{"SELECT count(*) AS n FROM trade WHERE region = 'eu' OR region = 'us'", messages.GetDataArgs{Table: "trade", Labels: euus, Agg: []messages.AggSpec{cnt}}},
		{"SELECT * FROM trade WHERE region = 'asia' ORDER BY price DESC LIMIT 10",
			messages.GetDataArgs{Table: "trade", Labels: messages.LabelSelector{"region": {"asia"}}, SortCols: []string{"-price"}, Limit: 10}},
		{"SELECT sym, price, size FROM trade WHERE region = 'us' ORDER BY size DESC, price ASC LIMIT 20",
			messages.GetDataArgs{Table: "trade", Labels: messages.LabelSelector{"region": {"us"}}, Columns: []string{"sym", "price", "size"}, SortCols: []string{"-size", "price"}, Limit: 20}},
		{"SELECT count(price) AS np FROM trade WHERE region = 'eu'",
			messages.GetDataArgs{Table: "trade", Labels: eu, Agg: []messages.AggSpec{{Name: "np", Func: messages.AggCount, Column: "price"}}}},
		{"SELECT sum(size) FROM trade WHERE region = 'eu'",
			messages.GetDataArgs{Table: "trade", Labels: eu, Agg: []messages.AggSpec{{Name: "sum_size", Func: messages.AggSum, Column: "size"}}}},
		{"SELECT sym, avg(bid) AS b, avg(ask) AS a FROM quote WHERE region = 'eu' AND time >= '" + noon + "' GROUP BY sym",
			messages.GetDataArgs{Table: "quote", Labels: eu, StartTS: ts(noon), GroupBy: []string{"sym"},
				Agg: []messages.AggSpec{{Name: "b", Func: messages.AggAvg, Column: "bid"}, {Name: "a", Func: messages.AggAvg, Column: "ask"}}}},
		{"SELECT * FROM quote WHERE region = 'us' AND bidSize > 5 LIMIT 30",
			messages.GetDataArgs{Table: "quote", Labels: messages.LabelSelector{"region": {"us"}}, Filter: []messages.Filter{f(">", "bidSize", int64(5))}, Limit: 30}},
		{"SELECT sym, count(*) AS n FROM trade WHERE region = 'eu' AND size > 10 AND sym IN ('VOD.L','BP.L') GROUP BY sym",
			messages.GetDataArgs{Table: "trade", Labels: eu, GroupBy: []string{"sym"}, Agg: []messages.AggSpec{cnt},
				Filter: []messages.Filter{f(">", "size", int64(10)), f("in", "sym", []any{"VOD.L", "BP.L"})}}},
		{"select `sym`, count(*) as n from `trade` where `region` = 'us' group by `sym` order by n desc, sym limit 3",
			messages.GetDataArgs{Table: "trade", Labels: messages.LabelSelector{"region": {"us"}}, GroupBy: []string{"sym"},
				Agg: []messages.AggSpec{cnt}, SortCols: []string{"-n", "sym"}, Limit: 3}},
	}
	if len(cases) < 40 {
		t.Fatalf("%d statements, want at least 40", len(cases))
	}
	for i, c := range cases {
		t.Run(fmt.Sprintf("%02d", i), func(t *testing.T) {
			resp, got := sys.sql(c.sql)
			if !resp.Header.Status.IsOK() {
				t.Fatalf("%s\nsql: %v", c.sql, resp.Header.Status)
			}
			if resp.Header.API != subjects.APISQL {
				t.Errorf("answer names api %q", resp.Header.API)
			}
			gresp, want := sys.getData(c.args, messages.Opts{})
			if !gresp.Header.Status.IsOK() {
				t.Fatalf("getData: %v", gresp.Header.Status)
			}
			if want.NumRows() == 0 {
				t.Fatalf("%s: the equivalent getData has no rows: the statement tests nothing", c.sql)
			}
			sameTable(t, got, want)
		})
	}

	// WHERE that getData cannot express: checked by counting.
	count := func(t *testing.T, tbl messages.Table) int64 {
		t.Helper()
		c := tbl.Col("n")
		if c != nil && len(c.Ints) == 0 {
			return 0 // no row matched: an aggregate over nothing has no row
		}
		if c == nil || len(c.Ints) != 1 {
			t.Fatalf("no single count in %+v", tbl)
		}
		return c.Ints[0]
	}
	gcount := func(t *testing.T, fs ...messages.Filter) int64 {
		t.Helper()
		resp, tbl := sys.getData(messages.GetDataArgs{Table: "trade", Agg: []messages.AggSpec{cnt}, Filter: fs}, messages.Opts{})
		if !resp.Header.Status.IsOK() {
			t.Fatalf("getData: %v", resp.Header.Status)
		}
		return count(t, tbl)
	}
	t.Run("or across columns", func(t *testing.T) {
		resp, got := sys.sql("SELECT count(*) AS n FROM trade WHERE sym = 'VOD.L' OR size > 500")
		if !resp.Header.Status.IsOK() {
			t.Fatal(resp.Header.Status)
		}
		a, b := f("=", "sym", "VOD.L"), f(">", "size", int64(500))
		want := gcount(t, a) + gcount(t, b) - gcount(t, a, b)
		if n := count(t, got); n != want || n == 0 {
			t.Fatalf("OR: %d rows, getData says %d", n, want)
		}
	})
	t.Run("not", func(t *testing.T) {
		resp, got := sys.sql("SELECT count(*) AS n FROM trade WHERE NOT (sym = 'VOD.L' OR sym = 'AAPL')")
		if !resp.Header.Status.IsOK() {
			t.Fatal(resp.Header.Status)
		}
		want := gcount(t) - gcount(t, f("in", "sym", []any{"VOD.L", "AAPL"}))
		if n := count(t, got); n != want || n == 0 {
			t.Fatalf("NOT: %d rows, getData says %d", n, want)
		}
	})
	t.Run("json", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(sys.ctx, 30*time.Second)
		defer cancel()
		raw, err := sys.client.DoJSON(ctx, subjects.APISQL, []byte(`{"query":"SELECT count(*) AS n FROM trade WHERE region = 'eu'"}`), messages.Opts{})
		if err != nil {
			t.Fatal(err)
		}
		var env struct {
			Header  messages.ResponseHeader `json:"header"`
			Payload []map[string]any        `json:"payload"`
		}
		if err := json.Unmarshal(raw, &env); err != nil || !env.Header.Status.IsOK() || len(env.Payload) != 1 {
			t.Fatalf("JSON sql: %s (%v)", raw, err)
		}
	})
	t.Run("refusals", func(t *testing.T) {
		for sql, want := range map[string]messages.Code{
			"SELECT * FROM trade JOIN quote ON trade.sym = quote.sym":  messages.CodeNotSupported,
			"SELECT * FROM trade WHERE sym IN (SELECT sym FROM quote)": messages.CodeNotSupported,
			"DELETE FROM trade":   messages.CodeNotSupported,
			"SELEKT * FROM trade": messages.CodeBadRequest,
			"SELECT * FROM nope":  messages.CodeNoResources,
		} {
			resp, _ := sys.sql(sql)
			if st := resp.Header.Status; st.RC != want || st.AI == "" {
				t.Errorf("%s: %v, want %v", sql, st, want)
			} else if want == messages.CodeNotSupported && !strings.Contains(strings.ToLower(st.AI), "not supported") {
				t.Errorf("%s: %q does not say what is not supported", sql, st.AI)
			}
		}
	})
}
