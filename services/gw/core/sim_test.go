package core

import (
	"container/heap"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sg-project/sg/messages"
	"github.com/sg-project/sg/services/stall"
	"github.com/sg-project/sg/subjects"
)

// The deterministic simulation: several GWs sharing a request log, several
// RCs, random crashes, clean stops, restarts, log write failures (some of
// which landed all the same) and conflicts, slow, lost and duplicated
// answers, cancels; re-drives that meet an earlier drive's chunked answer
// under way, which sometimes breaks (an earlier drive's break must never
// answer); callers that reassemble chunks or read streams, with
// their answers passed on as they come, broken on the way and failing to
// publish (sim_relay_test.go); the invariants are checked after every step.
//
//	SIM_SEEDS=2000 go test ./services/gw/... -run Simulation   # many seeds
//	SIM_SEED=17 go test ./services/gw/core -run Simulation -v # replay one
func TestSimulation(t *testing.T) {
	if s := os.Getenv("SIM_SEED"); s != "" {
		seed, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("SIM_SEED=%q: %v", s, err)
		}
		if err := simulate(seed, t.Logf); err != nil {
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
	var total simTotals
	for seed := uint64(1); seed <= uint64(n); seed++ {
		s, err := run(seed, quiet)
		if err != nil {
			t.Errorf("seed %d: %v\n  replay: SIM_SEED=%d go test ./services/gw/core -run Simulation -v", seed, err, seed)
			if failed++; failed >= 5 {
				t.FailNow()
			}
			continue
		}
		total.add(s.totals)
	}
	t.Logf("%d seeds: %+v", n, total)
	// Answers passed on as they come must keep being driven (a core that
	// reassembled every answer would pass every check above).
	if n >= 50 && (total.Stalls == 0 || total.LongStalls == 0) {
		t.Errorf("%d seeds stalled too few GWs: %+v", n, total)
	}
	if n >= 50 && (total.Transfers == total.TransfersChunked || total.TransfersChunked == 0 || total.TransfersAdopted == 0 || total.TransfersWhole == 0 || total.TransfersBroken == 0 ||
		total.PublishFailures == 0 || total.PacedStarted == 0 || total.PacedResent == 0) {
		t.Errorf("%d seeds drove too few answers passed on as they come: %+v", n, total)
	}
	// Re-drives must meet chunked transfers of earlier drives under way, and
	// some of those must still answer (a core that let them go at the
	// re-drive would pass every check above): rarer, so over more seeds.
	if n >= 200 && (total.RedrivesInFlight == 0 || total.EarlierDriveAnswers["rc gone"] == 0) {
		t.Errorf("%d seeds drove too few requests again with an earlier drive's transfer under way: %+v", n, total)
	}
	// And some earlier drives' transfers must break where the request was
	// driven again, and be dropped there: answered's check catches a core
	// that answers such a break only if some come.
	if n >= 200 && (total.EarlierBreaks == 0 || total.EarlierBreaksDropped == 0) {
		t.Errorf("%d seeds broke too few earlier drives' transfers after a re-drive: %+v", n, total)
	}
}

const (
	t0        = int64(1_700_000_000) * int64(time.Second)
	ms        = int64(time.Millisecond)
	margin    = 1000 * ms
	announce  = 100 * ms
	deadAfter = 1000 * ms
	logRetry  = 200 * ms
	grace     = 300 * ms
	maxLogLag = 50 * ms // a log write's result comes within this
)

type simTotals struct {
	Stalls, LongStalls                                                                                                       int // GW stalls; those longer than DeadAfter
	Requests, Answered, Refused, Adopted, Crashes, Stops, RCRestarts, LogFailures, Cancels, LostInWindow, NeverLogged        int
	AggTransfers, AggFaults, Transfers, TransfersChunked, TransfersAdopted, TransfersWhole, TransfersBroken, PublishFailures int
	StreamStarts, StreamStartsAgain, PacedStarted, PacedLost, PacedResent                                                    int
	// RedrivesInFlight: re-drives of a request with an earlier drive's
	// chunked transfer under way; EarlierDriveAnswers: answers that such a
	// transfer completed after the re-drive, by the re-drive's reason
	// (Submit.Why).
	RedrivesInFlight    int
	EarlierDriveAnswers map[string]int
	// EarlierBreaks: transfers of a drive broken after a later drive was
	// submitted (breakEarlier); EarlierBreaksDropped: those a GW dropped,
	// the drive not its current one (core.Dropped).
	EarlierBreaks, EarlierBreaksDropped int
}

func (a *simTotals) add(b simTotals) {
	a.Stalls += b.Stalls
	a.LongStalls += b.LongStalls
	a.Requests += b.Requests
	a.Answered += b.Answered
	a.Refused += b.Refused
	a.Adopted += b.Adopted
	a.Crashes += b.Crashes
	a.Stops += b.Stops
	a.RCRestarts += b.RCRestarts
	a.LogFailures += b.LogFailures
	a.Cancels += b.Cancels
	a.LostInWindow += b.LostInWindow
	a.NeverLogged += b.NeverLogged
	a.AggTransfers += b.AggTransfers
	a.AggFaults += b.AggFaults
	a.Transfers += b.Transfers
	a.TransfersChunked += b.TransfersChunked
	a.TransfersAdopted += b.TransfersAdopted
	a.TransfersWhole += b.TransfersWhole
	a.TransfersBroken += b.TransfersBroken
	a.PublishFailures += b.PublishFailures
	a.StreamStarts += b.StreamStarts
	a.PacedStarted += b.PacedStarted
	a.StreamStartsAgain += b.StreamStartsAgain
	a.PacedLost += b.PacedLost
	a.PacedResent += b.PacedResent
	a.RedrivesInFlight += b.RedrivesInFlight
	a.EarlierBreaks += b.EarlierBreaks
	a.EarlierBreaksDropped += b.EarlierBreaksDropped
	for why, n := range b.EarlierDriveAnswers {
		if a.EarlierDriveAnswers == nil {
			a.EarlierDriveAnswers = map[string]int{}
		}
		a.EarlierDriveAnswers[why] += n
	}
}

// slot is one subject of the simulated request log.
type slot struct {
	seq   uint64 // 0: empty (never written, or purged)
	entry messages.LogEntry
}

type simGW struct {
	id          string
	c           *Core // nil: down
	incarnation int64
	stopping    bool
	abortAt     int64
	aborted     bool // Abort was stepped: it passes nothing more on as it comes

	// A stall of the GW's process (stallGW): while stalled it is stepped
	// with nothing; what comes for it but the RCs' announcements (the RCs,
	// as in `sg run`, were stalled alike) waits in deferred.
	stalled  bool
	deferred []Event
	// Its Ticks' lateness, measured as the shell does; lastTick: its last
	// Tick; lateSum: every Late it was told. heard: when each RC's
	// announcement last reached it, and lateSum then.
	watch    stall.Watch
	lastTick int64
	lateSum  int64
	heard    map[string][2]int64
}

type simRC struct {
	id        string
	up        bool
	startedAt int64
	draining  bool
}

// simReq is the simulation's truth about one client request.
type simReq struct {
	id, clientID, caller string
	gw                   string
	subject              string // its request log subject (the first GW's: an adopter keeps it)
	gwInc                int64  // the incarnation that took it
	crashed              bool   // that incarnation crashed (without a log: lost with it)
	arrived, deadline    int64
	answers              int
	refused              bool
	loggedEver           bool // its entry was written to the log
	disturbed            bool // a crash, stop, log failure or adoption touched it: no lateness bound
	purged               bool // its answer was sent and its entry purged
	lostWindow           bool // `answered` landed but its GW died before publishing
	cancelled            bool
	mode                 int      // what its caller accepts: modeWhole, modeChunks, modeStream
	bodies               [][]byte // the chunked answers its drives' Aggs sent
	// sent: its drives' Aggs' chunked transfers, by chunk stream id: the
	// chunks sent so far and in all; inFlight: those sent in part when it
	// was driven again (redriven), with the re-drive's reason.
	sent     map[string]*[2]int
	inFlight map[string]string
	// lastDrive: the latest of its drives submitted, by any GW: its
	// earlier drives' transfers break now and then (breakEarlier).
	lastDrive uint32
	tr        *transfer // its answer passed on as it comes, as its caller saw it
}

type delivery struct {
	at  int64
	seq uint64
	fn  func()
}

type deliveries []delivery

func (h deliveries) Len() int { return len(h) }
func (h deliveries) Less(i, j int) bool {
	if h[i].at != h[j].at {
		return h[i].at < h[j].at
	}
	return h[i].seq < h[j].seq
}
func (h deliveries) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *deliveries) Push(x any)   { *h = append(*h, x.(delivery)) }
func (h *deliveries) Pop() any {
	old := *h
	d := old[len(old)-1]
	*h = old[:len(old)-1]
	return d
}

