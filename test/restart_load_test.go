package test

import (
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sg-project/sg/messages"
)

// TestRestartLoadExactlyOneAnswer sends requests through two GWs and two
// RCs while RCs crash or stop and GWs stop, and are started again, at
// random: every request must get exactly one answer, and every OK answer
// must be right. SG_LOAD_REQUESTS sets the count (default 2000).
func TestRestartLoadExactlyOneAnswer(t *testing.T) {
	if testing.Short() {
		t.Skip("load test")
	}
	total := 2000
	if v, err := strconv.Atoi(os.Getenv("SG_LOAD_REQUESTS")); err == nil && v > 0 {
		total = v
	}
	d := newDeployment(t)
	d.startAgg("agg-1")
	d.startRC("rc-1", rcOpts{durable: true})
	d.startRC("rc-2", rcOpts{durable: true})
	d.startFleet(func(string) (string, string) { return "", "" }) // any RC may use any DAP
	d.waitFleet(9, "rc-1", "rc-2")
	runLoad(t, d, loadPlan{total: total, every: 100 * time.Millisecond,
		rcs: []rcOpts{{}, {}}, rcIDs: []string{"rc-1", "rc-2"}, gwIDs: []string{"gw-1", "gw-2"}})
}

// TestRestartLoadStopsGWs100Times stops the two GWs in turn 100 times while
// requests flow, each started again at once: no panic, no race report (run
// it with -race), every request answered exactly once and right. A stop
// waits for every handler call the drained endpoints still make, and
// leaves what it holds in the request log for the other GW.
func TestRestartLoadStopsGWs100Times(t *testing.T) {
	if testing.Short() {
		t.Skip("load test")
	}
	d := newDeployment(t)
	d.startAgg("agg-1")
	d.startRC("rc-1", rcOpts{durable: true})
	d.startFleet(func(string) (string, string) { return "", "" })
	d.waitFleet(9, "rc-1")
	runLoad(t, d, loadPlan{total: 100000, every: 60 * time.Millisecond, gwStops: 100,
		rcs: []rcOpts{{}}, rcIDs: []string{"rc-1"}, gwIDs: []string{"gw-1", "gw-2"}})
}

// TestRestartLoadAcrossPrimaryAndSecondary: every request spans the global
// rc-1 (primary, eu and asia DAPs) and rc-2 (secondary, assembly a2, us
// DAPs) while either RC crashes or stops and is started again: a restarted
// secondary's portions are retried by the primary, a restarted primary's
// requests are driven again by the GW. Every request gets exactly one answer;
// an OK answer is right; a request whose retries ran out says so.
func TestRestartLoadAcrossPrimaryAndSecondary(t *testing.T) {
	if testing.Short() {
		t.Skip("load test")
	}
	d := twoRCs(t)
	runLoad(t, d, loadPlan{total: 600, every: 150 * time.Millisecond,
		rcs: []rcOpts{{}, {assembly: "a2"}}, rcIDs: []string{"rc-1", "rc-2"}, gwIDs: []string{"gw-1"},
		allow: []messages.Code{messages.CodeRetryExhausted}})
}

// loadPlan: how many requests, how often a service restarts, which ones.
type loadPlan struct {
	total int
	every time.Duration
	rcs   []rcOpts // per rcIDs
	rcIDs []string
	gwIDs []string
	// allow: non-OK codes that are a correct answer under this chaos.
	allow []messages.Code
	// gwStops, when set: the chaos is exactly this many GW stops (each GW
	// in turn, started again at once), with requests flowing until the
	// last; total is then only an upper bound on the requests sent.
	gwStops int
}

