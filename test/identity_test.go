package test

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sg-project/sg/messages"
)

// Two clients using the same request id at the same time each get their
// own, right answer through GW, RC, DAPs and Agg: inside sg each request has
// the GW's own id, so nothing of one mixes into the other. A retry with the
// same id after an answer gets a fresh, right answer.
func TestSameClientRequestIDEndToEnd(t *testing.T) {
	d := oneRC(t)
	g := d.startGW("gw-1", gwOpts{durable: true})
	depWaitGWRCs(t, g, "rc-1")
	held := d.dapIDs("eu")[0]
	d.gates[held].hold()

	all := tradeArgs()
	eu := tradeArgs()
	eu.Labels = map[string][]string{"region": {"eu"}}
	col := newLoadCollector(t, d.nc)
	first, second := col.expect("same-all"), col.expect("same-eu")
	for _, r := range []depRequest{d.newRequestTo("same", "same-all", all, 20*time.Second), d.newRequestTo("same", "same-eu", eu, 20*time.Second)} {
		d.send(r)
	}
	d.waitEntered(held) // both are in flight: at least one waits on the held DAP
	d.gates[held].release()

	traces := map[string]bool{} // the ids sg knew each request by: all distinct
	check := func(name string, ch <-chan *nats.Msg, want []byte) {
		t.Helper()
		select {
		case m := <-ch:
			st, tbl := depStatus(t, m)
			if !st.IsOK() || string(mustPack(t, &tbl)) != string(want) || m.Header.Get("Sg-Request-Id") != "same" {
				t.Fatalf("%s: %v, %d rows, id %q", name, st, tbl.NumRows(), m.Header.Get("Sg-Request-Id"))
			}
			trace := m.Header.Get(messages.HdrTraceID)
			if trace == "" || trace == "same" || traces[trace] {
				t.Fatalf("%s: trace id %q: want the GW's own id, different for every request", name, trace)
			}
			traces[trace] = true
		case <-time.After(20 * time.Second):
			t.Fatalf("%s: no answer", name)
		}
	}
	wantAll, wantEU := d.want(all), d.want(eu)
	check("all regions", first, mustPack(t, &wantAll))
	check("eu", second, mustPack(t, &wantEU))

	// The same id again, after the answer: a new request, a fresh answer.
	again := col.expect("same-again")
	d.send(d.newRequestTo("same", "same-again", eu, 20*time.Second))
	check("retry", again, mustPack(t, &wantEU))
	if n := col.count("same-all") + col.count("same-eu") + col.count("same-again"); n != 3 {
		t.Fatalf("%d answers, want 3", n)
	}
}
