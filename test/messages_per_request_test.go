package test

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sg-project/sg/messages"
	"github.com/sg-project/sg/services/gw"
)

// The NATS messages one small getData causes end to end (services/gw/doc.go
// lists them, with who needs each), counted by a tap on every subject: a
// message added to the path fails here.
func TestMessagesPerSmallRequest(t *testing.T) {
	// log=true (the default): the entry goes with the first drive, and
	// `answered` before the answer: two writes. log=deferred: a small
	// request answered within an opt-in CreateAfter (a minute here, so that
	// a slow machine cannot make it a longer one) writes nothing to the log.
	for _, log := range []string{"false", "true", "deferred"} {
		t.Run("log="+log, func(t *testing.T) {
			// Announcements every second: background, not the request's.
			o := systemOptions{inProcess: true, announceEvery: time.Second}
			switch log {
			case "true":
				o.requestLog = &gw.Durability{}
			case "deferred":
				o.requestLog = &gw.Durability{CreateAfter: time.Minute}
			}
			logged := log == "true"
			sys, do := smallRequestsOn(t, o)
			tap, err := nats.Connect(sys.url, nats.Name("tap"))
			if err != nil {
				t.Fatal(err)
			}
			defer tap.Close()
			var mu sync.Mutex
			seen := map[string]int{}
			doneEntries := 0                  // requests the Agg's done notices name
			changed := make(chan struct{}, 1) // the tap saw a message
			// Replies to the services' own JetStream API requests (the GW's
			// sweeps of the request log) come on an inbox too, but are not
			// the request's: the tap saw the request that named the reply.
			jsReplies := map[string]bool{}
			sub, err := tap.Subscribe(">", func(m *nats.Msg) {
				c := msgClass(sys, m.Subject)
				d, _ := messages.DecodeValid[messages.AggDone](m.Data)
				mu.Lock()
				switch {
				case c == "jetstream" && m.Reply != "":
					jsReplies[m.Reply] = true
				case c == "inbox" && jsReplies[m.Subject]:
					c = "jetstream"
				}
				seen[c]++
				if c == "agg done" {
					doneEntries += len(d.Done)
				}
				mu.Unlock()
				select {
				case changed <- struct{}{}:
				default:
				}
			})
			bound := time.After(20 * time.Second)
			await := func(what string) {
				select {
				case <-changed:
				case <-bound:
					t.Fatalf("waiting for %s", what)
				}
			}
			if err != nil {
				t.Fatal(err)
			}
			if err := sub.SetPendingLimits(-1, -1); err != nil {
				t.Fatal(err)
			}
			if err := tap.Flush(); err != nil {
				t.Fatal(err)
			}
			// The messages n requests cause.
			wantFor := func(n int) map[string]int {
				want := map[string]int{
					"client request": n, "gw submit": n, "rc portion": n, "rc expect": n, "dap partial": n,
					"dap completion": n, "agg answer": n, "inbox": n,
				}
				if logged {
					want["log write"] = 2 * n
					want["inbox"] += 2 * n // the writes' acknowledgements
				}
				return want
			}
			// What n requests set going has settled once the tap saw every
			// message of every class they cause and a done notice naming
			// each; a message more would have come before those. No one
			// class is last: the tap sees the replies on its own
			// connection, after the client did, and the DAP's completion
			// (to the RC) and the Agg's done notice (held up to
			// defaults.AggDoneDelay) go beside the answer, not before it.
			settle := func(n int, what string, reset bool) (got map[string]int, entries int) {
				want := wantFor(n)
				for {
					if err := tap.Flush(); err != nil {
						t.Fatal(err)
					}
					mu.Lock()
					got = maps.Clone(seen)
					entries = doneEntries
					settled := entries >= n
					for c, k := range want {
						settled = settled && got[c] >= k
					}
					if settled && reset {
						clear(seen)
						doneEntries = 0
					}
					mu.Unlock()
					if settled {
						return got, entries
					}
					await(fmt.Sprintf("every %s request's messages (seen %v, %d named done)", what, got, entries))
				}
			}
			// Warm up, and wait for all the warm-up's messages before counting.
			const warm = 10
			do(warm)
			settle(warm, "warm-up", true)
			const n = 100
			do(n)
			want := wantFor(n)
			got, entries := settle(n, "counted", false)
			for _, c := range slices.Sorted(maps.Keys(got)) {
				t.Logf("%-15s %5.2f per request", c, float64(got[c])/n)
			}
			// One done notice says it for the requests answered within
			// defaults.AggDoneDelay: never more notices than requests, and
			// every request named once.
			if entries != n || got["agg done"] > n {
				t.Errorf("the Agg's done notices: %d messages naming %d requests, want at most %d naming %d", got["agg done"], entries, n, n)
			}
			for c, k := range got {
				if _, ok := want[c]; !ok && !background[c] && c != "agg done" {
					t.Errorf("%d messages of class %q on a small request's path", k, c)
				}
			}
			for c, k := range want {
				if got[c] != k {
					t.Errorf("%s: %d messages for %d requests, want %d", c, got[c], n, k)
				}
			}
		})
	}
}

// background: messages that do not come with requests (liveness, fleet
// state), counted but allowed in any number. A DAP registers again on the
// first announcement of an RC it has not seen (services/dap/events.go), which
// may come (every second here) after the warm-up, while requests are counted.
var background = map[string]bool{"dap heartbeat": true, "rc announce": true,
	"agg heartbeat": true, "gw heartbeat": true, "dap state": true, "dap register": true, "jetstream": true}

// msgClass names a subject by what it carries.
func msgClass(sys *system, subject string) string {
	s := sys.s
	pre := s.Prefix() + "."
	switch {
	case subject == s.GWAPI("getData"):
		return "client request"
	case subject == s.RCSubmit("rc-1"):
		return "gw submit"
	case subject == s.DAPPortion("d1"):
		return "rc portion"
	case subject == s.AggExpect("agg-1"):
		return "rc expect"
	case subject == s.AggPartial("agg-1"):
		return "dap partial"
	case subject == s.RCCompletion("rc-1"):
		return "dap completion"
	case subject == s.RCAggDone("rc-1"):
		return "agg done"
	case strings.HasPrefix(subject, strings.TrimSuffix(s.GWAnswer("gw-1", "x"), "x")):
		return "agg answer"
	case strings.HasPrefix(subject, strings.TrimSuffix(s.RequestLogEntry("gw-1", "x"), "x")):
		return "log write"
	case subject == s.DAPHeartbeat("d1"):
		return "dap heartbeat"
	case subject == s.DAPRegister("d1"):
		return "dap register"
	case subject == s.RCAnnounce("rc-1"):
		return "rc announce"
	case subject == s.AggHeartbeat("agg-1"):
		return "agg heartbeat"
	case subject == s.GWHeartbeat("gw-1"):
		return "gw heartbeat"
	case strings.HasPrefix(subject, "_INBOX."):
		// The GW's reply to the caller, or the acknowledgement of a log
		// write (the GW's own inbox).
		return "inbox"
	case strings.HasPrefix(subject, "$JS."):
		// The GW's sweeps of the request log, and the server's advisories.
		return "jetstream"
	case !strings.HasPrefix(subject, pre):
		return "other: " + subject
	}
	return "sg: " + subject
}
