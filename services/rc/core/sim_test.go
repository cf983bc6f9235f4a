package core

import (
	"fmt"
	"math/rand/v2"
	"os"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sg-project/sg/services/retryafter"
)

// The deterministic simulation: seeded random fleets and event orders,
// with the invariants of DESIGN.md section 3 checked after every step.
//
//	SIM_SEEDS=2000 go test ./services/rc/... -run Simulation   # many seeds
//	SIM_SEED=17 go test ./services/rc/... -run Simulation -v  # replay one
func TestSimulation(t *testing.T) {
	if s := os.Getenv("SIM_SEED"); s != "" {
		seed, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("SIM_SEED=%q: %v", s, err)
		}
		if _, _, err := simulate(seed, t.Logf); err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		return
	}
	n := 200
	if s := os.Getenv("SIM_SEEDS"); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil || v < 1 {
			t.Fatalf("SIM_SEEDS=%q: want a positive number", s)
		}
		n = v
	}
	quiet := func(string, ...any) {}
	failed := 0
	var total Stats
	var waits simWaits
	for seed := uint64(1); seed <= uint64(n); seed++ {
		st, w, err := simulate(seed, quiet)
		waits.planned += w.planned
		waits.served += w.served
		total.Cancels += st.Cancels
		total.Redriven += st.Redriven
		total.Replies[ReplyCancelled] += st.Replies[ReplyCancelled]
		total.Replies[ReplyRateLimited] += st.Replies[ReplyRateLimited]
		total.ArrivedLate += st.ArrivedLate
		total.RefusalsAccepted += st.RefusalsAccepted
		total.RefusalsDropped += st.RefusalsDropped
		if err != nil {
			t.Errorf("seed %d: %v\n  replay: SIM_SEED=%d go test ./services/rc/core -run Simulation -v", seed, err, seed)
			if failed++; failed >= 5 {
				t.FailNow()
			}
		}
	}
	t.Logf("%d seeds: %d cancelled, %d DAPs or peers told to stop, %d requests driven again on another Agg, %d refused over a limit, %d label sets planned while their DAPs were gone (%d served when one came back)",
		n, total.Replies[ReplyCancelled], total.Cancels, total.Redriven, total.Replies[ReplyRateLimited], waits.planned, waits.served)
	// The events under test must happen, or the invariants prove nothing.
	if n >= 100 && (total.Replies[ReplyCancelled] == 0 || total.Cancels == 0 || total.Redriven == 0 || total.Replies[ReplyRateLimited] == 0) {
		t.Errorf("the simulation did not exercise cancels and Agg loss: %+v", total)
	}
	if n >= 100 && (waits.planned == 0 || waits.served == 0) {
		t.Errorf("the simulation planned %d label sets whose DAPs had left, %d of them served when a DAP came back", waits.planned, waits.served)
	}
	t.Logf("refusals: %d accepted, %d dropped", total.RefusalsAccepted, total.RefusalsDropped)
	if n >= 100 && (total.RefusalsAccepted == 0 || total.RefusalsDropped == 0) {
		t.Errorf("the simulation injected no refusal that was accepted or none that was dropped: %+v", total)
	}
	if n >= 100 && total.ArrivedLate == 0 {
		t.Errorf("the simulation sent no request that arrived past its deadline: %+v", total)
	}
}

// simDAP is the simulation's truth about one DAP.
type simDAP struct {
	info     DAPInfo
	inflight []simPortion
	lost     bool
}

type simPortion struct {
	d       Dispatch
	outcome Outcome
}

type simRequest struct {
	late     bool // arrived at or after its deadline
	req      Request
	kind     TableKind
	sets     map[labelKey]bool // label sets the fleet had at arrival
	ended    bool
	replied  bool
	expected bool // AggExpect or AggFail seen; the Agg will answer
	failed   bool // AggFail seen: the Agg answers with a DAP's error
	aggAt    int64
	retries  int
	// dispatched: a portion was sent; told: DAPs told to stop the request.
	dispatched bool
	told       map[string]bool
	// agg is the request's Agg, as the core's commands name it.
	agg     string
	attempt map[labelKey]uint32
	vintage map[string]uint64 // (ls, attempt) -> vintage of its dispatches
	// absent: planned label sets that had no DAP at arrival (remembered).
	absent map[labelKey]bool
	// tracked: the portions the Agg was told early (AggTrack) and not
	// superseded; trackSealed: the last AggTrack sealed the set.
	tracked     map[PortionID]bool
	trackSealed bool
}

type sim struct {
	rng      *rand.Rand
	c        *Core
	now      int64
	daps     map[string]*simDAP
	dapOrder []string
	reqs     map[string]*simRequest
	reqOrder []string
	portions map[PortionID]Dispatch
	okDone   map[PortionID]bool
	labels   []Labels
	nextID   int
	logf     func(string, ...any)
	maxRetry int
	// dapTimedOut: the current event is a DAP's timeout report.
	dapTimedOut bool
	// cancelled: the current event cancels this request.
	cancelled string
	// arrived: the current event is this request's arrival; refused: a DAP
	// refused a portion of this request over its queue limit.
	arrived, refused string
	// refusal: the current event is a DAP's or an Agg's refusal of this
	// request; refusalForged: one that names what the core did not send.
	refusal       string
	refusalForged bool
	aggAlive      map[string]bool
	tops          map[string]uint64
	// lastLoss: when a DAP of each label set was last lost.
	lastLoss map[labelKey]int64
	waits    simWaits
}

// simWaits counts label sets a request was planned over while none of
// their DAPs was in the fleet (remembered), and those of them a DAP that
// came back was given.
type simWaits struct{ planned, served int }

func simulate(seed uint64, logf func(string, ...any)) (Stats, simWaits, error) {
	s, err := runSim(seed, logf)
	if s == nil || s.c == nil {
		return Stats{}, simWaits{}, err
	}
	st, _ := s.c.Stats()
	return st, s.waits, err
}

func runSim(seed uint64, logf func(string, ...any)) (*sim, error) {
	s := newSim(seed, 0x5eed, logf)
	cfg := Config{Self: "rc-1", MaxRetry: s.maxRetry, TickEvery: time.Second, Aggs: []string{"agg-1", "agg-2"}}
	if s.rng.IntN(2) == 0 {
		cfg.MaxQueued, cfg.MaxQueuedPerCaller = 2+s.rng.IntN(30), 1+s.rng.IntN(15)
	}
	// Label sets remembered after their DAPs left: not at all, for a few
	// seconds (forgotten within a run), or the default.
	cfg.LabelSetRetention = []time.Duration{-1, 2 * time.Second, 20 * time.Second, 0}[s.rng.IntN(4)]
	s.c = New(cfg)

	nls := 1 + s.rng.IntN(5)
	for i := 0; i < nls; i++ {
		s.labels = append(s.labels, lbl("region", fmt.Sprintf("r%d", i)))
	}
	ndap := 1 + s.rng.IntN(50)
	for i := 0; i < ndap; i++ {
		if err := s.addDAP(); err != nil {
			return s, err
		}
	}
	steps := 200 + s.rng.IntN(400)
	for i := 0; i < steps; i++ {
		if err := s.randomEvent(); err != nil {
			return s, fmt.Errorf("step %d (t=+%s): %w", i, time.Duration(s.now-t0), err)
		}
	}
	return s, s.drain()
}