type sim struct {
	rng      *rand.Rand
	brk      *rand.Rand // breakEarlier's draws
	now      int64
	s        subjects.Subjects
	log      map[string]*slot
	logSeq   uint64
	gws      []*simGW
	rcs      []*simRC
	reqs     map[string]*simReq
	purged   []*simReq // the requests whose entries were purged
	order    []string
	queue    deliveries
	qseq     uint64
	nextID   int
	cancels  map[string]bool // drive ids cancelled at the RCs
	logf     func(string, ...any)
	totals   simTotals
	nextTick int64
	nextScan int64
	chaos    bool
	pFail    float64 // probability a log write fails
	logged   bool    // the GWs keep a request log (most seeds)

	pSpoil      float64           // probability an Agg's transfer has a fault
	pRelayFail  float64           // probability a publish to the caller fails
	maxGap      int               // ms between the messages of an Agg's transfer, at most
	createAfter int64             // Config.CreateAfter of every GW
	bodies      map[string][]byte // what each Agg transfer (by stream id) carries whole
	nextStream  int
	// paced: the answer streams of Aggs the GW paces (sim_relay.go), by
	// stream id; startSeen: the streams a StartStream named, and when the
	// last one did.
	paced     map[string]*pacedStream
	startSeen map[string]int64
}

func simulate(seed uint64, logf func(string, ...any)) error {
	_, err := run(seed, logf)
	return err
}

