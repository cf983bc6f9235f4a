package test

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sg-project/sg/messages"
	"github.com/sg-project/sg/services/dap/demo"
	"github.com/sg-project/sg/test/promtest"
)

// relayedRefusal is a multi-RC deployment (twoRCs) with a GW, every us DAP
// (rc-2's) holding its portions, and a watch on the dispatches they get:
// a request for the us region, sent to the global rc-1, is relayed by rc-2.
type relayedRefusal struct {
	d          *deployment
	ans        *depAnswers
	dispatches chan *nats.Msg
	dapOf      map[string]string // dispatch subject -> DAP id
}

func newRelayedRefusal(t *testing.T) *relayedRefusal {
	t.Helper()
	d := twoRCs(t)
	x := &relayedRefusal{d: d, ans: d.collect(), dispatches: make(chan *nats.Msg, 64), dapOf: map[string]string{}}
	depWaitGWRCs(t, d.startGW("gw-1", gwOpts{durable: true}), "rc-1", "rc-2")
	for _, id := range d.dapIDs("us") {
		d.gates[id].hold()
		t.Cleanup(d.gates[id].release)
		x.dapOf[d.s.DAPPortion(id)] = id
		sub, err := d.nc.ChanSubscribe(d.s.DAPPortion(id), x.dispatches)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = sub.Unsubscribe() })
	}
	if err := d.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return x
}

// send sends request id for the us region (rc-1 primary, rc-2 relaying:
// no scope picks the global RC) and returns the first dispatch a us DAP
// got for it, which rc-2 sent.
func (x *relayedRefusal) send(t *testing.T, id string) (*nats.Msg, messages.GetDataArgs) {
	t.Helper()
	args := tradeArgs()
	args.Labels = messages.LabelSelector{demo.LabelKey: {"us"}}
	x.d.send(x.d.newRequest(id, args, messages.Scope{}, refusedTimeout))
	m := receiveMsg(t, x.dispatches, "dispatch to a us DAP")
	if rc := m.Header.Get(messages.HdrRCID); rc != "rc-2" {
		t.Fatalf("the us DAP's dispatch names RC %q, want rc-2, the secondary", rc)
	}
	return m, args
}

// A dispatch relayed by a secondary RC that its DAP cannot decode: the DAP
// refuses it to the secondary (its Sg-Rc-Id), which frees the DAP's slot and
// forwards the refusal to the primary, as it forwards completions: the
// caller gets BAD_REQUEST naming the DAP at once, once, not TIMEOUT at its
// deadline.
func TestMultiRCRelayedRefusalEndsTheRequest(t *testing.T) {
	x := newRelayedRefusal(t)
	d := x.d
	completions, err := d.nc.SubscribeSync(d.s.RCCompletion("rc-1"))
	if err != nil {
		t.Fatal(err)
	}
	defer completions.Unsubscribe()
	start := time.Now()
	m, _ := x.send(t, "refused")
	garble(t, d.nc, m)
	st, _ := depStatus(t, x.ans.wait(t, "refused", refusedWithin))
	if took := time.Since(start); took > refusedWithin {
		t.Fatalf("answered after %s", took)
	}
	dapID := x.dapOf[m.Subject]
	if st.RC != messages.CodeBadRequest || !strings.Contains(st.AI, "refused by DAP "+dapID) || !strings.Contains(st.AI, "portion dispatch") {
		t.Fatalf("status %+v, want BAD_REQUEST naming DAP %s and the dispatch", st, dapID)
	}
	rc1, rc2 := d.proc("rc-1").reg, d.proc("rc-2").reg
	if n := promtest.Sum(t, rc2, "sg_rc_refusals_received_total", map[string]string{"outcome": "forwarded"}); n != 1 {
		t.Errorf("rc-2 forwarded %v refusals, want 1", n)
	}
	if n := promtest.Sum(t, rc1, "sg_rc_refusals_received_total", map[string]string{"outcome": "accepted"}); n != 1 {
		t.Errorf("rc-1 accepted %v refusals, want 1", n)
	}

	// Exactly once: the request's other relayed portions end (cancelled or
	// run) and their completions reach rc-1 after the answer; none answers
	// again. The refused portion's own run ends too, and is not forwarded:
	// the secondary has ended it.
	req, genuine := m.Header.Get(messages.HdrRequestID), 1 // the RC's id of the request; m
	for more := true; more; {
		select {
		case o := <-x.dispatches:
			if o.Header.Get(messages.HdrRequestID) == req && len(o.Data) > 2 {
				genuine++
			}
		default:
			more = false
		}
	}
	for _, id := range d.dapIDs("us") {
		d.gates[id].release()
	}
	for seen, until := 0, time.Now().Add(refusedWithin); seen < genuine-1; {
		c, err := completions.NextMsg(time.Until(until))
		if err != nil {
			t.Fatalf("rc-1 got %d of the %d other relayed portions' completions of %s: %v", seen, genuine-1, req, err)
		}
		if pc, err := messages.DecodeValid[messages.PortionCompletion](c.Data); err == nil && pc.RequestID == req {
			seen++
		}
	}
	if err := d.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	if n := x.ans.count("refused"); n != 1 {
		t.Fatalf("%d answers, want 1", n)
	}
}