// newSim is a simulation of seed (salt tells the variants' random streams
// apart) with two Aggs alive and a random retry budget; the caller makes its
// core.
func newSim(seed, salt uint64, logf func(string, ...any)) *sim {
	s := &sim{
		rng:      rand.New(rand.NewPCG(seed, seed^salt)),
		now:      t0,
		daps:     map[string]*simDAP{},
		reqs:     map[string]*simRequest{},
		portions: map[PortionID]Dispatch{},
		okDone:   map[PortionID]bool{},
		logf:     logf,
		aggAlive: map[string]bool{"agg-1": true, "agg-2": true},
		lastLoss: map[labelKey]int64{},
	}
	s.maxRetry = 1 + s.rng.IntN(4)
	return s
}

// drain lets every DAP answer and every deadline pass, then checks that every
// request ended and the core holds nothing.
func (s *sim) drain() error {
	for i := 0; i < 10000 && s.anyInflight(); i++ {
		if err := s.completeOne(); err != nil {
			return fmt.Errorf("drain: %w", err)
		}
	}
	if err := s.advanceTo(s.now + int64(2*time.Minute)); err != nil {
		return fmt.Errorf("final: %w", err)
	}
	for _, id := range s.reqOrder {
		if r := s.reqs[id]; !r.ended {
			return fmt.Errorf("request %s never ended", id)
		}
	}
	if st, _ := s.c.Stats(); st.QueueLength != 0 || len(s.c.requests) != 0 {
		return fmt.Errorf("core still holds %d requests, %d queued items", len(s.c.requests), st.QueueLength)
	}
	return nil
}

var simTables = map[string]TableKind{"trade": TimePartitioned, "ref": Sharded, "cfg": Unsharded}

func (s *sim) addDAP() error {
	s.nextID++
	id := fmt.Sprintf("dap-%d", s.nextID)
	ls := s.labels[s.rng.IntN(len(s.labels))]
	b1, b2 := t0, t0+12*hour
	info := DAPInfo{ID: id, Labels: ls, Concurrency: 1 + s.rng.IntN(3), Available: s.rng.IntN(5) > 0, Tables: simTables}
	switch s.rng.IntN(3) {
	case 0:
		info.Tier, info.Purview.Start, info.Purview.End = TierHDB, MinTS, b1
	case 1:
		info.Tier, info.Purview.Start, info.Purview.End = TierIDB, b1, b2
	default:
		info.Tier, info.Purview.Start, info.Purview.End = TierRDB, b2, MaxTS
	}
	// Join at the label set's newest vintage, or behind it.
	for _, o := range s.dapOrder {
		if d := s.daps[o]; !d.lost && keyOf(d.info.Labels) == keyOf(ls) {
			info.Vintage = max(info.Vintage, d.info.Vintage)
		}
	}
	if s.rng.IntN(4) == 0 && info.Vintage > 0 {
		info.Vintage--
	}
	s.daps[id] = &simDAP{info: info}
	s.dapOrder = append(s.dapOrder, id)
	return s.step(DAPRegistered{At: s.now, DAP: info})
}

func (s *sim) liveDAPs() []*simDAP {
	var out []*simDAP
	for _, id := range s.dapOrder {
		if d := s.daps[id]; !d.lost {
			out = append(out, d)
		}
	}
	return out
}

func (s *sim) anyInflight() bool {
	for _, id := range s.dapOrder {
		if len(s.daps[id].inflight) > 0 {
			return true
		}
	}
	return false
}

func (s *sim) randomEvent() error {
	// Time moves on; deadlines that fall due are ticked on time.
	if err := s.advanceTo(s.now + int64(s.rng.ExpFloat64()*float64(200*time.Millisecond))); err != nil {
		return err
	}
	live := s.liveDAPs()
	switch x := s.rng.IntN(100); {
	case x < 25:
		return s.newRequest()
	case x < 60:
		return s.completeOne()
	case x < 68 && len(live) > 0:
		d := live[s.rng.IntN(len(live))]
		d.info.Available = !d.info.Available
		return s.step(DAPStatusChanged{At: s.now, DAP: d.info})
	case x < 74 && len(live) > 0:
		// Reference data update: the label set's DAPs move one by one.
		d := live[s.rng.IntN(len(live))]
		d.info.Vintage++
		return s.step(DAPVintageChanged{At: s.now, DAP: d.info.ID, Vintage: d.info.Vintage})
	case x < 79 && len(live) > 0:
		// End of interval: purview version bump, sometimes a moved boundary.
		d := live[s.rng.IntN(len(live))]
		d.info.PurviewVersion++
		if d.info.Tier == TierIDB && s.rng.IntN(2) == 0 {
			d.info.Purview.End += hour
		}
		if d.info.Tier == TierRDB && s.rng.IntN(2) == 0 {
			d.info.Purview.Start += hour
		}
		return s.step(DAPStatusChanged{At: s.now, DAP: d.info})
	case x < 82 && len(live) > 0:
		d := live[s.rng.IntN(len(live))]
		d.lost = true
		s.lastLoss[keyOf(d.info.Labels)] = s.now
		// Some lost DAPs still answer later (a partition, not a crash).
		if s.rng.IntN(2) == 0 {
			d.inflight = nil
		}
		return s.step(DAPLost{At: s.now, DAP: d.info.ID})
	case x < 85:
		if len(live) < 50 {
			return s.addDAP()
		}
	case x < 94:
		return s.aggAnswers()
	case x < 95:
		return s.aggTimesOut()
	case x < 98:
		return s.cancelOne()
	case x < 99:
		return s.toggleAgg()
	default:
		return s.refuseOne()
	}
	return s.step(Tick{At: s.now})
}

// advanceTo moves time forward, stepping a Tick at each due deadline as the
// shell's timer would.
func (s *sim) advanceTo(t int64) error {
	for {
		at, ok := s.c.NextDeadline()
		if !ok || at > t {
			break
		}
		s.now = max(s.now, at)
		if err := s.step(Tick{At: s.now}); err != nil {
			return err
		}
	}
	s.now = max(s.now, t)
	return nil
}