func run(seed uint64, logf func(string, ...any)) (_ *sim, err error) {
	defer func() {
		// A check that fails inside a scheduled delivery panics: report it
		// as this seed's failure.
		if r := recover(); r != nil {
			err = fmt.Errorf("%v", r)
		}
	}()
	s := &sim{rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b9)), brk: rand.New(rand.NewPCG(seed, seed^0x85ebca6b)), now: t0, s: subjects.Default(), log: map[string]*slot{},
		reqs: map[string]*simReq{}, cancels: map[string]bool{}, logf: logf, chaos: true, bodies: map[string][]byte{},
		paced: map[string]*pacedStream{}, startSeen: map[string]int64{}, totals: simTotals{EarlierDriveAnswers: map[string]int{}}}
	s.pFail = []float64{0, 0.02, 0.1, 0.3}[s.rng.IntN(4)]
	s.logged = s.rng.IntN(5) != 0
	s.pSpoil = []float64{0, 0.1, 0.3}[s.rng.IntN(3)]
	s.pRelayFail = []float64{0, 0.01, 0.05, 0.2}[s.rng.IntN(4)]
	s.maxGap = []int{30, 150}[s.rng.IntN(2)]
	// How long a request runs before its entry is written: with the first
	// drive, or later, so that some are answered (or cancelled, or stopped)
	// first and some not.
	s.createAfter = []int64{0, 5 * ms, 50 * ms, 300 * ms}[s.rng.IntN(4)]
	for i := range 1 + s.rng.IntN(3) {
		s.gws = append(s.gws, &simGW{id: fmt.Sprintf("gw-%d", i)})
	}
	for i := range 1 + s.rng.IntN(3) {
		s.rcs = append(s.rcs, &simRC{id: fmt.Sprintf("rc-%d", i), up: true, startedAt: t0 + int64(i)})
	}
	for _, g := range s.gws {
		s.startGW(g)
	}
	s.nextTick, s.nextScan = s.now, s.now
	steps := 300 + s.rng.IntN(700)
	for i := 0; i < steps; i++ {
		if err := s.step(); err != nil {
			return s, fmt.Errorf("step %d (t=+%s): %w", i, time.Duration(s.now-t0), err)
		}
	}
	// Calm: every service back up, no more chaos or requests; everything
	// must settle.
	s.chaos = false
	s.pFail = 0
	s.pRelayFail = 0
	for _, rc := range s.rcs {
		if !rc.up {
			s.restartRC(rc)
		}
	}
	for _, g := range s.gws {
		if g.c == nil && !g.stopping {
			s.startGW(g)
		}
	}
	end := s.now + 10*time.Second.Nanoseconds() + 3*deadAfter
	for s.now < end {
		if err := s.advance(); err != nil {
			return s, fmt.Errorf("calm (t=+%s): %w", time.Duration(s.now-t0), err)
		}
		for _, g := range s.gws {
			if g.c == nil && !g.stopping {
				s.startGW(g)
			}
		}
	}
	return s, s.final()
}

func (s *sim) logfNow(format string, args ...any) {
	s.logf("+%-8s "+format, append([]any{time.Duration(s.now - t0)}, args...)...)
}

func (s *sim) schedule(after int64, fn func()) {
	s.qseq++
	heap.Push(&s.queue, delivery{at: s.now + after, seq: s.qseq, fn: fn})
}

func (s *sim) startGW(g *simGW) {
	g.incarnation = s.now + 1 // distinct from any earlier one
	for _, o := range s.gws {
		if o != g && o.incarnation == g.incarnation {
			g.incarnation++
		}
	}
	g.stopping, g.aborted = false, false
	g.stalled, g.deferred = false, nil
	g.watch, g.lastTick, g.lateSum, g.heard = stall.Watch{Period: time.Duration(announce)}, 0, 0, map[string][2]int64{}
	g.c = New(Config{Self: g.id, Incarnation: g.incarnation, Start: s.now, TimeoutMargin: margin, StartupWait: 300 * ms,
		AnnounceEvery: announce, DeadAfter: deadAfter, MaxInFlight: 40, MaxInFlightPerCaller: 15, Logged: s.logged,
		MaxPayload: simMaxPayload, MaxAnswerBytes: simMaxAnswer,
		LogRetry: logRetry, CreateAfter: s.createAfter, LogSubject: s.s.RequestLogEntry, AnswerSubject: s.s.GWAnswer})
	s.logfNow("%s starts (incarnation %d)", g.id, g.incarnation)
}

// step: one random thing happens.
func (s *sim) step() error {
	x := s.rng.Float64()
	switch {
	case x < 0.30:
		return s.arrive()
	case x < 0.33:
		return s.cancel()
	case x < 0.36 && s.chaos:
		return s.chaosEvent()
	default:
		return s.advance()
	}
}

func (s *sim) liveGWs() []*simGW {
	var out []*simGW
	for _, g := range s.gws {
		if g.c != nil && !g.stopping && !g.stalled {
			out = append(out, g)
		}
	}
	return out
}

func (s *sim) arrive() error {
	live := s.liveGWs()
	if len(live) == 0 {
		return s.advance()
	}
	g := live[s.rng.IntN(len(live))]
	s.nextID++
	id := fmt.Sprintf("r%04d", s.nextID)
	caller := fmt.Sprintf("_INBOX.c%d", s.rng.IntN(4))
	// Client ids repeat: they are labels.
	clientID := fmt.Sprintf("k%d", s.rng.IntN(8))
	timeout := int64(200+s.rng.IntN(2800)) * ms
	rq := &simReq{id: id, clientID: clientID, caller: caller, gw: g.id, gwInc: g.incarnation, arrived: s.now, deadline: s.now + timeout,
		mode: []int{modeWhole, modeChunks, modeStream, modeChunks | modeStream}[s.rng.IntN(4)], subject: s.s.RequestLogEntry(g.id, id)}
	s.reqs[id] = rq
	s.order = append(s.order, id)
	s.totals.Requests++
	sub := messages.RCSubmission{V: messages.RCVersion, GWID: g.id, Header: messages.RequestHeader{API: subjects.APIGetData},
		ReplyTo: s.s.GWAnswer(g.id, id), Content: messages.ContentMsgpack, Deadline: rq.deadline, ReceivedAt: s.now,
		Stream: rq.mode&modeStream != 0}
	return s.stepGW(g, Arrived{At: s.now, Req: Request{ID: id, ClientID: clientID, Caller: caller, Reply: caller + "." + id,
		API: subjects.APIGetData, Content: messages.ContentMsgpack, Chunks: rq.mode&modeChunks != 0, Sub: sub, Received: s.now,
		Deadline: rq.deadline}})
}

