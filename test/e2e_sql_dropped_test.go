package test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sg-project/sg/messages"
	"github.com/sg-project/sg/services/dap"
	"github.com/sg-project/sg/services/dap/engine"
	"github.com/sg-project/sg/subjects"
)

// stallSource runs nothing: it says a portion started and holds it until
// its context ends (the DAP stops), as a DAP that goes away mid-portion.
type stallSource struct{ started chan struct{} }

func (s stallSource) Execute(ctx context.Context, _ string, _ messages.Args, _ messages.LabelSet, _ messages.TimeRange) ([]byte, error) {
	select {
	case s.started <- struct{}{}:
	default:
	}
	<-ctx.Done()
	return nil, ctx.Err()
}

// TestSQLRequiredDAPsDroppedThroughARunningSystem: an SQL request whose only
// DAP for its label set goes away while running its portion is requeued
// with no DAP left for it; at its deadline the caller gets the RC's timeout
// naming the seed's sql-only reason "Required DAPs dropped" and the DAP. A
// getData in the same position gets "No DAP covers labels/time range".
func TestSQLRequiredDAPsDroppedThroughARunningSystem(t *testing.T) {
	sys := startSystem(t, systemOptions{})
	// A DAP for another label set stays: the fleet, and the RC's label
	// keys (the SQL plan's), outlive the one that goes.
	st := engine.NewStore()
	def := engine.TableDef{Name: "trade", Labels: []string{"region"}, Columns: []messages.ColumnSpec{
		{Name: "time", Type: messages.TypeTimestamp}, {Name: "region", Type: messages.TypeSymbol}, {Name: "size", Type: messages.TypeInt}}}
	if err := st.Create(def); err != nil {
		t.Fatal(err)
	}
	tables := []messages.TableInfo{{Name: "trade", Kind: messages.TablePartitioned}}
	sys.startDAP(dap.Config{ID: "dap-us", RCID: "rc-1", Labels: messages.LabelSet{"region": "us"}, Tier: messages.TierHDB,
		Tables: tables, Concurrency: 1, Heartbeat: 200 * time.Millisecond, Source: dap.EngineSource{Store: st}, PurviewVersion: 1})

	for _, tc := range []struct {
		api  string
		args any
		want string
	}{
		{subjects.APISQL, messages.SQLArgs{Query: "SELECT count(*) AS n FROM trade WHERE region = 'eu'"},
			`reason=\"Required DAPs dropped\";dap=[dap-eu-sql:5080]`},
		{subjects.APIGetData, messages.GetDataArgs{Table: "trade", Labels: messages.LabelSelector{"region": {"eu"}},
			Agg: []messages.AggSpec{{Name: "n", Func: messages.AggCount}}},
			`reason=\"No DAP covers labels/time range\";dap=[]`},
	} {
		t.Run(tc.api, func(t *testing.T) {
			id := "dap-eu-" + tc.api
			src := stallSource{started: make(chan struct{}, 1)}
			d, err := dap.New(dap.Config{ID: id, Addr: id + ":5080", RCID: "rc-1", Labels: messages.LabelSet{"region": "eu"},
				Tier: messages.TierHDB, Tables: tables, Concurrency: 1, Heartbeat: 200 * time.Millisecond, Source: src,
				PurviewVersion: 1, NC: sys.nc, Subjects: sys.s, Log: sys.log})
			if err != nil {
				t.Fatal(err)
			}
			dctx, stopDAP := context.WithCancel(sys.ctx)
			var wg sync.WaitGroup
			wg.Go(func() {
				if err := d.Run(dctx); err != nil {
					t.Errorf("dap: %v", err)
				}
			})
			defer func() { stopDAP(); wg.Wait() }()
			sys.waitDAPs(2)

			type answer struct {
				resp messages.Response
				err  error
			}
			ans := make(chan answer, 1)
			go func() {
				ctx, cancel := context.WithTimeout(sys.ctx, 30*time.Second)
				defer cancel()
				r, err := sys.client.Do(ctx, tc.api, tc.args, messages.Opts{TimeoutMS: 2500})
				ans <- answer{r, err}
			}()
			select {
			case <-src.started:
			case <-time.After(10 * time.Second):
				t.Fatal("the portion never reached the DAP")
			}
			// The DAP goes away mid-portion: it says so (DAPLost) and its
			// portion gets no completion.
			stopDAP()
			wg.Wait()

			select {
			case a := <-ans:
				if a.err != nil {
					t.Fatal(a.err)
				}
				st := a.resp.Header.Status
				if st.RC != messages.CodeTimeout || !strings.HasPrefix(st.AI, `Request timed out, [rc=rc-1;status="allocating";queue="[labels={region:eu};`) ||
					!strings.Contains(st.AI, tc.want+`]"]`) {
					t.Fatalf("status %v %q\nwant a timeout whose queue block ends %s", st.RC, st.AI, tc.want)
				}
			case <-time.After(20 * time.Second):
				t.Fatal("no answer")
			}
		})
	}
}
