package engine_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sg-project/sg/messages"
	"github.com/sg-project/sg/services/dap/engine"
)

// countdownCtx is cancelled once Err has been asked `left` times: a deterministic
// stand-in for a cancel that arrives in the middle of a scan.
type countdownCtx struct {
	context.Context
	left  atomic.Int64
	calls atomic.Int64
}

func countdown(n int64) *countdownCtx {
	c := &countdownCtx{Context: context.Background()}
	c.left.Store(n)
	return c
}

func (c *countdownCtx) Err() error {
	c.calls.Add(1)
	if c.left.Add(-1) < 0 {
		return context.Canceled
	}
	return nil
}

func bigStore(t *testing.T, rows int) *engine.Store {
	t.Helper()
	def := engine.TableDef{Name: "tick", Columns: []messages.ColumnSpec{
		{Name: "time", Type: messages.TypeTimestamp}, {Name: "size", Type: messages.TypeInt}}}
	s := engine.NewStore()
	if err := s.Create(def); err != nil {
		t.Fatal(err)
	}
	tb := messages.NewTable(def.Columns)
	for i := range rows {
		tb.Columns[0].Ints = append(tb.Columns[0].Ints, t0.Add(time.Duration(i)).UnixNano())
		tb.Columns[1].Ints = append(tb.Columns[1].Ints, int64(i))
	}
	if err := s.Append("tick", tb); err != nil {
		t.Fatal(err)
	}
	return s
}

// The scan looks at its context once per batch of rows, and stops within a batch once
// the context ends, for row queries and aggregations alike.
func TestExecuteStopsBetweenBatches(t *testing.T) {
	const rows = 40 * engine.BatchRows
	s := bigStore(t, rows)
	for _, a := range []messages.GetDataArgs{
		{Table: "tick", Filter: []messages.Filter{{Op: messages.FilterGe, Column: "size", Value: int64(0)}}},
		{Table: "tick", Agg: []messages.AggSpec{{Name: "n", Func: "count"}}},
	} {
		whole := countdown(1 << 40)
		if _, err := s.ExecuteContext(whole, a, time.Time{}, time.Time{}); err != nil {
			t.Fatal(err)
		}
		if n := whole.calls.Load(); n < rows/engine.BatchRows || n > rows/engine.BatchRows+8 {
			t.Fatalf("%d looks at the context for %d rows: want one per batch of %d", n, rows, engine.BatchRows)
		}
		cut := countdown(5)
		if _, err := s.ExecuteContext(cut, a, time.Time{}, time.Time{}); !errors.Is(err, context.Canceled) {
			t.Fatalf("err %v, want context.Canceled", err)
		}
		if n := cut.calls.Load(); n != 6 {
			t.Fatalf("went on after the cancel: %d looks", n)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := s.ExecuteContext(ctx, messages.GetDataArgs{Table: "tick"}, time.Time{}, time.Time{}); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled before the start: %v", err)
	}
}