func (s *sim) cancel() error {
	live := s.liveGWs()
	if len(live) == 0 || len(s.order) == 0 {
		return s.advance()
	}
	rq := s.reqs[s.order[len(s.order)-1-s.rng.IntN(min(len(s.order), 10))]]
	s.totals.Cancels++
	// Every GW sees a cancel (the endpoint has no queue group).
	for _, g := range live {
		if err := s.stepGW(g, Cancel{At: s.now, Caller: rq.caller, ClientID: rq.clientID, Reply: rq.caller + ".cancel"}); err != nil {
			return err
		}
	}
	return nil
}

func (s *sim) chaosEvent() error {
	switch x := s.rng.IntN(12); {
	case x >= 10: // a GW's process stalls
		g := s.gws[s.rng.IntN(len(s.gws))]
		if g.c != nil && !g.stalled {
			s.stallGW(g, int64(20+s.rng.IntN(3000))*ms)
		}
	case x < 3: // a GW crashes
		g := s.gws[s.rng.IntN(len(s.gws))]
		if g.c == nil {
			return nil
		}
		s.crashGW(g)
		s.schedule(int64(50+s.rng.IntN(1500))*ms, func() {
			if g.c == nil && !g.stopping {
				s.startGW(g)
			}
		})
	case x < 5: // a GW stops cleanly
		g := s.gws[s.rng.IntN(len(s.gws))]
		if g.c == nil || g.stopping {
			return nil
		}
		s.totals.Stops++
		g.stopping = true
		g.abortAt = s.now + grace
		s.logfNow("%s stops", g.id)
		for _, sl := range s.log {
			if sl.seq != 0 && sl.entry.GWID == g.id && sl.entry.GWStarted == g.incarnation {
				if rq := s.reqs[sl.entry.RequestID]; rq != nil {
					rq.disturbed = true
				}
			}
		}
		if err := s.stepGW(g, Stop{At: s.now}); err != nil {
			return err
		}
		s.schedule(grace, func() {
			if g.c != nil && g.stopping {
				if err := s.stepGW(g, Abort{At: s.now}); err != nil {
					panic(err)
				}
			}
		})
	case x < 9: // an RC crashes or restarts
		rc := s.rcs[s.rng.IntN(len(s.rcs))]
		s.totals.RCRestarts++
		if rc.up && s.rng.IntN(2) == 0 {
			rc.up = false
			s.logfNow("%s crashes", rc.id)
			s.schedule(int64(100+s.rng.IntN(2000))*ms, func() { s.restartRC(rc) })
		} else if rc.up {
			s.restartRC(rc)
		}
	default: // an RC drains, then restarts
		rc := s.rcs[s.rng.IntN(len(s.rcs))]
		if rc.up {
			rc.draining = true
			s.schedule(int64(100+s.rng.IntN(500))*ms, func() { s.restartRC(rc) })
		}
	}
	return nil
}

func (s *sim) restartRC(rc *simRC) {
	rc.up, rc.draining = true, false
	rc.startedAt = s.now + 7
	s.logfNow("%s starts (incarnation %d)", rc.id, rc.startedAt)
}

func (s *sim) crashGW(g *simGW) {
	s.totals.Crashes++
	s.logfNow("%s crashes", g.id)
	// A request whose `answered` landed but whose answer was not sent is
	// lost in the window the README names.
	for id, sl := range s.log {
		if sl.seq != 0 && sl.entry.State == messages.LogAnswered && sl.entry.GWID == g.id && sl.entry.GWStarted == g.incarnation {
			if rq := s.reqs[sl.entry.RequestID]; rq != nil && rq.answers == 0 && !rq.lostWindow {
				rq.lostWindow = true
				s.totals.LostInWindow++
				_ = id
			}
		}
	}
	// Its requests are adopted later: no lateness bound for them.
	for _, sl := range s.log {
		if sl.seq != 0 && sl.entry.GWID == g.id && sl.entry.GWStarted == g.incarnation {
			if rq := s.reqs[sl.entry.RequestID]; rq != nil {
				rq.disturbed = true
			}
		}
	}
	for _, rq := range s.reqs {
		if rq.gw == g.id && rq.gwInc == g.incarnation && rq.answers == 0 {
			rq.crashed = true
		}
		if tr := rq.tr; tr != nil && tr.gw == g.id && tr.inc == g.incarnation && !tr.ended {
			tr.gone = true // cut: its caller's own timeout fires
		}
	}
	g.c = nil
	g.stopping = false
}

// advance moves time to the next thing that must happen and does it.
func (s *sim) advance() error {
	next := min(s.nextTick, s.nextScan)
	if len(s.queue) > 0 {
		next = min(next, s.queue[0].at)
	}
	for _, g := range s.gws {
		if g.c != nil && !g.stalled {
			if at, ok := g.c.NextDeadline(); ok {
				next = min(next, at)
			}
		}
	}
	if next > s.now {
		s.now = next
	}
	switch {
	case len(s.queue) > 0 && s.queue[0].at <= s.now:
		d := heap.Pop(&s.queue).(delivery)
		d.fn()
	case s.nextTick <= s.now:
		s.nextTick = s.now + announce
		for _, rc := range s.rcs {
			if !rc.up {
				continue
			}
			for _, g := range s.gws {
				if g.c != nil && !g.stalled {
					ev := RCAnnounced{At: s.now, RC: RCInfo{ID: rc.id, StartedAt: rc.startedAt, Draining: rc.draining, Period: announce}}
					g.heard[rc.id] = [2]int64{s.now, g.lateSum}
					if err := s.stepGW(g, ev); err != nil {
						return err
					}
				}
			}
		}
		for _, g := range s.gws {
			if g.c != nil && !g.stalled {
				if err := s.tickGW(g); err != nil {
					return err
				}
			}
		}
	case s.nextScan <= s.now:
		s.nextScan = s.now + 300*ms
		return s.sweep()
	default:
		for _, g := range s.gws {
			if g.c != nil && !g.stalled {
				if at, ok := g.c.NextDeadline(); ok && at <= s.now {
					if err := s.tickGW(g); err != nil {
						return err
					}
				}
			}
		}
	}
	return s.check()
}

