package parquetdb

import (
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/sg-project/sg/messages"
	"github.com/sg-project/sg/services/agg/merge"
	"github.com/sg-project/sg/services/dap/demo"
)

// TestWhereSameAsEngine: the sql API's residual condition (messages.Where:
// OR across columns, NOT; what getData's filters cannot express) selects
// the same rows from Parquet as the in-memory engine, with the condition's
// columns read even when the answer does not name them, across partitions
// and a portion range that cuts row groups. Each condition keeps some rows
// and drops others, so an ignored Where could not pass.
func TestWhereSameAsEngine(t *testing.T) {
	dir := t.TempDir()
	all := writeDays(t, dir, demo.Config{Seed: 7, TradesPerDay: 20_000}, 2, 1000)
	cat, err := Open(dir, demo.Defs(), 0)
	if err != nil {
		t.Fatal(err)
	}
	leaf := func(op, col string, v any) messages.Cond {
		return messages.Cond{Op: messages.CondFilter, Filter: &messages.Filter{Op: messages.FilterOp(op), Column: col, Value: v}}
	}
	or := func(a ...messages.Cond) messages.Cond { return messages.Cond{Op: messages.CondOr, Args: a} }
	and := func(a ...messages.Cond) messages.Cond { return messages.Cond{Op: messages.CondAnd, Args: a} }
	not := func(a messages.Cond) messages.Cond {
		return messages.Cond{Op: messages.CondNot, Args: []messages.Cond{a}}
	}
	ps, pe := day0.Add(7*time.Hour+13*time.Second), day0.Add(40*time.Hour+5*time.Millisecond)
	count := []messages.AggSpec{{Name: "n", Func: messages.AggCount}}

	// The rows of the portion range, to show each condition filters.
	total := countOf(t, cat, messages.GetDataArgs{Table: demo.Trade, Agg: count}, ps, pe)
	for _, c := range []struct {
		name string
		root messages.Cond
		q    messages.GetDataArgs
	}{
		{"or across columns, rows", or(leaf("=", "sym", "VOD.L"), leaf(">", "size", int64(900))),
			messages.GetDataArgs{Columns: []string{"time", "sym", "price"}}},
		{"not, grouped", not(leaf("in", "sym", []any{"VOD.L", "BP.L"})),
			messages.GetDataArgs{GroupBy: []string{"sym"}, Agg: []messages.AggSpec{{Name: "n", Func: messages.AggCount},
				{Name: "v", Func: messages.AggSum, Column: "size"}}}},
		{"and of or and not, with a filter and a sort", and(or(leaf("=", "block", true), leaf(">", "price", 100.0)), not(leaf("=", "side", "S"))),
			messages.GetDataArgs{Columns: []string{"sym", "size"}, Filter: []messages.Filter{{Op: ">=", Column: "size", Value: int64(10)}},
				SortCols: []string{"-size", "sym"}, Limit: 50}},
		{"not of or, counted", not(or(leaf("=", "sym", "SAP.DE"), leaf("like", "venue", "XL*"))),
			messages.GetDataArgs{Agg: count}},
	} {
		t.Run(c.name, func(t *testing.T) {
			q := c.q
			q.Table = demo.Trade
			q.Where = &messages.Where{V: messages.WhereVersion, Root: c.root}
			// As a DAP gets it: through the wire form, validated.
			b, err := msgpack.Marshal(&q)
			if err != nil {
				t.Fatal(err)
			}
			if q, err = messages.DecodeGetDataArgsMsgpack(b); err != nil {
				t.Fatal(err)
			}
			got, err := cat.Execute(q, ps, pe)
			if err != nil {
				t.Fatal(err)
			}
			want, err := all.Execute(q, ps, pe)
			if err != nil {
				t.Fatal(err)
			}
			same(t, q, got, want)
			kept := countOf(t, cat, messages.GetDataArgs{Table: demo.Trade, Agg: count, Filter: q.Filter, Where: q.Where}, ps, pe)
			if kept == 0 || kept >= total {
				t.Fatalf("the condition keeps %d of %d rows: it must keep some and drop some", kept, total)
			}
		})
	}
}

// countOf counts the rows q selects in [ps, pe) from cat.
func countOf(t *testing.T, cat *Catalog, q messages.GetDataArgs, ps, pe time.Time) int64 {
	t.Helper()
	p, err := cat.Execute(q, ps, pe)
	if err != nil {
		t.Fatal(err)
	}
	tbl, err := merge.Merge(q, []merge.Partial{p})
	if err != nil {
		t.Fatal(err)
	}
	n := tbl.Col("n")
	if n != nil && len(n.Ints) == 0 {
		return 0 // no row: no group
	}
	if n == nil || len(n.Ints) != 1 {
		t.Fatalf("count answer %+v", tbl)
	}
	return n.Ints[0]
}
