package test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/sg-project/sg/messages"
	"github.com/sg-project/sg/services/dap"
	"github.com/sg-project/sg/services/dap/engine"
	"github.com/sg-project/sg/subjects"
)

// TestSQLDateRolloverThroughARunningSystem: an SQL request queued before a
// UTC midnight (its DAP unavailable) and dequeued after it is retried whole,
// as the seed's SQL rules say, then answered; a getData in the same position
// is not retried. The RC's clock is moved to just before a midnight.
func TestSQLDateRolloverThroughARunningSystem(t *testing.T) {
	real0 := time.Now()
	midnight := real0.UTC().Truncate(24 * time.Hour).Add(24 * time.Hour)
	const (
		setup = 2 * time.Second         // RC time from the RC's first reading of its clock to the requests
		lead  = 1500 * time.Millisecond // then this long before midnight
	)
	// The RC's clock starts at midnight - lead - setup when the RC first
	// reads it (rc.New), not when the test began: the embedded NATS server
	// (JetStream) and the GW start before it, and on a loaded machine that
	// start alone could use up the setup bound below. From there it runs at
	// the real rate, one offset, as a real clock would.
	var (
		start  sync.Once
		offset time.Duration
	)
	rcNow := func() time.Time {
		now := time.Now()
		start.Do(func() { offset = midnight.Add(-lead - setup).Sub(now) })
		return now.Add(offset)
	}
	// Deadlines come from the GW's real clock; they must stay ahead of the
	// RC's clock, which runs up to midnight.Sub(real0) ahead of the GW's.
	sys := startSystem(t, systemOptions{gwTimeout: midnight.Sub(real0) + time.Hour, rcNow: rcNow})

	st := engine.NewStore()
	def := engine.TableDef{Name: "trade", Labels: []string{"region"}, Columns: []messages.ColumnSpec{
		{Name: "time", Type: messages.TypeTimestamp}, {Name: "region", Type: messages.TypeSymbol}, {Name: "size", Type: messages.TypeInt}}}
	if err := st.Create(def); err != nil {
		t.Fatal(err)
	}
	tbl := messages.NewTable(def.Columns)
	day := time.Date(2026, 11, 20, 0, 0, 0, 0, time.UTC)
	for i := range 3 {
		if err := tbl.AppendRow(day.Add(time.Duration(i)*time.Hour), "eu", int64(10*(i+1))); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.Append("trade", tbl); err != nil {
		t.Fatal(err)
	}
	d := sys.startDAP(dap.Config{ID: "dap-eu", RCID: "rc-1", Labels: messages.LabelSet{"region": "eu"}, Tier: messages.TierHDB,
		Tables: []messages.TableInfo{{Name: "trade", Kind: messages.TablePartitioned}}, Concurrency: 1,
		// The deployed heartbeat: the DAP must stay known while it waits
		// unavailable, however loaded the machine (at 200 ms, 600 ms unscheduled
		// lost it); SetAvailable tells the RC at once.
		Heartbeat: dap.DefaultHeartbeat,
		Source:    dap.EngineSource{Store: st}, Unavailable: "maintenance", PurviewVersion: 1})
	sys.waitDAPs(1)
	// Its DAP is registered and the RC's warm-up (500 ms, startSystem) ends
	// within the setup time: wait out the rest of it, so that the requests
	// are queued now, before midnight.
	t.Logf("setup took %s of the RC's clock (%s allowed)", rcNow().Sub(midnight.Add(-lead-setup)), setup+lead-500*time.Millisecond)
	until := func(rcTime time.Time) {
		timer := time.NewTimer(rcTime.Sub(rcNow())) // waits for the clock, the condition under test
		defer timer.Stop()
		<-timer.C
	}
	until(midnight.Add(-lead))
	if rcNow().After(midnight.Add(-500 * time.Millisecond)) {
		t.Fatalf("setup took too long: RC time %s is too close to midnight", rcNow())
	}

	type answer struct {
		resp messages.Response
		err  error
	}
	ask := func(api string, args any) chan answer {
		ch := make(chan answer, 1)
		go func() {
			ctx, cancel := context.WithTimeout(sys.ctx, 30*time.Second)
			defer cancel()
			r, err := sys.client.Do(ctx, api, args, messages.Opts{})
			ch <- answer{r, err}
		}()
		return ch
	}
	retriesBefore := sys.counter("sg_rc_retries_total")
	sqlAns := ask(subjects.APISQL, messages.SQLArgs{Query: "SELECT count(*) AS n, sum(size) AS v FROM trade WHERE region = 'eu'"})
	sys.waitQueued(1)
	getAns := ask(subjects.APIGetData, messages.GetDataArgs{Table: "trade", Labels: messages.LabelSelector{"region": {"eu"}},
		Agg: []messages.AggSpec{{Name: "n", Func: messages.AggCount}}})
	sys.waitQueued(2)
	if rcNow().After(midnight) {
		t.Fatalf("queued after midnight (RC time %s): the test proves nothing", rcNow())
	}
	until(midnight.Add(200 * time.Millisecond))
	d.SetAvailable(true, "")

	for name, ch := range map[string]chan answer{"sql": sqlAns, "getData": getAns} {
		select {
		case a := <-ch:
			if a.err != nil || !a.resp.Header.Status.IsOK() {
				t.Fatalf("%s: %v %v", name, a.err, a.resp.Header.Status)
			}
			var got messages.Table
			if err := msgpack.Unmarshal(a.resp.Payload, &got); err != nil {
				t.Fatal(err)
			}
			if n := got.Col("n"); n == nil || len(n.Ints) != 1 || n.Ints[0] != 3 {
				t.Fatalf("%s: answer %+v, want n=3", name, got)
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("%s: no answer", name)
		}
	}
	// Exactly one retry: the SQL request's, for the date rollover.
	if n := sys.counter("sg_rc_retries_total") - retriesBefore; n != 1 {
		t.Fatalf("%v retries, want 1 (the SQL request's rollover retry)", n)
	}
}