// stallGW: g's process stalls for d (a stopped or starved process). Its
// RCs, as in `sg run`, are stalled alike: g hears no announcement meanwhile,
// nor after it before its first Tick, which comes d late. What else comes
// for it meanwhile is stepped, in order, when it wakes, before that Tick.
// Its requests come late by design (disturbed). Nothing new arrives at a
// stalled GW (its clients go elsewhere).
func (s *sim) stallGW(g *simGW, d int64) {
	s.totals.Stalls++
	if d > deadAfter {
		s.totals.LongStalls++
	}
	for _, rq := range s.reqs {
		if g.c.Holds(rq.id) {
			rq.disturbed = true
		}
	}
	g.stalled = true
	inc := g.incarnation
	s.logfNow("%s stalls for %s", g.id, time.Duration(d))
	s.schedule(d, func() {
		if g.c == nil || g.incarnation != inc || !g.stalled {
			return
		}
		g.stalled = false
		s.logfNow("%s wakes", g.id)
		before := g.lastTick
		for len(g.deferred) > 0 {
			ev := restamp(g.deferred[0], s.now)
			g.deferred = g.deferred[1:]
			if err := s.stepGW(g, ev); err != nil {
				panic(err)
			}
			if g.c == nil || g.incarnation != inc {
				return
			}
		}
		if err := s.tickGW(g); err != nil {
			panic(err)
		}
		// Not lost for the GW's own stall: an RC the GW had heard within
		// two periods before its last Tick before the stall is silent at
		// most three periods of its running time now.
		if g.c == nil || g.incarnation != inc || before == 0 {
			return
		}
		for id, h := range g.heard {
			if h[0] >= before-2*announce && !slices.ContainsFunc(g.c.RCs(), func(rc RCInfo) bool { return rc.ID == id }) {
				panic(fmt.Sprintf("%s judged %s silent for its own stall of %s (heard %s before its last Tick)",
					g.id, id, time.Duration(d), time.Duration(before-h[0])))
			}
		}
	})
}

// restamp: ev as the shell observes it at, when its stalled process runs
// again.
func restamp(ev Event, at int64) Event {
	switch e := ev.(type) {
	case Arrived:
		e.At = at
		return e
	case LogWritten:
		e.At = at
		return e
	case LogFailed:
		e.At = at
		return e
	case LogConflict:
		e.At = at
		return e
	case SubmitFailed:
		e.At = at
		return e
	case RelayFailed:
		e.At = at
		return e
	case AnswerChunk:
		e.At = at
		return e
	case Adopt:
		e.At = at
		return e
	case Cancel:
		e.At = at
		return e
	case Stop:
		e.At = at
		return e
	case Abort:
		e.At = at
		return e
	}
	panic(fmt.Sprintf("restamp: a stalled GW does not wait with %T", ev))
}

// tickGW steps a Tick of g's, with its lateness measured as the shell does
// (stall.Watch), and checks that every RC it still gives new requests to
// was heard within three periods of its running time (wall time less the
// lateness it was told of since): a silent RC is lost, a stall or not.
func (s *sim) tickGW(g *simGW) error {
	late := int64(g.watch.Wake(time.Unix(0, s.now)))
	g.lastTick = s.now
	g.lateSum += late
	inc := g.incarnation
	if err := s.stepGW(g, Tick{At: s.now, Late: late}); err != nil {
		return err
	}
	if g.c == nil || g.incarnation != inc {
		return nil
	}
	for _, rc := range g.c.RCs() {
		h, ok := g.heard[rc.ID]
		if !ok {
			return fmt.Errorf("%s gives new requests to %s, never heard", g.id, rc.ID)
		}
		if silent := s.now - h[0] - (g.lateSum - h[1]); silent > announceMisses*announce {
			return fmt.Errorf("%s still gives new requests to %s, silent %s of its running time", g.id, rc.ID, time.Duration(silent))
		}
	}
	return nil
}

// sweep: each live GW adopts the open entries whose GW incarnation is gone,
// as the shell's sweeps do after DeadAfter; now and then one suspects a
// live GW wrongly.
func (s *sim) sweep() error {
	subjectsSorted := make([]string, 0, len(s.log))
	for k := range s.log {
		subjectsSorted = append(subjectsSorted, k)
	}
	slices.Sort(subjectsSorted)
	for _, g := range s.liveGWs() {
		for _, subj := range subjectsSorted {
			sl := s.log[subj]
			if sl.seq == 0 || sl.entry.State != messages.LogOpen {
				continue
			}
			owner := s.gwByID(sl.entry.GWID)
			orphan := owner == nil || owner.c == nil || owner.incarnation != sl.entry.GWStarted
			if !orphan && s.chaos && s.rng.IntN(200) == 0 {
				orphan = true // a wrong suspicion: the conditional writes must still keep one answer
			}
			if !orphan || (owner == g && owner.incarnation == sl.entry.GWStarted) {
				continue
			}
			if rq := s.reqs[sl.entry.RequestID]; rq != nil {
				rq.disturbed = true
			}
			if err := s.stepGW(g, Adopt{At: s.now, Subject: subj, Seq: sl.seq, Entry: sl.entry}); err != nil {
				return err
			}
			if g.c == nil {
				break
			}
		}
	}
	return nil
}

func (s *sim) gwByID(id string) *simGW {
	for _, g := range s.gws {
		if g.id == id {
			return g
		}
	}
	return nil
}