// Refusals of a relayed portion that name what was not sent, or not by the
// route it went (straight to the primary; through another RC), change
// nothing but the dropped counters of the RC they reach: the request goes
// on and is answered OK.
func TestMultiRCForgedRelayedRefusalsAreDropped(t *testing.T) {
	x := newRelayedRefusal(t)
	d := x.d
	m, args := x.send(t, "forged")
	req, dapID := m.Header.Get(messages.HdrRequestID), x.dapOf[m.Subject]
	portion, err := messages.ParsePortionID(m.Header.Get(messages.HdrPortionID))
	if err != nil {
		t.Fatalf("the dispatch's portion id: %v", err)
	}
	attempt, _ := strconv.Atoi(m.Header.Get(messages.HdrAttempt)) // none: the first, 0
	refusal := func(dap string, attempt int, via string) messages.Refusal {
		f := messages.NewRefusal(req, "dap", dap, messages.CodeBadRequest, "forged")
		f.PortionID, f.Attempt, f.Via = portion, uint32(attempt), via
		return f
	}
	other := d.dapIDs("eu")[0]
	forged := map[string][]messages.Refusal{
		"rc-1": {
			refusal(dapID, attempt, ""),       // as if the DAP refused to the primary
			refusal(dapID, attempt, "rc-3"),   // through an RC it did not go through
			refusal(dapID, attempt+1, "rc-2"), // an attempt never dispatched
			refusal(other, attempt, "rc-2"),   // another DAP
		},
		"rc-2": {
			refusal(dapID, attempt+1, ""),   // an attempt never dispatched
			refusal(other, attempt, ""),     // another DAP
			refusal(dapID, attempt, "rc-1"), // claims to be forwarded, to the secondary
		},
	}
	for rc, fs := range forged {
		for _, f := range fs {
			b, err := messages.Encode(&f)
			if err != nil {
				t.Fatal(err)
			}
			if err := d.nc.Publish(d.s.RCRefused(rc), b); err != nil {
				t.Fatal(err)
			}
		}
	}
	// Each RC has judged them before the DAPs go on: the answer, the Agg's,
	// would be no sign of it.
	for rc := range forged {
		rcHandledEarlier(t, d.nc, d.s, rc)
	}
	for _, id := range d.dapIDs("us") {
		d.gates[id].release()
	}
	st, tbl := depStatus(t, x.ans.wait(t, "forged", refusedWithin))
	if !st.IsOK() || !depTablesEqual(t, tbl, d.want(args, "us")) {
		t.Fatalf("answer %+v, %d rows; want OK with the us data", st, tbl.NumRows())
	}
	for rc, fs := range forged {
		reg := d.proc(rc).reg
		if n := promtest.Sum(t, reg, "sg_rc_refusals_received_total", map[string]string{"outcome": "dropped"}); n != float64(len(fs)) {
			t.Errorf("%s dropped %v refusals, want %d", rc, n, len(fs))
		}
		for _, outcome := range []string{"accepted", "forwarded"} {
			if n := promtest.Sum(t, reg, "sg_rc_refusals_received_total", map[string]string{"outcome": outcome}); n != 0 {
				t.Errorf("%s: %v forged refusals %s", rc, n, outcome)
			}
		}
	}
}