func (s *sim) newRequest() error {
	s.nextID++
	id := fmt.Sprintf("q-%d", s.nextID)
	tables := []string{"trade", "trade", "trade", "ref", "cfg"}
	table := tables[s.rng.IntN(len(tables))]
	start := t0 + int64(s.rng.IntN(30)-10)*hour
	end := start + int64(1+s.rng.IntN(30))*hour
	var sel Selector
	if s.rng.IntN(2) == 0 {
		sel = Selector{"region": {}}
		for _, l := range s.labels {
			if s.rng.IntN(2) == 0 {
				sel["region"] = append(sel["region"], l["region"])
			}
		}
		if len(sel["region"]) == 0 {
			sel = nil
		}
	}
	q := Request{
		ID: id, API: "getData", Table: table, Labels: sel, Range: TimeRange{Start: start, End: end},
		Deadline: s.now + int64(time.Duration(1+s.rng.IntN(60))*time.Second),
		SQL:      s.rng.IntN(10) == 0,
	}
	late := s.rng.IntN(30) == 0
	if late {
		// It waited in a GW or the RC's inbox: it reaches the core past its deadline.
		q.Deadline = s.now - int64(s.rng.IntN(1000))*int64(time.Millisecond)
	}
	if s.rng.IntN(2) == 0 {
		q.Agg = "agg-1" // named by the caller: kept while alive
	}
	q.Caller = []string{"", "c1", "c2"}[s.rng.IntN(3)]
	r := &simRequest{req: q, kind: simTables[table], sets: map[labelKey]bool{}, attempt: map[labelKey]uint32{}, vintage: map[string]uint64{}, late: late}
	for _, d := range s.liveDAPs() {
		if sel.Selects(d.info.Labels) {
			if r.kind == Unsharded {
				r.sets[""] = true
			} else {
				r.sets[keyOf(d.info.Labels)] = true
			}
		}
	}
	// And the label sets whose DAPs left within the retention: the core
	// waits for them rather than answer without them.
	retention := max(int64(s.c.cfg.LabelSetRetention), 0)
	for _, l := range s.labels {
		if at, ok := s.lastLoss[keyOf(l)]; ok && s.now-at < retention && sel.Selects(l) && r.kind != Unsharded && !r.sets[keyOf(l)] {
			r.sets[keyOf(l)] = true
			if r.absent == nil {
				r.absent = map[labelKey]bool{}
			}
			r.absent[keyOf(l)] = true
		}
	}
	s.reqs[id] = r
	s.reqOrder = append(s.reqOrder, id)
	return s.step(RequestArrived{At: s.now, Request: q})
}

// completeOne lets a random DAP answer a random portion it holds.
func (s *sim) completeOne() error {
	var holders []*simDAP
	for _, id := range s.dapOrder {
		if d := s.daps[id]; len(d.inflight) > 0 {
			holders = append(holders, d)
		}
	}
	if len(holders) == 0 {
		return s.step(Tick{At: s.now})
	}
	d := holders[s.rng.IntN(len(holders))]
	i := s.rng.IntN(len(d.inflight))
	p := d.inflight[i]
	d.inflight = append(d.inflight[:i], d.inflight[i+1:]...)
	if p.outcome == OutcomeOK {
		s.okDone[p.d.Portion.ID] = true
	}
	return s.step(PortionCompleted{At: s.now, Request: p.d.Portion.Request, Portion: p.d.Portion.ID, DAP: d.info.ID, Outcome: p.outcome, Message: "sim"})
}

// aggAnswers: the Agg answers a request it was told to merge or fail, if the
// deadline allows.
func (s *sim) aggAnswers() error {
	for _, id := range s.reqOrder {
		r := s.reqs[id]
		if r.expected && !r.ended && s.now < r.req.Deadline && s.aggAlive[r.agg] {
			r.ended = true
			return s.step(AggDone{At: s.now, Request: id})
		}
	}
	return s.step(Tick{At: s.now})
}

// aggTimesOut: an Agg whose clock leads reports that its execution of an
// expected request timed out, a little before the RC's own deadline.
func (s *sim) aggTimesOut() error {
	for _, id := range s.reqOrder {
		r := s.reqs[id]
		if r.expected && !r.ended && !r.replied && s.now < r.req.Deadline && r.req.Deadline-s.now < int64(time.Second) {
			return s.step(AggTimedOut{At: s.now, Request: id, Agg: r.agg})
		}
	}
	return s.step(Tick{At: s.now})
}

// toggleAgg: an Agg dies (its partials with it) or comes back.
func (s *sim) toggleAgg() error {
	id := []string{"agg-1", "agg-2"}[s.rng.IntN(2)]
	if s.aggAlive[id] {
		s.aggAlive[id] = false
		if err := s.step(AggLost{At: s.now, Agg: id}); err != nil {
			return err
		}
		for _, rid := range s.reqOrder {
			r := s.reqs[rid]
			if cr := s.c.requests[rid]; !r.ended && r.agg == id && cr != nil && !cr.timingOut {
				return fmt.Errorf("request %s left on lost Agg %s", rid, id)
			}
		}
		return nil
	}
	s.aggAlive[id] = true
	return s.step(AggUp{At: s.now, Agg: id})
}

// useAgg checks that a command names the request's Agg, alive.
func (s *sim) useAgg(r *simRequest, agg string) error {
	if !s.aggAlive[agg] {
		return fmt.Errorf("request %s: work for lost Agg %q", r.req.ID, agg)
	}
	if r.agg == "" {
		r.agg = agg
	}
	if r.agg != agg {
		return fmt.Errorf("request %s: Agg %s, command names %s", r.req.ID, r.agg, agg)
	}
	return nil
}

// cancelOne: the caller gives up on a random request (sometimes one that
// has already ended, or one the RC never heard of).
func (s *sim) cancelOne() error {
	id := fmt.Sprintf("q-unknown-%d", s.rng.IntN(3))
	if len(s.reqOrder) > 0 && s.rng.IntN(4) > 0 {
		id = s.reqOrder[len(s.reqOrder)-1-s.rng.IntN(min(len(s.reqOrder), 8))]
	}
	return s.step(RequestCancelled{At: s.now, Request: id, Reason: "sim"})
}