func runLoad(t *testing.T, d *deployment, plan loadPlan) {
	t.Helper()
	total := plan.total
	const workers = 16
	const timeout = 8 * time.Second
	const margin = time.Second
	for _, id := range plan.gwIDs {
		depWaitGWRCs(t, d.startGW(id, gwOpts{durable: true, margin: margin}), plan.rcIDs...)
	}

	// Three queries, their right answers computed on the data directly.
	base := tradeArgs()
	variants := []struct {
		args    messages.GetDataArgs
		regions []string
	}{{base, nil}, {base, []string{"eu"}}, {base, []string{"us", "asia"}}}
	wants := make([][]byte, len(variants))
	for i, v := range variants {
		if v.regions != nil {
			variants[i].args.Labels = messages.LabelSelector{"region": v.regions}
		}
		w := d.want(variants[i].args)
		wants[i] = mustPack(t, &w)
	}

	col := newLoadCollector(t, d.nc)
	outcomes := make([]loadOutcome, total)
	ids := make(chan int)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for i := range ids {
				v := i % len(variants)
				outcomes[i] = loadOne(d, col, i, variants[v].args, wants[v], timeout, margin)
			}
		})
	}

	// Chaos in the test goroutine while the load runs: one service at a
	// time is stopped (or, for an RC, crashed) and started again.
	rng := rand.New(rand.NewPCG(1, 2))
	sent := make(chan struct{})
	enough := make(chan struct{}) // the chaos is over: stop sending
	go func() {
		defer close(sent)
		defer close(ids)
		for i := range total {
			select {
			case ids <- i:
			case <-enough:
				return
			}
		}
	}()
	events := map[string]int{}
	tick := time.NewTicker(plan.every)
	defer tick.Stop()
	if plan.gwStops > 0 {
		for n := 0; n < plan.gwStops; n++ {
			select {
			case <-tick.C:
			case <-sent:
				t.Fatalf("all %d requests sent after %d GW stops: raise total", total, n)
			}
			id := plan.gwIDs[n%len(plan.gwIDs)]
			d.stop(id)
			events["gw stop"]++
			d.startGW(id, gwOpts{durable: true, margin: margin})
		}
		close(enough)
		<-sent
	}
	for done := plan.gwStops > 0; !done; {
		select {
		case <-sent:
			done = true
		case <-tick.C:
			n := rng.IntN(len(plan.rcIDs) + len(plan.gwIDs))
			if n < len(plan.rcIDs) {
				id := plan.rcIDs[n]
				if rng.IntN(2) == 0 {
					d.crash(id)
					events["rc crash"]++
				} else {
					d.stop(id)
					events["rc stop"]++
				}
				o := plan.rcs[n]
				o.durable = true
				d.startRC(id, o)
			} else if len(plan.gwIDs) > 1 {
				// A GW stops only while another serves: clients need one.
				id := plan.gwIDs[n-len(plan.rcIDs)]
				d.stop(id)
				events["gw stop"]++
				d.startGW(id, gwOpts{durable: true, margin: margin})
			}
		}
	}
	wg.Wait()

	// Anything still in flight (a late drive, a GW timeout) has had its
	// chance to arrive when the slowest request's margin has passed.
	if err := d.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	deadline := time.After(margin + 500*time.Millisecond)
	for wait := true; wait; {
		select {
		case <-col.any:
		case <-deadline:
			wait = false
		}
	}

	var ok, timeouts, allowed, other, lost, wrong, retried, dups, noResp int
	for i, o := range outcomes {
		if o.attempts == 0 {
			total-- // never sent (the chaos was over)
			continue
		}
		switch {
		case o.lost:
			lost++
		case o.code == messages.CodeOK:
			ok++
		case o.code == messages.CodeTimeout:
			timeouts++
		case slices.Contains(plan.allow, o.code):
			allowed++
		default:
			other++
			t.Logf("L%d: %s %q", i, o.code, o.ai)
		}
		if o.lost {
			t.Logf("L%d: lost after %d attempts", i, o.attempts)
		}
		if o.wrong {
			wrong++
			t.Logf("L%d: wrong: %s", i, o.ai)
		}
		retried += o.attempts - 1 - o.noResponders
		noResp += o.noResponders
		for a := range o.attempts {
			if n := col.count(fmt.Sprintf("L%d-%d", i, a)); n > 1 {
				dups += n - 1
			}
		}
	}
	t.Logf("load: %d requests, chaos %v: ok %d, timeout %d, allowed %v %d, other %d, retried after a GW drain %d, after no responders %d, lost %d, duplicated %d, wrong %d",
		total, events, ok, timeouts, plan.allow, allowed, other, retried, noResp, lost, dups, wrong)
	fmt.Printf("%s: requests=%d ok=%d timeout=%d allowed=%d other=%d drain_retries=%d no_responder_retries=%d lost=%d duplicated=%d wrong=%d chaos=%v\n",
		t.Name(), total, ok, timeouts, allowed, other, retried, noResp, lost, dups, wrong, events)
	if lost != 0 || dups != 0 || wrong != 0 || other != 0 {
		t.Fatalf("lost %d, duplicated %d, wrong %d, other codes %d: want 0", lost, dups, wrong, other)
	}
	if len(events) == 0 {
		t.Fatal("no restarts happened during the load")
	}
}

