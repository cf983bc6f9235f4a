package test

import (
	"fmt"
	"math/rand/v2"
	"os"
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
	const workers = 16
	const timeout = 8 * time.Second
	const margin = time.Second

	d := newDeployment(t)
	d.startAgg("agg-1")
	d.startRC("rc-1", rcOpts{durable: true})
	d.startRC("rc-2", rcOpts{durable: true})
	d.startFleet(func(string) (string, string) { return "", "" }) // any RC may use any DAP
	d.waitFleet(9, "rc-1", "rc-2")
	for _, id := range []string{"gw-1", "gw-2"} {
		depWaitGWRCs(t, d.startGW(id, gwOpts{durable: true, margin: margin}), "rc-1", "rc-2")
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
	type outcome struct {
		noResponders int
		ai           string
		code         messages.Code
		wrong        bool
		lost         bool
		attempts     int
	}
	outcomes := make([]outcome, total)
	ids := make(chan int)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for i := range ids {
				v := i % len(variants)
				o := &outcomes[i]
				for attempt := 0; attempt < 5; attempt++ {
					o.attempts++
					key := fmt.Sprintf("L%d-%d", i, attempt)
					r := d.newRequestTo(fmt.Sprintf("L%d", i), key, variants[v].args, timeout)
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
					// No GW subscribed at that instant (NATS answers 503):
					// nothing was accepted; the client retries, as
					// services/gw/client reports ErrNoResponders.
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
					// Refused while a GW drained ("retry on another"): nothing
					// was accepted; the client retries.
					if o.code == messages.CodeUnavailable && strings.Contains(resp.Header.Status.AI, "shutting down") {
						continue
					}
					if resp.Header.Status.IsOK() {
						switch {
						case string(resp.Payload) != string(wants[v]):
							o.wrong, o.ai = true, fmt.Sprintf("payload of %d bytes differs from the %d expected", len(resp.Payload), len(wants[v]))
						case resp.Header.RequestID != fmt.Sprintf("L%d", i) || m.Header.Get(messages.HdrRequestID) != fmt.Sprintf("L%d", i):
							o.wrong, o.ai = true, fmt.Sprintf("answer names request %q / %q", resp.Header.RequestID, m.Header.Get(messages.HdrRequestID))
						}
					}
					break
				}
			}
		})
	}

	// Chaos in the test goroutine while the load runs: one service at a
	// time is stopped (or, for an RC, crashed) and started again.
	rng := rand.New(rand.NewPCG(1, 2))
	sent := make(chan struct{})
	go func() {
		defer close(sent)
		for i := range total {
			ids <- i
		}
		close(ids)
	}()
	events := map[string]int{}
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for done := false; !done; {
		select {
		case <-sent:
			done = true
		case <-tick.C:
			switch n := rng.IntN(4); n {
			case 0, 1:
				id := fmt.Sprintf("rc-%d", n+1)
				if rng.IntN(2) == 0 {
					d.crash(id)
					events["rc crash"]++
				} else {
					d.stop(id)
					events["rc stop"]++
				}
				d.startRC(id, rcOpts{durable: true})
			default:
				id := fmt.Sprintf("gw-%d", n-1)
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

	var ok, timeouts, other, lost, wrong, retried, dups, noResp int
	for i, o := range outcomes {
		switch {
		case o.lost:
			lost++
		case o.code == messages.CodeOK:
			ok++
		case o.code == messages.CodeTimeout:
			timeouts++
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
	t.Logf("load: %d requests, chaos %v: ok %d, timeout %d, other %d, retried after a GW drain %d, after no responders %d, lost %d, duplicated %d, wrong %d",
		total, events, ok, timeouts, other, retried, noResp, lost, dups, wrong)
	fmt.Printf("restart load: requests=%d ok=%d timeout=%d other=%d drain_retries=%d no_responder_retries=%d lost=%d duplicated=%d wrong=%d chaos=%v\n",
		total, ok, timeouts, other, retried, noResp, lost, dups, wrong, events)
	if lost != 0 || dups != 0 || wrong != 0 || other != 0 {
		t.Fatalf("lost %d, duplicated %d, wrong %d, other codes %d: want 0", lost, dups, wrong, other)
	}
	if len(events) == 0 {
		t.Fatal("no restarts happened during the load")
	}
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