// step feeds one event, checks the commands and the invariants.
func (s *sim) step(ev Event) error {
	before := s.queuedSnapshot()
	s.tops = map[string]uint64{}
	pc, ok := ev.(PortionCompleted)
	_, aggTO := ev.(AggTimedOut)
	s.dapTimedOut = (ok && pc.Outcome == OutcomeTimeout) || aggTO // the Agg's clock may lead too
	s.cancelled, s.arrived, s.refused = "", "", ""
	if _, ok := ev.(Refused); !ok {
		s.refusal, s.refusalForged = "", false
	}
	switch e := ev.(type) {
	case RequestCancelled:
		s.cancelled = e.Request
	case RequestArrived:
		s.arrived = e.Request.ID
	case PortionCompleted:
		if e.Outcome == OutcomeRefused {
			s.refused = e.Request
		}
	}
	out := s.c.Step(ev)
	for _, cmd := range out {
		if err := s.apply(cmd); err != nil {
			return fmt.Errorf("after %T%+v: %w", ev, ev, err)
		}
	}
	if err := s.checkStopped(out); err != nil {
		return fmt.Errorf("after %T%+v: %w", ev, ev, err)
	}
	if err := s.checkAdmitted(); err != nil {
		return fmt.Errorf("after %T%+v: %w", ev, ev, err)
	}
	if err := s.checkPlanned(); err != nil {
		return fmt.Errorf("after %T%+v: %w", ev, ev, err)
	}
	if err := s.checkOrder(out, before); err != nil {
		return fmt.Errorf("after %T: %w", ev, err)
	}
	if err := s.checkQuiescent(); err != nil {
		return fmt.Errorf("after %T: %w", ev, err)
	}
	if err := s.checkRunningIndex(); err != nil {
		return fmt.Errorf("after %T: %w", ev, err)
	}
	if err := s.checkGroups(); err != nil {
		return fmt.Errorf("after %T: %w", ev, err)
	}
	return nil
}

// checkGroups: the queue groups the core holds are live and under their
// keys; every queued item is in a live subqueue of a live group; and a
// dropped group (whatever still points at it: a label set, a known set, a
// DAP's cache) holds no subqueue.
func (s *sim) checkGroups() error {
	for k, g := range s.c.groups {
		if g.dropped {
			return fmt.Errorf("group %s%v is in c.groups, dropped", k.table, k.key)
		}
		if g.key != k {
			return fmt.Errorf("group %s%v is under key %s%v", g.key.table, g.key.key, k.table, k.key)
		}
	}
	dropped := func(g *queueGroup, what string) error {
		if g != nil && g.dropped && (g.unlocked != nil || len(g.locked) > 0) {
			return fmt.Errorf("%s: dropped group %s%v holds subqueues (unlocked %v, %d locked)", what, g.key.table, g.key.key, g.unlocked != nil, len(g.locked))
		}
		return nil
	}
	for _, id := range s.reqOrder {
		r := s.c.requests[id]
		if r == nil {
			continue
		}
		for _, ls := range r.sets {
			if err := dropped(ls.qg, "request "+r.ID); err != nil {
				return err
			}
			for _, it := range ls.items {
				q := it.sub
				if q == nil || q.g == nil || q.id == 0 {
					return fmt.Errorf("request %s: a queued item of %s%v is in no live subqueue", r.ID, ls.group.table, ls.group.key)
				}
				g := q.g
				if g.dropped || s.c.groups[g.key] != g {
					return fmt.Errorf("request %s: a queued item is in a subqueue of group %s%v, dropped %v or not the core's", r.ID, g.key.table, g.key.key, g.dropped)
				}
				if live := g.unlocked == q || q.key.locked && g.locked[q.key.vintage] == q; !live {
					return fmt.Errorf("request %s: a queued item is in a subqueue group %s%v no longer holds", r.ID, g.key.table, g.key.key)
				}
			}
		}
	}
	for t, ts := range s.c.tableSets {
		for _, k := range ts.sets {
			if err := dropped(k.g, "tableSets "+t); err != nil {
				return err
			}
		}
	}
	for _, d := range s.c.fleet.byID {
		for _, dg := range d.groups {
			if err := dropped(dg.g, "DAP "+d.ID); err != nil {
				return err
			}
			// A DAP's groups are not dropped while it is in the fleet (it
			// serves them): dapGroups keeps them for the fleet's epoch.
			if d.groupsEpoch == s.c.fleet.epoch && dg.g.dropped {
				return fmt.Errorf("DAP %s serves group %s%v, dropped", d.ID, dg.g.key.table, dg.g.key.key)
			}
		}
	}
	return nil
}

// checkRunningIndex: the running index holds exactly the portions this core
// dispatched that its DAPs' running lists hold.
func (s *sim) checkRunningIndex() error {
	n := 0
	for _, d := range s.c.fleet.byID {
		for _, rp := range d.running {
			if rp.ps == nil {
				continue
			}
			n++
			if got := s.c.runningByID.get(rp.id); got != rp.ps {
				return fmt.Errorf("running index: portion %d of DAP %s is %p, want %p", rp.id, d.ID, got, rp.ps)
			}
		}
	}
	if n != s.c.runningByID.n {
		return fmt.Errorf("running index holds %d portions, the DAPs run %d", s.c.runningByID.n, n)
	}
	return nil
}

