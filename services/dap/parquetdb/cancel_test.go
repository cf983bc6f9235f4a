package parquetdb

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sg-project/sg/messages"
	"github.com/sg-project/sg/services/dap/demo"
)

// A cancelled query stops reading: before the first file when cancelled at the start,
// and within a page once cancelled in the middle of a file.
func TestExecuteContextStopsReading(t *testing.T) {
	dir := t.TempDir()
	writeDays(t, dir, demo.Config{Seed: 3, TradesPerDay: 20_000}, 2, 1024)
	cat, err := Open(dir, demo.Defs(), 0)
	if err != nil {
		t.Fatal(err)
	}
	q := messages.GetDataArgs{Table: demo.Trade}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := cat.ExecuteContext(ctx, q, time.Time{}, time.Time{}); !errors.Is(err, context.Canceled) {
		t.Fatalf("err %v, want context.Canceled", err)
	}
	if n := cat.Stats().Files.Load(); n != 0 {
		t.Fatalf("%d files opened after the cancel", n)
	}
	// Cancelled while the first row group is read: nothing more is read.
	ctx, cancel = context.WithCancel(context.Background())
	defer cancel()
	cut := &cancelAfter{Context: ctx, left: 4, cancel: cancel}
	if _, err := cat.ExecuteContext(cut, q, time.Time{}, time.Time{}); !errors.Is(err, context.Canceled) {
		t.Fatalf("err %v, want context.Canceled", err)
	}
	if n := cat.Stats().RowGroups.Load(); n != 1 {
		t.Fatalf("%d row groups read, want the one being read at the cancel", n)
	}
}

// cancelAfter cancels itself once Err has been asked left times.
type cancelAfter struct {
	context.Context
	left   int
	cancel context.CancelFunc
}

func (c *cancelAfter) Err() error {
	if c.left--; c.left < 0 {
		c.cancel()
	}
	return c.Context.Err()
}