// stepGW feeds one event to a GW and carries out its commands.
func (s *sim) stepGW(g *simGW, ev Event) error {
	if g.c == nil {
		return nil
	}
	if g.stalled {
		g.deferred = append(g.deferred, ev)
		return nil
	}
	if _, ok := ev.(Abort); ok {
		g.aborted = true
	}
	cmds := slices.Clone(g.c.Step(ev))
	inc := g.incarnation
	if _, tick := ev.(Tick); !tick {
		s.logfNow("%s <- %s", g.id, described{ev})
	}
	// A message to the caller whose publish fails is reported as
	// RelayFailed after the batch; the later relays of its request in the
	// batch are not published.
	var failed []RelayFailed
	for i, cmd := range cmds {
		if r, ok := cmd.(Relay); ok && slices.ContainsFunc(failed, func(f RelayFailed) bool { return f.Info.ID == r.Info.ID }) {
			s.logfNow("%s -> %s: not published", g.id, described{cmd})
			continue
		}
		fail, lost := s.publishFails(cmd)
		s.logfNow("%s -> %s", g.id, described{cmd})
		var err error
		switch c := cmd.(type) {
		case Answer:
			err = s.answered(g, inc, c, fail, lost)
		case Relay:
			err = s.relayed(g, inc, c, lost)
		case StartStream:
			err = s.startSignal(g, inc, c, cmds[:i])
		default:
			err = s.carryOut(g, inc, cmd)
		}
		if err != nil {
			return fmt.Errorf("%s after %T: %w", g.id, ev, err)
		}
		if lost {
			s.totals.PublishFailures++
			s.logfNow("%s: publish failed", g.id)
			if fail.At != 0 {
				failed = append(failed, fail)
			}
		}
	}
	if err := s.checkStarts(cmds); err != nil {
		return fmt.Errorf("%s after %T: %w", g.id, ev, err)
	}
	for _, f := range failed {
		if g.c == nil || g.incarnation != inc {
			break
		}
		if err := s.stepGW(g, f); err != nil {
			return err
		}
	}
	if g.stopping && g.c != nil && g.c.Idle() && s.now >= g.abortAt {
		s.logfNow("%s stopped", g.id)
		g.c = nil
		g.stopping = false
		s.schedule(int64(50+s.rng.IntN(1000))*ms, func() {
			if g.c == nil && !g.stopping {
				s.startGW(g)
			}
		})
	}
	return nil
}

func (s *sim) carryOut(g *simGW, inc int64, cmd Command) error {
	switch c := cmd.(type) {
	case WriteLog:
		s.logWrite(g, inc, c)
	case Purge:
		if sl := s.log[c.Subject]; sl != nil {
			sl.seq, sl.entry = 0, messages.LogEntry{}
		}
		if rq := s.reqs[c.ID]; rq != nil && !rq.purged {
			rq.purged = true
			s.purged = append(s.purged, rq)
		}
	case Submit:
		// What the caller accepts goes with every drive, an adopter's too
		// (the log entry records it).
		if rq := s.reqs[c.Info.ID]; rq != nil && (c.Info.Chunks != (rq.mode&modeChunks != 0) || c.Sub.Stream != (rq.mode&modeStream != 0)) {
			return fmt.Errorf("request %s (mode %d) driven with chunks %t, stream %t", rq.id, rq.mode, c.Info.Chunks, c.Sub.Stream)
		}
		// The GW that drives a stream sends its StartStream: it says so to the Agg.
		if c.Sub.StreamStart != c.Sub.Stream {
			return fmt.Errorf("request %s driven with stream %t, stream start %t", c.Info.ID, c.Sub.Stream, c.Sub.StreamStart)
		}
		if rq := s.reqs[c.Info.ID]; rq != nil && c.Why != "" {
			if rq.redriven(c.Why) {
				s.totals.RedrivesInFlight++
			}
		}
		if rq := s.reqs[c.Info.ID]; rq != nil {
			rq.lastDrive = max(rq.lastDrive, c.Drive)
		}
		s.submit(c)
	case CancelDrive:
		s.cancels[c.DriveID] = true
	case AnswerCancel:
		if !strings.HasSuffix(c.Reply, ".cancel") {
			return fmt.Errorf("cancel answered on %q", c.Reply)
		}
	case Dropped:
		if strings.Contains(c.Why, "the current drive may still answer") { // a break, not its later chunks
			s.totals.EarlierBreaksDropped++
		}
	case Released, Malformed, HeldFull:
	case Adopted:
		s.totals.Adopted++
	default:
		return fmt.Errorf("unknown command %T", cmd)
	}
	return nil
}

func (s *sim) logWrite(g *simGW, inc int64, w WriteLog) {
	s.schedule(int64(1+s.rng.IntN(int(maxLogLag/ms)))*ms, func() {
		fail := s.rng.Float64() < s.pFail
		landed := !fail || s.rng.IntN(3) == 0 // a failed write may have landed all the same
		var result Event
		sl := s.log[w.Subject]
		if sl == nil {
			sl = &slot{}
			s.log[w.Subject] = sl
		}
		if landed {
			if sl.seq == w.ExpectSeq {
				s.logSeq++
				sl.seq, sl.entry = s.logSeq, w.Entry
				if rq := s.reqs[w.Entry.RequestID]; rq != nil {
					rq.loggedEver = rq.loggedEver || w.Entry.State == messages.LogOpen
					// After its purge only an open entry would do harm (a GW
					// would adopt and answer it again); a settling write
					// retried by a GW judged gone may land on the empty
					// subject, and must answer nothing.
					if rq.purged && w.Entry.State == messages.LogOpen {
						panic(fmt.Sprintf("request %s: open entry written after its purge", rq.id))
					}
				}
				result = LogWritten{At: s.now, ID: w.ID, Seq: sl.seq}
			} else {
				var cur *messages.LogEntry
				if sl.seq != 0 {
					e := sl.entry
					cur = &e
				}
				result = LogConflict{At: s.now, ID: w.ID, Current: cur, Seq: sl.seq}
			}
		}
		if fail {
			s.totals.LogFailures++
			if rq := s.reqs[w.Entry.RequestID]; rq != nil {
				rq.disturbed = true
			}
			result = LogFailed{At: s.now, ID: w.ID, Err: errors.New("simulated log failure")}
		}
		if g.c != nil && g.incarnation == inc {
			if err := s.stepGW(g, result); err != nil {
				panic(err)
			}
			return
		}
		// The writer died with the write under way: an `answered` that
		// landed leaves the request to nobody (the window the README names).
		if landed && w.Entry.State == messages.LogAnswered && sl.seq != 0 && sl.entry.GWStarted == inc {
			if rq := s.reqs[w.Entry.RequestID]; rq != nil && rq.answers == 0 && !rq.lostWindow {
				rq.lostWindow = true
				s.totals.LostInWindow++
			}
		}
	})
}