func (s *sim) apply(cmd Command) error {
	switch c := cmd.(type) {
	case *Dispatch:
		r := s.reqs[c.Portion.Request]
		if r == nil || r.ended {
			return fmt.Errorf("dispatch for ended or unknown request %s", c.Portion.Request)
		}
		if s.now >= r.req.Deadline {
			return fmt.Errorf("dispatch of %s at or after its deadline", r.req.ID)
		}
		d := s.daps[c.DAP]
		if d == nil || d.lost {
			return fmt.Errorf("dispatch to lost or unknown DAP %s", c.DAP)
		}
		if !d.info.Available {
			return fmt.Errorf("dispatch to unavailable DAP %s", c.DAP)
		}
		if len(d.inflight) >= d.info.Concurrency {
			return fmt.Errorf("DAP %s over its concurrency %d", c.DAP, d.info.Concurrency)
		}
		k := keyOf(c.Portion.Labels)
		if r.kind == Unsharded {
			k = ""
		}
		for _, p := range d.inflight {
			if p.d.Portion.Request == c.Portion.Request && keyOf(p.d.Portion.Labels) == keyOf(c.Portion.Labels) && p.d.Portion.Attempt < c.Portion.Attempt {
				return fmt.Errorf("DAP %s got attempt %d while running attempt %d", c.DAP, c.Portion.Attempt, p.d.Portion.Attempt)
			}
		}
		if c.Portion.Attempt < r.attempt[k] {
			return fmt.Errorf("dispatch of superseded attempt %d (current %d)", c.Portion.Attempt, r.attempt[k])
		}
		r.attempt[k] = c.Portion.Attempt
		if r.absent[k] {
			delete(r.absent, k)
			s.waits.served++
		}
		vk := fmt.Sprintf("%s#%d", k, c.Portion.Attempt)
		if v, ok := r.vintage[vk]; ok && v != c.Portion.Vintage {
			return fmt.Errorf("label set %s attempt %d dispatched at vintages %d and %d", k, c.Portion.Attempt, v, c.Portion.Vintage)
		}
		r.vintage[vk] = c.Portion.Vintage
		if c.Retries > s.maxRetry {
			return fmt.Errorf("dispatch after %d retries, max %d", c.Retries, s.maxRetry)
		}
		if err := s.useAgg(r, c.Agg); err != nil {
			return err
		}
		// The DAP checks the header against its own watermarks.
		outcome := OutcomeOK
		switch x := s.rng.IntN(100); {
		case c.Portion.PurviewVersion != d.info.PurviewVersion || c.Portion.Vintage != d.info.Vintage:
			outcome = OutcomeRetry
		case x < 3:
			outcome = OutcomeRetry
		case x < 4:
			outcome = OutcomeError
		case x < 5:
			outcome = OutcomeTimeout
		case x < 6:
			outcome = OutcomeRefused
		}
		d.inflight = append(d.inflight, simPortion{d: *c, outcome: outcome})
		s.portions[c.Portion.ID] = *c
		r.dispatched = true
	case CancelDAP:
		r := s.reqs[c.Request]
		if c.Portion != 0 {
			// One portion, working for a lost Agg, stopped so the request goes on.
			d, p := s.daps[c.DAP], s.portions[c.Portion]
			if r == nil || r.ended || d == nil || p.Portion.Request != c.Request || s.aggAlive[p.Agg] || p.Agg == r.agg {
				return fmt.Errorf("DAP %s told to stop portion %d of %s (for Agg %s, request's Agg %s)", c.DAP, c.Portion, c.Request, p.Agg, r.agg)
			}
			found := false
			for i := range d.inflight {
				if d.inflight[i].d.Portion.ID == c.Portion {
					d.inflight[i].outcome, found = OutcomeError, true
				}
			}
			if !found {
				return fmt.Errorf("DAP %s told to stop portion %d it does not run", c.DAP, c.Portion)
			}
			break
		}
		if r == nil || !r.ended || !r.replied {
			return fmt.Errorf("DAP %s told to stop request %s, which the RC has not answered", c.DAP, c.Request)
		}
		d := s.daps[c.DAP]
		if d == nil {
			return fmt.Errorf("cancel to unknown DAP %s", c.DAP)
		}
		found := false
		for i := range d.inflight {
			if d.inflight[i].d.Portion.Request == c.Request {
				// The DAP stops it and answers (an error the RC finds stale).
				d.inflight[i].outcome = OutcomeError
				found = true
			}
		}
		if !found {
			return fmt.Errorf("DAP %s told to stop request %s, which it does not run", c.DAP, c.Request)
		}
		if r.told == nil {
			r.told = map[string]bool{}
		}
		r.told[c.DAP] = true
	case CancelPeer:
		return fmt.Errorf("cancel to peer RC %s in a one-RC simulation", c.RC)
	case CancelAgg:
		r := s.reqs[c.Request]
		if r == nil || !r.replied || !r.dispatched {
			return fmt.Errorf("agg told to drop request %s (answered by the RC: %v, dispatched: %v)", c.Request, r != nil && r.replied, r != nil && r.dispatched)
		}
	case *AggTrack:
		r := s.reqs[c.Request]
		if r == nil || r.ended || r.expected {
			return fmt.Errorf("agg track for ended request %s", c.Request)
		}
		if err := s.useAgg(r, c.Agg); err != nil {
			return err
		}
		if r.tracked == nil {
			r.tracked = map[PortionID]bool{}
		}
		for _, ref := range c.Supersede {
			delete(r.tracked, ref.PortionID)
		}
		// (It precedes the step's Dispatch commands: the Agg hears first.)
		for _, ref := range c.Expect {
			r.tracked[ref.PortionID] = true
		}
		r.trackSealed = c.Sealed
	case AggExpect:
		r := s.reqs[c.Request]
		if r == nil || r.ended || r.expected {
			return fmt.Errorf("agg expect for ended request %s", c.Request)
		}
		r.expected = true
		if err := s.useAgg(r, c.Agg); err != nil {
			return err
		}
		// The early set the Agg may already have answered from is the final one.
		if !r.trackSealed || len(r.tracked) != len(c.Portions) {
			return fmt.Errorf("request %s: the Agg was told early %d portions (sealed %v), the final set has %d", c.Request, len(r.tracked), r.trackSealed, len(c.Portions))
		}
		for _, ref := range c.Portions {
			if !r.tracked[ref.PortionID] {
				return fmt.Errorf("request %s: final portion %d was not told to the Agg early", c.Request, ref.PortionID)
			}
		}
		return s.checkCoverage(r, c)
	case AggFail:
		r := s.reqs[c.Request]
		if r == nil || r.ended || r.expected {
			return fmt.Errorf("agg fail for ended request %s", c.Request)
		}
		r.expected, r.failed = true, true
		if err := s.useAgg(r, c.Agg); err != nil {
			return err
		}
	case AggChanged:
		r := s.reqs[c.Request]
		if r == nil || r.ended {
			return fmt.Errorf("agg change for ended request %s", c.Request)
		}
		if s.aggAlive[c.From] || !s.aggAlive[c.To] {
			return fmt.Errorf("request %s moved from Agg %s (alive %v) to %s (alive %v)", c.Request, c.From, s.aggAlive[c.From], c.To, s.aggAlive[c.To])
		}
		if r.agg != "" && r.agg != c.From {
			return fmt.Errorf("request %s moved from %s, its Agg is %s", c.Request, c.From, r.agg)
		}
		// The partials died with the old Agg: the request is driven again.
		r.agg, r.expected, r.failed = c.To, false, false
		r.tracked, r.trackSealed = nil, false
	case Reply:
		r := s.reqs[c.Request]
		if r == nil {
			return fmt.Errorf("reply to unknown request %s", c.Request)
		}
		if r.ended {
			return fmt.Errorf("request %s answered twice (%s: %s)", c.Request, c.Kind, c.Text)
		}
		if s.now > r.req.Deadline && !(r.late && s.arrived == c.Request) {
			return fmt.Errorf("request %s answered %s after its deadline", c.Request, time.Duration(s.now-r.req.Deadline))
		}
		// Seed: status "unknown" from a primary indicates a bug.
		if c.Kind == ReplyTimeout && strings.HasPrefix(c.Text, "Request timed out, [rc=rc-1;status=\"unknown\"") {
			return fmt.Errorf("request %s: the primary reports its own status unknown: %s", c.Request, c.Text)
		}
		if r.late && s.arrived == c.Request && c.Kind == ReplyTimeout &&
			!strings.Contains(c.Text, `status="received too late";afterDeadline=`) {
			return fmt.Errorf("late request %s: timeout text %q does not say it arrived late", c.Request, c.Text)
		}
		if c.Kind == ReplyRateLimited {
			if s.arrived != c.Request && s.refused != c.Request {
				return fmt.Errorf("request %s refused %q outside its admission or a DAP's refusal", c.Request, c.Text)
			}
			// Within the seed's clamp (services/retryafter: min 1 s, max 300 s by default).
			if c.Limit == "" || c.RetryAfter < 1 || c.RetryAfter > int(retryafter.DefaultMax/time.Second) {
				return fmt.Errorf("request %s refused without a limit or a sane Retry-After: %+v", c.Request, c)
			}
		}
		if c.Kind == ReplyInternal || strings.HasPrefix(c.Text, "Request refused by ") {
			if r.failed {
				// The Agg answers with the DAP's error it was told of (review4).
				return fmt.Errorf("request %s answered %s %q after its AggFail: the Agg answers it", c.Request, c.Kind, c.Text)
			}
			if s.refusal != c.Request || s.refusalForged {
				return fmt.Errorf("request %s answered %s %q outside a genuine refusal of it", c.Request, c.Kind, c.Text)
			}
		}
		if s.refusal == c.Request && c.Kind != ReplyBadRequest && c.Kind != ReplyInternal {
			return fmt.Errorf("refused request %s answered %s", c.Request, c.Kind)
		}
		if c.Kind == ReplyCancelled && s.cancelled != c.Request {
			return fmt.Errorf("request %s answered cancelled by another event", c.Request)
		}
		if s.cancelled == c.Request && c.Kind != ReplyCancelled && c.Kind != ReplyTimeout {
			return fmt.Errorf("cancelled request %s answered %s", c.Request, c.Kind)
		}
		// Early only when a DAP reported the timeout (its clock may lead).
		if c.Kind == ReplyTimeout && s.now != r.req.Deadline && !s.dapTimedOut && !(r.late && s.arrived == c.Request) {
			return fmt.Errorf("request %s timed out at %s, deadline %s", c.Request, formatTS(s.now), formatTS(r.req.Deadline))
		}
		if c.Kind == ReplyTimeout && (len(c.Text) < 20 || c.Text[:19] != "Request timed out, ") {
			return fmt.Errorf("timeout text %q", c.Text)
		}
		noAgg := c.Text == errNoAgg || strings.HasSuffix(c.Text, "was lost and no other Agg is connected")
		if noAgg && (s.aggAlive["agg-1"] || s.aggAlive["agg-2"]) {
			return fmt.Errorf("request %s failed with %q though an Agg is alive", c.Request, c.Text)
		}
		if c.Kind == ReplyNoResources && !noAgg && len(r.sets) > 0 && r.kind != Unsharded {
			sel := r.req.Labels
			for _, combo := range sel.Combinations() {
				found := false
				for k := range r.sets {
					for _, d := range s.liveDAPs() {
						if keyOf(d.info.Labels) == k && combo.SubsetOf(d.info.Labels) {
							found = true
						}
					}
				}
				if !found {
					goto ok
				}
			}
			return fmt.Errorf("request %s failed with %q though its label sets exist", c.Request, c.Text)
		ok:
		}
		r.ended, r.replied = true, true
	case RefusalNoted:
		if c.Request != s.refusal {
			return fmt.Errorf("refusal of %s noted for a refusal of %q", c.Request, s.refusal)
		}
		if c.Accepted && s.refusalForged {
			return fmt.Errorf("forged refusal of %s by %s accepted", c.Request, c.By)
		}
		if c.Forwarded {
			return fmt.Errorf("refusal of %s by %s forwarded by an RC that relays nothing", c.Request, c.By)
		}
	case ForwardRefusal:
		return fmt.Errorf("refusal of %s forwarded to %s by an RC that relays nothing", c.Refused.Request, c.RC)
	case RetryNoted:
		r := s.reqs[c.Request]
		r.retries++
		if r.retries > s.maxRetry {
			return fmt.Errorf("request %s retried %d times, max %d", c.Request, r.retries, s.maxRetry)
		}
	}
	return nil
}

