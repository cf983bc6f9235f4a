package agg

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/sg-project/sg/messages"
)

// The Agg beats at start and every Heartbeat, with its load, and says it stops.
func TestHeartbeats(t *testing.T) {
	nc := startNATS(t)
	beats := subscribe(t, nc, subj.AggHeartbeat("agg1"))
	a, err := New(Config{ID: "agg1", NC: nc, Subjects: subj, Log: zerolog.Nop(), Heartbeat: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := a.Run(ctx); err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	defer wg.Wait()
	defer cancel()
	next := func() messages.AggHeartbeat {
		t.Helper()
		m, err := beats.NextMsg(wait)
		if err != nil {
			t.Fatal(err)
		}
		hb, err := messages.DecodeValid[messages.AggHeartbeat](m.Data)
		if err != nil {
			t.Fatal(err)
		}
		return hb
	}
	first := next()
	if first.AggID != "agg1" || first.Seq != 1 || first.IntervalMS != 20 || first.StartedAt == 0 || first.Stopping {
		t.Fatalf("%+v", first)
	}
	if second := next(); second.Seq != 2 || second.StartedAt != first.StartedAt {
		t.Fatalf("%+v", second)
	}
	cancel()
	wg.Wait()
	for {
		hb := next()
		if hb.Stopping {
			break
		}
	}
}