// submit: the RC, if up, answers the drive after a while (or at its
// deadline with its own timeout), sometimes twice, sometimes never.
func (s *sim) submit(c Submit) {
	var rc *simRC
	for _, r := range s.rcs {
		if r.id == c.RCID {
			rc = r
		}
	}
	if rc == nil || !rc.up {
		return
	}
	started := rc.startedAt
	drive := c.Sub.RequestID
	reply := c.Sub.ReplyTo
	work := int64(5+s.rng.IntN(1500)) * ms
	at := min(s.now+work, c.Sub.Deadline)
	n := 1
	switch x := s.rng.IntN(20); {
	case x == 0:
		n = 0 // lost
	case x < 3:
		n = 2 // duplicated
	}
	rq := s.reqs[c.Info.ID]
	alive := func() bool { return rc.up && rc.startedAt == started && !s.cancels[drive] }
	for i := range n {
		when := at + int64(i)*int64(s.rng.IntN(300))*ms
		if rq != nil && s.aggAnswer(rq, reply, drive, when, alive) {
			continue
		}
		s.schedule(when-s.now, func() {
			if alive() {
				s.deliverAnswer(reply, drive)
			}
		})
	}
}

// deliverAnswer routes an answer by its subject, to the GW of that id that
// is up now.
func (s *sim) deliverAnswer(reply, drive string) {
	h := nats.Header{}
	h.Set(messages.HdrRequestID, drive)
	s.deliver(reply, h, []byte(drive))
}

// deliver routes one message on an answer subject to the GW of that id
// that is up now.
func (s *sim) deliver(reply string, h nats.Header, data []byte) {
	parts := strings.Split(reply, ".")
	gwID, id := parts[len(parts)-3], parts[len(parts)-1]
	g := s.gwByID(gwID)
	if g == nil || g.c == nil {
		return
	}
	if err := s.stepGW(g, AnswerChunk{At: s.now, ID: id, Header: h, Data: data}); err != nil {
		panic(err)
	}
}

// answered checks an Answer as its caller gets it (lost: its publish
// failed, as fail says).
func (s *sim) answered(g *simGW, inc int64, a Answer, fail RelayFailed, lost bool) error {
	rq := s.reqs[a.Info.ID]
	if rq == nil {
		return fmt.Errorf("answer for a request never sent: %s", a.Info.ID)
	}
	rq.answers++
	if rq.answers > 1 {
		return fmt.Errorf("request %s answered %d times (last by %s)", rq.id, rq.answers, g.id)
	}
	if a.Info.Reply != rq.caller+"."+rq.id || a.Info.ClientID != rq.clientID {
		return fmt.Errorf("request %s answered to %q as %q", rq.id, a.Info.Reply, a.Info.ClientID)
	}
	if a.Accepted && s.logged {
		// `answered` is in the log, written by this GW, before the first
		// message of the answer goes out (unless nothing was ever logged).
		sl := s.log[rq.subject]
		switch {
		case sl != nil && sl.seq != 0:
			if e := sl.entry; e.RequestID != rq.id || e.State != messages.LogAnswered || e.GWID != g.id || e.GWStarted != inc {
				return fmt.Errorf("request %s answered by %s/%d while the log holds %s by %s/%d", rq.id, g.id, inc, e.State, e.GWID, e.GWStarted)
			}
		case rq.loggedEver:
			return fmt.Errorf("request %s answered by %s after its entry was purged", rq.id, g.id)
		}
	}
	if a.Accepted && a.Info.Chunks != (rq.mode&modeChunks != 0) {
		return fmt.Errorf("request %s (mode %d) answered with chunks %t", rq.id, rq.mode, a.Info.Chunks)
	}
	if !a.Forward && (a.Relayed || a.Chunk) {
		return fmt.Errorf("request %s: the GW's own answer marked relayed %t, chunk %t", rq.id, a.Relayed, a.Chunk)
	}
	if a.Forward && (a.Err != nil || messages.IsChunkEnd(a.Header)) {
		// A broken transfer answers only for the answering GW's current
		// drive: an earlier drive's is dropped while a later one runs.
		if n, ok := driveOf(rq.id, a.Header.Get(messages.HdrRequestID)); ok && n != a.Info.Drive {
			why := "its Agg's chunk end"
			if a.Err != nil {
				why = a.Err.Error()
			}
			return fmt.Errorf("request %s answered drive %d's broken transfer (%s), its current drive %d", rq.id, n, why, a.Info.Drive)
		}
	}
	if a.Forward {
		if err := s.firstMessage(g, inc, rq, a, fail, lost); err != nil {
			return err
		}
	}
	if !a.Accepted {
		rq.refused = true
		s.totals.Refused++
	} else {
		s.totals.Answered++
	}
	if a.Status.RC == messages.CodeCancelled {
		rq.cancelled = true
	}
	// Never after deadline + margin, for a request nothing disturbed (a
	// log failure, crash, stop or adoption delays it by design).
	if !rq.disturbed && s.now > rq.deadline+margin+4*maxLogLag {
		return fmt.Errorf("request %s answered %s after deadline+margin", rq.id, time.Duration(s.now-rq.deadline-margin))
	}
	return nil
}