// checkPlanned: a request just admitted is planned over exactly the label
// sets the selector accepts that have a DAP or lost their last one within
// the retention: none is left out (a silently partial answer), none past
// its retention holds the request.
func (s *sim) checkPlanned() error {
	r, sr := s.c.requests[s.arrived], s.reqs[s.arrived]
	if r == nil || sr == nil || sr.kind == Unsharded {
		return nil
	}
	got := map[labelKey]bool{}
	for _, ls := range r.sets {
		got[ls.group.key] = true
	}
	if len(got) != len(sr.sets) {
		return fmt.Errorf("request %s planned over %v, want %v", r.ID, got, sr.sets)
	}
	for k := range sr.sets {
		if !got[k] {
			return fmt.Errorf("request %s planned over %v, want %v", r.ID, got, sr.sets)
		}
	}
	s.waits.planned += len(sr.absent)
	return nil
}

// checkAdmitted: a request just admitted waits in a queue within its
// limits (or waits for nothing).
func (s *sim) checkAdmitted() error {
	r := s.c.requests[s.arrived]
	if r == nil || r.queued == 0 {
		return nil
	}
	if m := s.c.cfg.MaxQueued; m > 0 && s.c.stats.QueueLength > m {
		return fmt.Errorf("request %s admitted with %d items queued, limit %d", r.ID, s.c.stats.QueueLength, m)
	}
	if m := s.c.cfg.MaxQueuedPerCaller; m > 0 && s.c.queuedFor(r.Caller) > m {
		return fmt.Errorf("request %s admitted with %d items queued for caller %q, limit %d", r.ID, s.c.queuedFor(r.Caller), r.Caller, m)
	}
	n := 0
	for _, q := range s.c.requests {
		if q.Caller == r.Caller {
			n += q.queued
		}
	}
	if n != s.c.queuedFor(r.Caller) {
		return fmt.Errorf("caller %q: %d items queued, counted %d", r.Caller, n, s.c.queuedFor(r.Caller))
	}
	return nil
}

// checkStopped: a request the RC answered in this step has every DAP that
// still runs one of its portions told to stop, and its Agg told to drop it
// if anything was dispatched.
func (s *sim) checkStopped(out []Command) error {
	aggDropped := map[string]bool{}
	replied := map[string]bool{}
	for _, cmd := range out {
		switch c := cmd.(type) {
		case CancelAgg:
			aggDropped[c.Request] = true
		case Reply:
			replied[c.Request] = true
		}
	}
	for id := range replied {
		r := s.reqs[id]
		if aggDropped[id] && !r.dispatched || !aggDropped[id] && r.dispatched && s.aggAlive[r.agg] {
			return fmt.Errorf("request %s answered by the RC: dispatched %v, agg told to drop %v", id, r.dispatched, aggDropped[id])
		}
		for _, did := range s.dapOrder {
			d := s.daps[did]
			if d.lost {
				continue
			}
			for _, p := range d.inflight {
				if p.d.Portion.Request == id && !r.told[did] {
					return fmt.Errorf("request %s answered by the RC, DAP %s still runs portion %d untold", id, did, p.d.Portion.ID)
				}
			}
		}
	}
	return nil
}

