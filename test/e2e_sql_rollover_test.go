package test

import (
	"context"
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
	lead := 1500 * time.Millisecond // RC time starts this long before midnight (after the warm-up below)
	offset := midnight.Add(-lead - 2*time.Second).Sub(real0)
	rcNow := func() time.Time { return time.Now().Add(offset) }
	// Deadlines come from the GW's real clock; they must stay ahead of the RC's.
	sys := startSystem(t, systemOptions{gwTimeout: offset + time.Hour, rcNow: rcNow})

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
		Tables: []messages.TableInfo{{Name: "trade", Kind: messages.TablePartitioned}}, Concurrency: 1, Heartbeat: 200 * time.Millisecond,
		Source: dap.EngineSource{Store: st}, Unavailable: "maintenance", PurviewVersion: 1})
	sys.waitDAPs(1)
	// Wait for the RC's warm-up (2 s) so the requests are queued now, before midnight.
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