// check: the invariants after every step.
func (s *sim) check() error {
	if err := s.checkHeld(); err != nil {
		return err
	}
	for _, g := range s.gws {
		if g.c == nil {
			continue
		}
		if err := heldOf(g.c); err != nil {
			return fmt.Errorf("%s: %w", g.id, err)
		}
	}
	for _, rq := range s.purged {
		if sl := s.log[rq.subject]; sl != nil && sl.seq != 0 && sl.entry.State == messages.LogOpen {
			return fmt.Errorf("request %s answered and purged, but the log holds it open again", rq.id)
		}
	}
	return nil
}

// final: after the calm, every request is settled.
func (s *sim) final() error {
	for _, id := range s.order {
		rq := s.reqs[id]
		if err := rq.transferSettled(); err != nil {
			return err
		}
		switch {
		case rq.answers == 1:
		case rq.lostWindow:
		case !s.logged && rq.crashed && rq.answers == 0:
			// Without a request log a crash loses what the GW held.
			s.totals.NeverLogged++
		case !rq.loggedEver && rq.answers == 0 && s.logged:
			// Its GW died before the log held it: nothing was promised; the
			// client's own timeout fires.
			s.totals.NeverLogged++
		default:
			return fmt.Errorf("request %s (arrived +%s at %s, deadline +%s): %d answers, logged %v",
				id, time.Duration(rq.arrived-t0), rq.gw, time.Duration(rq.deadline-t0), rq.answers, rq.loggedEver)
		}
	}
	for subj, sl := range s.log {
		if sl.seq != 0 && sl.entry.State == messages.LogOpen {
			return fmt.Errorf("open entry %s left in the log after the calm", subj)
		}
	}
	for _, g := range s.gws {
		if g.c != nil && !g.c.Idle() {
			return fmt.Errorf("%s still holds %d requests after the calm", g.id, g.c.Stats().InFlight)
		}
		if g.c != nil && g.c.heldBytes != 0 {
			return fmt.Errorf("%s still counts %d bytes of answers held after the calm", g.id, g.c.heldBytes)
		}
	}
	return nil
}

// described formats as describe, only when a log line is written (most
// seeds run quiet).
type described struct{ v any }

func (d described) String() string { return describe(d.v) }

func describe(v any) string {
	switch x := v.(type) {
	case Arrived:
		return fmt.Sprintf("Arrived %s deadline +%s", x.Req.ID, time.Duration(x.Req.Deadline-t0))
	case RCAnnounced:
		return fmt.Sprintf("RCAnnounced %s %d draining=%v", x.RC.ID, x.RC.StartedAt, x.RC.Draining)
	case WriteLog:
		return fmt.Sprintf("WriteLog %s %s %s drive %d expect %d (%s)", x.Op, x.ID, x.Entry.State, x.Entry.Drive, x.ExpectSeq, x.Subject)
	case LogConflict:
		st := "nothing"
		if x.Current != nil {
			st = fmt.Sprintf("%s by %s/%d drive %d", x.Current.State, x.Current.GWID, x.Current.GWStarted, x.Current.Drive)
		}
		return fmt.Sprintf("LogConflict %s: %s at %d", x.ID, st, x.Seq)
	case Adopt:
		return fmt.Sprintf("Adopt %s from %s/%d seq %d", x.Entry.RequestID, x.Entry.GWID, x.Entry.GWStarted, x.Seq)
	case Answer:
		return fmt.Sprintf("Answer %s accepted=%v fwd=%v chunk=%v relayed=%v err=%v %v (%d bytes)", x.Info.ID, x.Accepted, x.Forward,
			x.Chunk, x.Relayed, x.Err, x.Status, len(x.Data))
	case AnswerChunk:
		switch {
		case messages.IsStreamFrame(x.Header):
			return fmt.Sprintf("AnswerChunk %s frame %s/%s end=%q (%d bytes)", x.ID, x.Header.Get(messages.HdrStreamID),
				x.Header.Get(messages.HdrStreamSeq), x.Header.Get(messages.HdrStreamEnd), len(x.Data))
		case x.Header.Get(messages.HdrChunkIndex) != "":
			return fmt.Sprintf("AnswerChunk %s chunk %s/%s of %s (%d bytes)", x.ID, x.Header.Get(messages.HdrChunkStream),
				x.Header.Get(messages.HdrChunkIndex), x.Header.Get(messages.HdrChunkCount), len(x.Data))
		}
		return fmt.Sprintf("AnswerChunk %s %q", x.ID, x.Data)
	case Relay:
		return fmt.Sprintf("Relay %s end=%v %v chunk %q frame %q (%d bytes)", x.Info.ID, x.End, x.Status,
			x.Header.Get(messages.HdrChunkIndex), x.Header.Get(messages.HdrStreamSeq), len(x.Data))
	case RelayFailed:
		return fmt.Sprintf("RelayFailed %s answered=%v chunk %q frame %q", x.Info.ID, x.Answered,
			x.Header.Get(messages.HdrChunkIndex), x.Header.Get(messages.HdrStreamSeq))
	case Submit:
		return fmt.Sprintf("Submit %s to %s (%s)", x.Sub.RequestID, x.RCID, x.Why)
	}
	return fmt.Sprintf("%T %+v", v, v)
}
