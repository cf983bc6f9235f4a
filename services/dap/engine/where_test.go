package engine_test

import (
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/sg-project/sg/messages"
	"github.com/sg-project/sg/services/agg/merge"
)

// TestWhereTree: a Where (OR across columns, NOT) selects the rows worked
// out by hand, after a round trip through its wire form.
func TestWhereTree(t *testing.T) {
	s := handStore(t)
	leaf := func(op, col string, v any) messages.Cond {
		return messages.Cond{Op: messages.CondFilter, Filter: &messages.Filter{Op: messages.FilterOp(op), Column: col, Value: v}}
	}
	for _, c := range []struct {
		name string
		root messages.Cond
		want int64
	}{
		// sym = AAPL (2 rows) or size >= 10 (2 rows: 10, 20): 4
		{"or", messages.Cond{Op: messages.CondOr, Args: []messages.Cond{leaf("=", "sym", "AAPL"), leaf(">=", "size", int64(10))}}, 4},
		// not (sym = VOD): AAPL x2, BP: 3
		{"not", messages.Cond{Op: messages.CondNot, Args: []messages.Cond{leaf("=", "sym", "VOD")}}, 3},
		// (block or price > 100) and not region = us: the VOD block row only
		{"and", messages.Cond{Op: messages.CondAnd, Args: []messages.Cond{
			{Op: messages.CondOr, Args: []messages.Cond{leaf("=", "block", true), leaf(">", "price", 100.0)}},
			{Op: messages.CondNot, Args: []messages.Cond{leaf("=", "region", "us")}}}}, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			args := messages.GetDataArgs{Table: "trade", Agg: []messages.AggSpec{{Name: "n", Func: messages.AggCount}},
				Where: &messages.Where{V: messages.WhereVersion, Root: c.root}}
			b, err := msgpack.Marshal(&args)
			if err != nil {
				t.Fatal(err)
			}
			args, err = messages.DecodeGetDataArgsMsgpack(b)
			if err != nil {
				t.Fatal(err)
			}
			p, err := s.Execute(args, time.Time{}, time.Time{})
			if err != nil {
				t.Fatal(err)
			}
			tbl, err := merge.Merge(args, []merge.Partial{p})
			if err != nil {
				t.Fatal(err)
			}
			if n := tbl.Col("n"); n == nil || len(n.Ints) != 1 || n.Ints[0] != c.want {
				t.Fatalf("count %+v, want %d", n, c.want)
			}
		})
	}
	// A hostile tree is refused by validation before it is evaluated.
	deep := leaf("=", "sym", "VOD")
	for range messages.MaxWhereDepth + 1 {
		deep = messages.Cond{Op: messages.CondNot, Args: []messages.Cond{deep}}
	}
	args := messages.GetDataArgs{Table: "trade", Where: &messages.Where{V: messages.WhereVersion, Root: deep}}
	if _, err := s.Execute(args, time.Time{}, time.Time{}); err == nil {
		t.Fatal("a Where nested deeper than MaxWhereDepth was evaluated")
	}
	args.Where = &messages.Where{V: 9, Root: leaf("=", "sym", "VOD")}
	if _, err := s.Execute(args, time.Time{}, time.Time{}); err == nil {
		t.Fatal("a Where of an unknown version was evaluated")
	}
}
