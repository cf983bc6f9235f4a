package test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nuid"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/sg-project/sg/messages"
	"github.com/sg-project/sg/services/dap"
	"github.com/sg-project/sg/services/dap/engine"
	"github.com/sg-project/sg/services/dap/live"
	"github.com/sg-project/sg/subjects"
)

// liveSys is the system (GW, RC and Agg on an embedded NATS server with
// JetStream) that live groups run in.
type liveSys struct{ *system }

func startLiveSys(t *testing.T, maxRetry int) *liveSys {
	t.Helper()
	// Announcements every 100 ms: the GW drops an RC after 3 silent periods, and a busy
	// CI machine under -race must not make it look gone.
	return &liveSys{startSystem(t, systemOptions{gwTimeout: 30 * time.Second, maxRetry: maxRetry,
		announceEvery: 100 * time.Millisecond})}
}

func (ls *liveSys) counter(name string) float64 {
	mfs, err := ls.reg.Gather()
	if err != nil {
		ls.t.Fatal(err)
	}
	total := 0.0
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, m := range mf.GetMetric() {
				total += m.GetCounter().GetValue()
			}
		}
	}
	return total
}

// getData calls getData and decodes the answer; an error status is returned as an error.
//
// The id it returns is the request's logCorr, unique per call: inside sg a
// request runs under the GW's own id (the caller's is a label), and the
// logCorr is what the dispatches (PortionDispatch.LogCorr) and the DAPs'
// completions (Sg-Log-Corr) carry for the tests to match.
func (ls *liveSys) getData(ctx context.Context, args messages.GetDataArgs) (string, messages.Table, error) {
	corr := nuid.Next()
	resp, err := ls.client.Do(ctx, subjects.APIGetData, args, messages.Opts{TimeoutMS: 20_000, LogCorr: corr})
	if err != nil {
		return corr, messages.Table{}, err
	}
	if !resp.Header.Status.IsOK() {
		return corr, messages.Table{}, fmt.Errorf("request %s (log corr %s): %s", resp.Header.RequestID, corr, resp.Header.Status)
	}
	var tbl messages.Table
	if err := msgpack.Unmarshal(resp.Payload, &tbl); err != nil {
		return corr, tbl, fmt.Errorf("decode answer: %w", err)
	}
	return corr, tbl, nil
}

// Tables of the live tests: tick is a time table with a unique id per row, inst a
// reference table.
var (
	tickDef = engine.TableDef{Name: "tick", Labels: []string{"region"}, Columns: []messages.ColumnSpec{
		{Name: "time", Type: messages.TypeTimestamp}, {Name: "region", Type: messages.TypeSymbol},
		{Name: "id", Type: messages.TypeInt}, {Name: "v", Type: messages.TypeFloat}}}
	instDef = engine.TableDef{Name: "inst", Labels: []string{"region"}, Columns: []messages.ColumnSpec{
		{Name: "sym", Type: messages.TypeSymbol}, {Name: "region", Type: messages.TypeSymbol},
		{Name: "lot", Type: messages.TypeInt}}}
)

// liveGroup starts the live group of a region under dir, stopped by cancel or at the
// end of the test; done is closed when its Run returned.
type liveGroup struct {
	g      *live.Group
	cancel context.CancelFunc
	done   chan struct{}
}

func (ls *liveSys) startGroup(region, dir string, start time.Time, wrap func(messages.Tier, dap.Source) dap.Source) *liveGroup {
	ls.t.Helper()
	inst := messages.NewTable(instDef.Columns)
	_ = inst.AppendRow("A."+region, region, int64(1))
	g, err := live.NewGroup(live.GroupConfig{NC: ls.nc, Subjects: ls.s, Log: testLogger(ls.t).With().Str("group", region).Logger(),
		Labels: messages.LabelSet{"region": region}, RCID: "rc-1", Dir: filepath.Join(dir, "region="+region),
		Tables: []engine.TableDef{tickDef, instDef}, Reference: map[string]messages.Table{"inst": inst},
		Start: start, Concurrency: 2, Heartbeat: 500 * time.Millisecond, RowGroupRows: 64, WrapSource: wrap})
	if err != nil {
		ls.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(ls.ctx)
	lg := &liveGroup{g: g, cancel: cancel, done: make(chan struct{})}
	ls.wg.Go(func() {
		defer close(lg.done)
		if err := g.Run(ctx); err != nil {
			ls.errs <- fmt.Errorf("group %s: %w", region, err)
		}
	})
	select {
	case <-g.Ready():
	case <-time.After(30 * time.Second):
		ls.t.Fatalf("group %s not ready within 30s", region)
	}
	return lg
}

func (lg *liveGroup) stop(t *testing.T) {
	t.Helper()
	lg.cancel()
	select {
	case <-lg.done:
	case <-time.After(15 * time.Second):
		t.Fatal("group did not stop within 15s")
	}
}

// tickRows builds rows of the tick table.
func tickRows(region string, times []time.Time, ids []int64) messages.Table {
	tb := messages.NewTable(tickDef.Columns)
	for i, ts := range times {
		_ = tb.AppendRow(ts, region, ids[i], float64(ids[i]%7))
	}
	return tb
}