// loadOutcome is what became of one load request, over its tries.
type loadOutcome struct {
	noResponders int
	ai           string
	code         messages.Code
	wrong        bool
	lost         bool
	attempts     int
}

// loadOne sends request L<i> until it is answered by something other than
// "no GW listening" or "GW shutting down" (nothing was accepted then: the
// client retries), at most 5 times, and judges the answer.
func loadOne(d *deployment, col *loadCollector, i int, args messages.GetDataArgs, want []byte, timeout, margin time.Duration) loadOutcome {
	var o loadOutcome
	for attempt := 0; attempt < 5; attempt++ {
		o.attempts++
		key := fmt.Sprintf("L%d-%d", i, attempt)
		r := d.newRequestTo(fmt.Sprintf("L%d", i), key, args, timeout)
		first := col.expect(key)
		if err := d.nc.PublishMsg(r.msg); err != nil {
			o.lost = true
			break
		}
		var m *nats.Msg
		select {
		case m = <-first:
		case <-time.After(timeout + margin + 10*time.Second):
			o.lost = true
		}
		if m == nil {
			break
		}
		// No GW subscribed at that instant (NATS answers 503): nothing was
		// accepted; the client retries, as services/gw/client reports
		// ErrNoResponders.
		if len(m.Data) == 0 && m.Header.Get("Status") == "503" {
			o.noResponders++
			continue
		}
		resp, err := messages.DecodeResponse(m.Header, m.Data)
		if err != nil {
			o.wrong, o.ai = true, fmt.Sprintf("undecodable answer: %v (headers %v, %d bytes)", err, m.Header, len(m.Data))
			break
		}
		o.code, o.ai = resp.Header.Status.RC, resp.Header.Status.AI
		// Refused while a GW drained ("retry on another"): nothing was
		// accepted; the client retries.
		if o.code == messages.CodeUnavailable && strings.Contains(resp.Header.Status.AI, "shutting down") {
			continue
		}
		if resp.Header.Status.IsOK() {
			switch {
			case string(resp.Payload) != string(want):
				o.wrong, o.ai = true, fmt.Sprintf("payload of %d bytes differs from the %d expected", len(resp.Payload), len(want))
			case resp.Header.RequestID != fmt.Sprintf("L%d", i) || m.Header.Get(messages.HdrRequestID) != fmt.Sprintf("L%d", i):
				o.wrong, o.ai = true, fmt.Sprintf("answer names request %q / %q", resp.Header.RequestID, m.Header.Get(messages.HdrRequestID))
			}
		}
		break
	}
	return o
}

func mustPack(t *testing.T, tbl *messages.Table) []byte {
	t.Helper()
	b, err := messages.Encode(tbl)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// newRequestTo is newRequest with the reply token chosen apart from the id.
func (d *deployment) newRequestTo(id, replyKey string, args messages.GetDataArgs, timeout time.Duration) depRequest {
	r := d.newRequest(id, args, messages.Scope{}, timeout)
	r.reply = "_INBOX.sgload." + replyKey
	r.msg.Reply = r.reply
	return r
}

// loadCollector counts the answers per reply key and hands the first one to
// whoever expects it.
type loadCollector struct {
	mu      sync.Mutex
	n       map[string]int
	waiting map[string]chan *nats.Msg
	any     chan struct{}
}

func newLoadCollector(t *testing.T, nc *nats.Conn) *loadCollector {
	c := &loadCollector{n: map[string]int{}, waiting: map[string]chan *nats.Msg{}, any: make(chan struct{}, 1)}
	sub, err := nc.Subscribe("_INBOX.sgload.*", func(m *nats.Msg) {
		key := m.Subject[strings.LastIndexByte(m.Subject, '.')+1:]
		c.mu.Lock()
		c.n[key]++
		ch := c.waiting[key]
		delete(c.waiting, key)
		c.mu.Unlock()
		if ch != nil {
			ch <- m
		}
		select {
		case c.any <- struct{}{}:
		default:
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := sub.SetPendingLimits(-1, -1); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	return c
}

func (c *loadCollector) expect(key string) <-chan *nats.Msg {
	ch := make(chan *nats.Msg, 1)
	c.mu.Lock()
	c.waiting[key] = ch
	c.mu.Unlock()
	return ch
}

func (c *loadCollector) count(key string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[key]
}
