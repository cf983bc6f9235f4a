package live

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"github.com/sg-project/sg/messages"
	"github.com/sg-project/sg/services/dap/engine"
	"github.com/sg-project/sg/services/poison"
	"github.com/sg-project/sg/subjects"
	"github.com/sg-project/sg/test/natstest"
	"github.com/sg-project/sg/test/promtest"
)

var tickDef = engine.TableDef{Name: "tick", Labels: []string{"region"}, Columns: []messages.ColumnSpec{
	{Name: "time", Type: messages.TypeTimestamp}, {Name: "region", Type: messages.TypeSymbol}, {Name: "v", Type: messages.TypeFloat}}}

// Nothing on the stream can stop a group: garbage, unknown tables, rows of another label
// set, late rows and wrong types are counted, logged and acked, and the rows after them
// are held.
func TestGroupRejectsBadUpdates(t *testing.T) {
	nc := natstest.Connect(t, natstest.Start(t))
	s := subjects.Default()
	reg := prometheus.NewRegistry()
	start := time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC)
	g, err := NewGroup(GroupConfig{NC: nc, Subjects: s, Log: zerolog.Nop(), Labels: messages.LabelSet{"region": "eu"},
		Dir: t.TempDir(), Tables: []engine.TableDef{tickDef}, Start: start, Heartbeat: time.Hour, Registry: reg})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	done := make(chan error, 1)
	runCtx, stop := context.WithCancel(ctx)
	go func() { done <- g.Run(runCtx) }()
	defer func() {
		stop()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	select {
	case <-g.Ready():
	case <-ctx.Done():
		t.Fatal("not ready")
	}
	js, _ := jetstream.New(nc)
	subj := s.Live("tick", "region=eu")
	rows := func(region string, at time.Time, v any) []byte {
		tb := messages.NewTable(tickDef.Columns)
		if v != nil {
			_ = tb.AppendRow(at, region, v)
		}
		b, _ := messages.Encode(&messages.LiveUpdate{V: messages.LiveVersion, Table: "tick", Rows: tb})
		return b
	}
	unknown, _ := messages.Encode(&messages.LiveUpdate{V: messages.LiveVersion, Table: "nope", Rows: messages.NewTable(tickDef.Columns)})
	for _, data := range [][]byte{
		{0xc1, 0x00}, // not msgpack
		{0x81, 0xa4, 'r', 'o', 'w', 's', 0xdd, 0xff, 0xff, 0xff, 0xff}, // rows claiming 4,294,967,295 entries
		unknown,                                  // unknown table
		rows("us", start.Add(time.Second), 1.0),  // another label set's row
		rows("eu", start.Add(-time.Second), 1.0), // late: before the rdb's start
		rows("eu", start.Add(time.Second), 2.0),  // good
	} {
		if _, err := js.Publish(ctx, subj, data); err != nil {
			t.Fatal(err)
		}
	}
	if err := g.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	st := g.Stats()
	if st.Malformed.Load() != 4 || st.LateRows.Load() != 1 || st.Rows.Load() != 1 || st.Messages.Load() != 2 {
		t.Fatalf("malformed %d, late %d, rows %d, messages %d", st.Malformed.Load(), st.LateRows.Load(), st.Rows.Load(), st.Messages.Load())
	}
	if v := promtest.Sum(t, reg, poison.MetricName, nil); v != 4 {
		t.Fatalf("%s %v, want 4", poison.MetricName, v)
	}
	if v := promtest.Sum(t, reg, "sg_live_late_rows_total", nil); v != 1 {
		t.Fatalf("sg_live_late_rows_total %v", v)
	}
	if s := g.DAP(messages.TierRDB).State(); !s.Available || s.Purview.Start != start.UnixNano() {
		t.Fatalf("rdb %+v", s)
	}
	if s := g.DAP(messages.TierIDB).State(); s.Available || s.Reason != emptyIDBReason {
		t.Fatalf("idb %+v", s)
	}
	// An end of interval before anything is held moves nothing and bumps nothing.
	pv := g.DAP(messages.TierRDB).State().PurviewVersion
	if err := g.EndOfInterval(ctx, start); err != nil {
		t.Fatal(err)
	}
	if g.DAP(messages.TierRDB).State().PurviewVersion != pv {
		t.Fatal("an empty end of interval bumped the purview version")
	}
	if err := g.EndOfInterval(ctx, start.Add(2*time.Second)); err != nil {
		t.Fatal(err)
	}
	if s := g.DAP(messages.TierIDB).State(); !s.Available || s.Purview != (messages.TimeRange{Start: start.UnixNano(), End: start.Add(2 * time.Second).UnixNano()}) {
		t.Fatalf("idb after end of interval %+v", s)
	}
}

// A group that replays a stream holding poison records comes up, skips them
// and counts them again.
func TestGroupReplaysPastPoison(t *testing.T) {
	nc := natstest.Connect(t, natstest.Start(t))
	s := subjects.Default()
	start := time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC)
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	run := func(reg *prometheus.Registry, publish func()) *Group {
		g, err := NewGroup(GroupConfig{NC: nc, Subjects: s, Log: zerolog.Nop(), Labels: messages.LabelSet{"region": "eu"},
			Dir: dir, Tables: []engine.TableDef{tickDef}, Start: start, Heartbeat: time.Hour, Registry: reg})
		if err != nil {
			t.Fatal(err)
		}
		runCtx, stop := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- g.Run(runCtx) }()
		select {
		case <-g.Ready():
		case err := <-done:
			t.Fatalf("group stopped before it was ready: %v", err)
		case <-ctx.Done():
			t.Fatal("not ready")
		}
		if publish != nil {
			publish()
		}
		if err := g.Sync(ctx); err != nil {
			t.Fatal(err)
		}
		stop()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		return g
	}
	js, _ := jetstream.New(nc)
	subj := s.Live("tick", "region=eu")
	good := messages.NewTable(tickDef.Columns)
	_ = good.AppendRow(start.Add(time.Second), "eu", 1.0)
	goodBytes, _ := messages.Encode(&messages.LiveUpdate{V: messages.LiveVersion, Table: "tick", Rows: good})
	reg1 := prometheus.NewRegistry()
	run(reg1, func() {
		for _, data := range [][]byte{
			{0x81, 0xa4, 'r', 'o', 'w', 's', 0xdd, 0xff, 0xff, 0xff, 0xff},
			goodBytes[:len(goodBytes)-3],
			goodBytes,
		} {
			if _, err := js.Publish(ctx, subj, data); err != nil {
				t.Fatal(err)
			}
		}
	})
	if v := promtest.Sum(t, reg1, poison.MetricName, nil); v != 2 {
		t.Fatalf("live: %s %v, want 2", poison.MetricName, v)
	}
	reg2 := prometheus.NewRegistry()
	g := run(reg2, nil)
	if st := g.Stats(); st.Rows.Load() != 1 || st.Malformed.Load() != 2 {
		t.Fatalf("replay: rows %d, malformed %d; want 1 and 2", st.Rows.Load(), st.Malformed.Load())
	}
	if v := promtest.Sum(t, reg2, poison.MetricName, nil); v != 2 {
		t.Fatalf("replay: %s %v, want 2", poison.MetricName, v)
	}
}