// checkCoverage: the portions the Agg merges cover each label set's range
// exactly once, at one vintage, from the current attempt, all succeeded.
func (s *sim) checkCoverage(r *simRequest, c AggExpect) error {
	byLS := map[labelKey][]Dispatch{}
	for _, ref := range c.Portions {
		d, ok := s.portions[ref.PortionID]
		if !ok {
			return fmt.Errorf("agg told to expect unknown portion %d", ref.PortionID)
		}
		if !s.okDone[ref.PortionID] {
			return fmt.Errorf("agg told to expect portion %d that did not succeed", ref.PortionID)
		}
		k := keyOf(d.Portion.Labels)
		if r.kind == Unsharded {
			k = ""
		}
		byLS[k] = append(byLS[k], d)
	}
	if len(byLS) == 0 {
		return fmt.Errorf("request %s: agg told to expect nothing", r.req.ID)
	}
	// Every label set planned is in the answer (checkPlanned).
	if r.kind != Unsharded {
		for k := range r.sets {
			if len(byLS[k]) == 0 {
				return fmt.Errorf("request %s: the Agg merges no portion of label set %s", r.req.ID, k)
			}
		}
	}
	for k, ds := range byLS {
		sort.Slice(ds, func(i, j int) bool { return ds[i].Portion.Range.Start < ds[j].Portion.Range.Start })
		want := [2]int64{MinTS, MaxTS}
		if r.kind == TimePartitioned {
			want = [2]int64{r.req.Range.Start, r.req.Range.End}
		}
		at := want[0]
		for _, d := range ds {
			if d.Portion.Range.Start != at {
				return fmt.Errorf("request %s label set %s: gap or overlap at %s (portion starts %s)", r.req.ID, k, formatTS(at), formatTS(d.Portion.Range.Start))
			}
			at = d.Portion.Range.End
			if d.Portion.Vintage != ds[0].Portion.Vintage {
				return fmt.Errorf("request %s label set %s: mixed vintages %d and %d", r.req.ID, k, ds[0].Portion.Vintage, d.Portion.Vintage)
			}
			if d.Portion.Attempt != r.attempt[k] {
				return fmt.Errorf("request %s label set %s: portion of attempt %d, current %d", r.req.ID, k, d.Portion.Attempt, r.attempt[k])
			}
		}
		if at != want[1] {
			return fmt.Errorf("request %s label set %s: covered up to %s, want %s", r.req.ID, k, formatTS(at), formatTS(want[1]))
		}
	}
	return nil
}

// refFeasible is the reference predicate, written from the seed's words,
// independent of the queue index: can DAP d take queued item it now?
func (s *sim) refFeasible(d *dap, it *item, ignoreSlot bool) bool {
	r := it.req
	if !d.Available || d.pausedUntil > s.c.now || r.timingOut {
		return false
	}
	if !ignoreSlot && len(d.running) >= d.Concurrency {
		return false
	}
	if _, ok := d.Tables[r.Table]; !ok {
		return false
	}
	if r.kind != Unsharded && d.key != it.ls.group.key {
		return false
	}
	if r.kind == TimePartitioned && !(d.Purview.Start < it.rng.End && it.rng.Start < d.Purview.End) {
		return false
	}
	for _, rp := range d.running {
		if rp.request == r.ID && rp.key == it.ls.group.key && rp.attempt < it.ls.attempt {
			return false
		}
	}
	if it.ls.locked {
		return d.Vintage == it.ls.vintage
	}
	return d.Vintage == s.topVintage(r, it.ls)
}

// topVintage is the highest vintage among the DAPs of the item's label set
// (for unsharded tables, among the table's DAPs), memoised per step.
func (s *sim) topVintage(r *request, ls *labelSet) uint64 {
	k := string(ls.group.key)
	if r.kind == Unsharded {
		k = "table:" + r.Table
	}
	if v, ok := s.tops[k]; ok {
		return v
	}
	var top uint64
	for _, o := range s.c.fleet.byID {
		same := o.key == ls.group.key
		if r.kind == Unsharded {
			_, same = o.Tables[r.Table]
		}
		if same {
			top = max(top, o.Vintage)
		}
	}
	s.tops[k] = top
	return top
}

type queuedItem struct {
	it  *item
	age ageKey
}

func (s *sim) queuedSnapshot() []queuedItem {
	var out []queuedItem
	for _, id := range s.reqOrder {
		r := s.c.requests[id]
		if r == nil {
			continue
		}
		for _, ls := range r.sets {
			for _, it := range ls.items {
				// A copy: the core reuses an item once it is unqueued.
				cp := *it
				out = append(out, queuedItem{&cp, it.ageKey()})
			}
		}
	}
	return out
}

// checkQuiescent: after a step, no ready DAP can serve any queued item (the
// core dequeues on every registration, status change and completion).
func (s *sim) checkQuiescent() error {
	items := s.queuedSnapshot()
	for _, id := range s.dapOrder {
		d := s.c.fleet.byID[id]
		if d == nil {
			continue
		}
		explained := false
		for _, q := range items {
			if s.refFeasible(d, q.it, false) {
				return fmt.Errorf("DAP %s could serve queued item of %s [%s,%s) but was not given it", id, q.it.req.ID, formatTS(q.it.rng.Start), formatTS(q.it.rng.End))
			}
			// The explanation of the DAP's oldest candidate item (one per DAP
			// and step keeps 2,000 seeds affordable).
			if !explained && s.c.candidate(d, q.it) {
				explained = true
				if err := s.checkExplained(d, q.it); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// checkExplained: placement is asked once. The chain that refuses a DAP an
// item (feasible.go) names why in the seed's words, as a timeout message
// would: a candidate DAP left idle has a reason that is not one of the
// "it became feasible only as the request timed out" kind.
func (s *sim) checkExplained(d *dap, it *item) error {
	if s.c.feasible(d, it) {
		return fmt.Errorf("the chain accepts DAP %s for a queued item of %s [%s,%s) after dequeue", d.ID, it.req.ID, formatTS(it.rng.Start), formatTS(it.rng.End))
	}
	listed, reasons := s.c.explain(d, it)
	if listed != s.c.candidate(d, it) {
		return fmt.Errorf("DAP %s listed %v, candidate %v", d.ID, listed, s.c.candidate(d, it))
	}
	if !listed {
		return nil
	}
	for _, why := range reasons {
		switch why {
		case ReasonTimedOutResponse, ReasonTimedOutDequeue, ReasonUnknown, "":
			return fmt.Errorf("DAP %s refused an item of %s [%s,%s) with no reason from the chain: %q", d.ID, it.req.ID, formatTS(it.rng.Start), formatTS(it.rng.End), reasons)
		}
	}
	return nil
}

// checkOrder: a DAP given a queued item was not passed over for an older
// one it could serve that is still queued.
func (s *sim) checkOrder(out []Command, before []queuedItem) error {
	// By seq: an item is enqueued once. A dispatch that takes one end of an
	// item leaves it queued with the rest of its range (shrink): what still
	// waits is the item as it is now.
	still := map[uint64]*item{}
	for _, q := range s.queuedSnapshot() {
		still[q.it.seq] = q.it
	}
	for _, cmd := range out {
		disp, ok := cmd.(*Dispatch)
		if !ok {
			continue
		}
		d := s.c.fleet.byID[disp.DAP]
		if d == nil {
			continue
		}
		for _, q := range before {
			now := still[q.it.seq]
			if now != nil && q.it.age < disp.QueuedAt && s.refFeasible(d, now, true) {
				return fmt.Errorf("DAP %s was given an item queued at %s while an older one (%s [%s,%s)) it can serve waits",
					d.ID, formatTS(disp.QueuedAt), now.req.ID, formatTS(now.rng.Start), formatTS(now.rng.End))
			}
		}
	}
	return nil
}

// refuseOne: a DAP refuses a dispatch it holds, or the request's Agg refuses
// a message of it (genuine), or someone publishes a refusal that names what
// the core did not send: another request, another Agg, another DAP, an
// attempt never dispatched (forged). A forged one must change nothing but
// the core's count of dropped refusals.
func (s *sim) refuseOne() error {
	internal := s.rng.IntN(2) == 0
	var live []*simRequest
	for _, id := range s.reqOrder {
		if r := s.reqs[id]; !r.ended && r.agg != "" {
			live = append(live, r)
		}
	}
	var holders []*simDAP
	for _, id := range s.dapOrder {
		if d := s.daps[id]; !d.lost && len(d.inflight) > 0 {
			holders = append(holders, d)
		}
	}
	switch x := s.rng.IntN(6); {
	case x == 0 && len(holders) > 0: // genuine: a DAP refuses a dispatch it holds
		d := holders[s.rng.IntN(len(holders))]
		i := s.rng.IntN(len(d.inflight))
		p := d.inflight[i]
		d.inflight = append(d.inflight[:i], d.inflight[i+1:]...) // it runs nothing of it
		return s.refuse(Refused{At: s.now, Request: p.d.Portion.Request, DAP: d.info.ID, Portion: p.d.Portion.ID,
			Attempt: p.d.Portion.Attempt, Internal: internal, Reason: "sim: dispatch does not decode"}, false)
	case x == 1 && len(live) > 0: // genuine: the request's Agg refuses
		r := live[s.rng.IntN(len(live))]
		cr := s.c.requests[r.req.ID]
		// Not after an AggFail: the Agg answers with the DAP's error then.
		want := cr != nil && !cr.timingOut && !cr.errored
		before := s.c.stats.RefusalsAccepted
		if err := s.refuse(Refused{At: s.now, Request: r.req.ID, Agg: r.agg, Internal: internal, Reason: "sim: expectation does not decode"}, false); err != nil {
			return err
		}
		if want && s.c.stats.RefusalsAccepted != before+1 {
			return fmt.Errorf("request %s: its Agg %s's refusal was dropped", r.req.ID, r.agg)
		}
		return nil
	case x == 2 && len(live) > 0: // forged: another Agg names a live request
		r := live[s.rng.IntN(len(live))]
		other := map[string]string{"agg-1": "agg-2", "agg-2": "agg-1"}[r.agg]
		return s.refuse(Refused{At: s.now, Request: r.req.ID, Agg: other, Internal: internal, Reason: "forged"}, true)
	case x == 3 && len(holders) > 0: // forged: another DAP names a dispatch
		d := holders[s.rng.IntN(len(holders))]
		p := d.inflight[s.rng.IntN(len(d.inflight))]
		return s.refuse(Refused{At: s.now, Request: p.d.Portion.Request, DAP: "dap-forged", Portion: p.d.Portion.ID,
			Attempt: p.d.Portion.Attempt, Internal: internal, Reason: "forged"}, true)
	case x == 4 && len(holders) > 0: // forged: the right DAP, an attempt never dispatched
		d := holders[s.rng.IntN(len(holders))]
		p := d.inflight[s.rng.IntN(len(d.inflight))]
		return s.refuse(Refused{At: s.now, Request: p.d.Portion.Request, DAP: d.info.ID, Portion: p.d.Portion.ID,
			Attempt: p.d.Portion.Attempt + 1 + uint32(s.rng.IntN(3)), Internal: internal, Reason: "forged"}, true)
	case x == 5 && len(holders) > 0 && s.rng.IntN(2) == 0: // forged: the dispatch exactly, "forwarded" by an RC it never went through
		d := holders[s.rng.IntN(len(holders))]
		p := d.inflight[s.rng.IntN(len(d.inflight))]
		return s.refuse(Refused{At: s.now, Request: p.d.Portion.Request, DAP: d.info.ID, Portion: p.d.Portion.ID,
			Attempt: p.d.Portion.Attempt, Via: "rc-forged", Internal: internal, Reason: "forged"}, true)
	}
	// Forged: a request the core never held (or one that ended).
	id := fmt.Sprintf("q-unknown-%d", s.rng.IntN(3))
	if len(s.reqOrder) > 0 && s.rng.IntN(2) == 0 {
		if r := s.reqs[s.reqOrder[s.rng.IntN(len(s.reqOrder))]]; r.ended {
			id = r.req.ID
		}
	}
	if s.c.requests[id] != nil {
		return s.step(Tick{At: s.now})
	}
	if s.rng.IntN(2) == 0 {
		return s.refuse(Refused{At: s.now, Request: id, Agg: "agg-1", Reason: "forged"}, true)
	}
	return s.refuse(Refused{At: s.now, Request: id, DAP: "dap-forged", Portion: 1 + PortionID(s.rng.IntN(100)), Reason: "forged"}, true)
}

// refuse steps a refusal; a forged one must change nothing but the count of
// dropped refusals, and command nothing but its note.
func (s *sim) refuse(e Refused, forged bool) error {
	s.refusal, s.refusalForged = e.Request, forged
	before := s.c.stats
	queued := s.queuedSnapshot()
	if err := s.step(e); err != nil {
		return err
	}
	if !forged {
		return nil
	}
	after := s.c.stats
	before.RefusalsDropped++
	before.Events++
	if after != before {
		return fmt.Errorf("forged refusal %+v changed the core's counters: %+v, want %+v", e, after, before)
	}
	if q := s.queuedSnapshot(); len(q) != len(queued) {
		return fmt.Errorf("forged refusal %+v changed the queue: %d items, was %d", e, len(q), len(queued))
	}
	return nil
}
