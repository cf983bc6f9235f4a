package gw

import (
	"context"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"github.com/rs/zerolog"
	"github.com/sg-project/sg/messages"
	"github.com/sg-project/sg/services/gw/core"
	"github.com/sg-project/sg/services/stall"
)

// The shell: one goroutine (loop) owns the core. It turns NATS messages,
// log write results and sweeps into core events, carries out the core's
// commands, and runs the timers. Nothing else touches the core.

// input is one thing for the loop: a core event, a log job finished, or the
// mark that every endpoint handler call has returned.
type input struct {
	ev      core.Event
	jobDone bool
	drained bool
}

// input hands an event to the loop. It blocks while the loop is busy (the
// callers are NATS callbacks and workers: backpressure), never after the
// loop returned.
func (g *GW) input(in input) {
	select {
	case g.in <- in:
	case <-g.loopDone:
	}
}

func now() int64 { return time.Now().UnixNano() }

func (g *GW) onAnnounce(m *nats.Msg) {
	a, err := messages.DecodeValid[messages.RCAnnouncement](m.Data)
	if err != nil {
		g.lim.Warn(&g.log, "malformed_rc_announcement").Err(err).Str("subject", m.Subject).Msg("dropping malformed RC announcement")
		return
	}
	asm, err := a.AssemblyFor(g.cfg.AssemblyKey)
	if err != nil {
		g.lim.Warn(&g.log, "invalid_rc_assembly").Err(err).Str("rc", a.RCID).Msg("dropping RC announcement: its assembly label is not a valid assembly name")
		return
	}
	g.input(input{ev: core.RCAnnounced{At: now(), RC: core.RCInfo{ID: a.RCID, Assembly: asm, Addr: a.Addr,
		Outstanding: a.Outstanding, Queued: a.Queued, DAPs: a.DAPs, Draining: a.Draining, Warming: a.Warming, StartedAt: a.StartedAt}}})
}

// onAnswer: every message on this GW's answer subjects, whole answers and
// chunks alike; the core reassembles and keeps the first.
func (g *GW) onAnswer(m *nats.Msg) {
	id := m.Subject[strings.LastIndexByte(m.Subject, '.')+1:]
	g.input(input{ev: core.AnswerChunk{At: now(), ID: id, Header: m.Header, Data: m.Data}})
}

// shell is the loop's state: the core and what carrying out its commands
// left pending. Only the loop's goroutine touches it.
type shell struct {
	g        *GW
	c        *core.Core
	lw       *logWrites // nil without a request log
	timer    *time.Timer
	queue    []logJob  // log jobs not yet taken by a worker
	busy     int       // log jobs taken and not finished
	sends    []logSend // log writes waiting for room under maxLogWrites
	later    []core.Event
	batch    int          // later[batch:] are the follow-ups of the commands being carried out
	handlers bool         // waiting for the endpoint handlers to return
	stall    *stall.Watch // the loop's lateness, not counted as silence (wake)
	armed    int64        // the deadline timer is set for (unix ns); 0: none pending
}

// step feeds one event to the core and carries out its commands.
func (sh *shell) step(ev core.Event) {
	g, c := sh.g, sh.c
	sh.later, sh.batch = sh.later[:0], 0
	for _, cmd := range c.Step(ev) {
		sh.carryOut(cmd)
	}
	// Follow-ups of the commands (a submit or relay that failed), in order.
	for i := 0; i < len(sh.later); i++ {
		sh.batch = len(sh.later)
		for _, cmd := range c.Step(sh.later[i]) {
			sh.carryOut(cmd)
		}
	}
	switch ev.(type) {
	case core.RCAnnounced, core.Tick:
		g.publishRCs(c)
	}
	g.rcMu.Lock()
	g.inFlight = c.Stats().InFlight
	g.rcMu.Unlock()
	if at, ok := c.NextDeadline(); ok && at != sh.armed {
		// Re-armed only when the deadline changed: most events (an answer
		// chunk, an acknowledgement) leave the earliest one as it was.
		sh.armed = at
		sh.timer.Reset(time.Until(time.Unix(0, at)))
	}
}

// carryOut does one command of the core. A Purge is done already where the
// `answered` record expires by itself (logWrites.expires); else a worker
// purges the subject.
func (sh *shell) carryOut(cmd core.Command) {
	switch c := cmd.(type) {
	case core.Purge:
		if sh.lw != nil && !sh.lw.expires() {
			sh.queue = append(sh.queue, logJob{purge: c.Subject})
		}
		return
	case core.Relay:
		// Past a message of its answer that could not be sent: a gap the
		// caller would take for a lost chunk. The core ends the answer.
		for _, ev := range sh.later[sh.batch:] {
			if f, ok := ev.(core.RelayFailed); ok && f.Info.ID == c.Info.ID {
				return
			}
		}
	}
	sh.g.carryOut(cmd, &sh.sends, &sh.later)
}

// handle takes one input from the loop's channel.
func (sh *shell) handle(in input) {
	if in.jobDone {
		sh.busy--
	}
	if in.drained {
		sh.handlers = false
	}
	if in.ev != nil {
		sh.step(in.ev)
	}
}

// ack settles the log write an acknowledgement answers.
func (sh *shell) ack(m *nats.Msg) {
	ev, job, again := sh.lw.acked(m)
	if job != nil {
		sh.queue = append(sh.queue, *job)
	}
	if again != nil {
		sh.sends = append(sh.sends, *again)
	}
	if ev != nil {
		sh.step(ev)
	}
}

// sendLog publishes the log writes the last steps asked for, as far as
// there is room: after the steps' other publishes (a submit goes out before
// the create's write).
func (sh *shell) sendLog() {
	for len(sh.sends) > 0 && !sh.lw.full() {
		s := sh.sends[0]
		sh.sends = sh.sends[1:]
		if ev := sh.lw.send(sh.g.nc, s, now()); ev != nil {
			sh.step(ev)
		}
	}
}

// tick judges silence: of RCs (the core's Tick, which credits late, the
// loop's own lateness: wake) and of the request log (writes without an
// acknowledgement). What is already queued is heard first: after a stall of
// the loop the ticker and the RC announcements and acknowledgements queued
// during it are ready together, and select picks either (every RC was once
// judged gone so, and requests got "No resources connected").
func (sh *shell) tick(at int64, late time.Duration) {
	for range len(sh.g.in) {
		sh.handle(<-sh.g.in)
	}
	if sh.lw != nil {
		for range len(sh.lw.acks) {
			sh.ack(<-sh.lw.acks)
		}
		sh.lw.expire(at, sh.step)
	}
	sh.step(core.Tick{At: at, Late: int64(late)})
}

// wake: the loop wakes at t to judge silence (a Tick: the periodic one or
// the core's timer). Silence is counted on the GW's own running time
// (package stall): the lateness of this wake past the announcement period
// since the last one tells of a stall of the GW (a stopped or starved
// process), during which its RCs' announcements and its peers' heartbeats
// could not be heard (in `sg run` they are the same process, stalled alike).
// Judged on wall time, one stall made a GW judge every peer dead at once and
// adopt their requests, re-driving work that was under way exactly when the
// system was struggling. The peers are credited here, the RCs by the core
// (the Tick carries the lateness returned); every Tick is measured, as every
// Tick lets the core judge its RCs.
func (sh *shell) wake(t time.Time) time.Duration {
	late := sh.stall.Wake(t)
	sh.g.creditPeers(late, t)
	return late
}

// newStallWatch measures the loop's lateness: counted in
// sg_gw_loop_stalls_total, warned of.
func (g *GW) newStallWatch() *stall.Watch {
	return &stall.Watch{Period: g.cfg.AnnounceEvery, Stalls: g.met.stalls, Log: &g.log, Limit: g.lim,
		Warn: "gw loop stalled: not counted as silence of RCs and peer GWs"}
}

// idle: nothing is held or under way any more.
func (sh *shell) idle() bool {
	return !sh.handlers && sh.c.Idle() && len(sh.queue) == 0 && sh.busy == 0 && len(sh.sends) == 0 &&
		(sh.lw == nil || sh.lw.busy() == 0)
}

// loop runs the core until the GW has stopped: ctx ended, the endpoints
// drained (every handler call returned), the grace passed, and the core
// holds nothing more (answered, or left in the log for adoption).
//
// With a request log, the loop publishes the log's writes itself (lw) and
// reads their acknowledgements; workers (jobs) do only what takes a round
// trip of its own: reading an entry back after a conflict, purging.
func (g *GW) loop(ctx context.Context, c *core.Core, svc micro.Service, jobs chan<- logJob, lw *logWrites) {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	tick := time.NewTicker(g.cfg.AnnounceEvery)
	defer tick.Stop()
	// The first whole sweep comes once this GW has listened to heartbeats
	// for DeadAfter (a GW that died before then is judged by its silence).
	lastSweep := time.Now().Add(max(announceMisses*g.cfg.AnnounceEvery, g.cfg.DeadAfter) - g.cfg.SweepEvery + g.cfg.AnnounceEvery/2)
	g.beat(false)

	sh := &shell{g: g, c: c, lw: lw, timer: timer, stall: g.newStallWatch()}
	var (
		acks     <-chan *nats.Msg
		done     = ctx.Done()
		stopping bool
		abortC   <-chan time.Time
		hardC    <-chan time.Time
	)
	if lw != nil {
		acks = lw.acks
	}
	for {
		sh.sendLog()
		if stopping && sh.idle() {
			return
		}
		if stopping && g.nc.IsClosed() {
			// Crashed, as it were: nothing can be written or answered any
			// more; the request log decides what happens to what is held.
			g.log.Warn().Int("in_flight", c.Stats().InFlight).Msg("connection closed while stopping")
			return
		}
		var jobC chan<- logJob
		var next logJob
		if len(sh.queue) > 0 {
			jobC, next = jobs, sh.queue[0]
		}
		select {
		case <-done:
			done = nil
			stopping = true
			// No new requests: micro unsubscribes the endpoints and delivers
			// what it already received; the core refuses those
			// ("shutting down") and what is not logged yet.
			if err := svc.Stop(); err != nil {
				g.log.Warn().Err(err).Msg("stop micro service")
			}
			sh.step(core.Stop{At: now()})
			sh.handlers = true
			awaiting := make(chan struct{})
			go func() { defer close(awaiting); g.awaitHandlers() }()
			// Owned by the loop: at most a flush long.
			defer func() { <-awaiting }()
			abortC = time.After(g.cfg.ShutdownGrace)
		case <-abortC:
			abortC = nil
			if !c.Idle() {
				g.log.Warn().Dur("grace", g.cfg.ShutdownGrace).Int("in_flight", c.Stats().InFlight).
					Msg("requests still in flight after the shutdown grace: leaving them to a peer (request log) or answering UNAVAILABLE")
			}
			sh.step(core.Abort{At: now()})
			// A log that keeps failing must not hold the stop forever.
			hardC = time.After(3 * logTimeout)
		case <-hardC:
			g.log.Error().Int("in_flight", c.Stats().InFlight).Int("log_jobs", len(sh.queue)+sh.busy+len(sh.sends)).
				Msg("stopping with requests whose log writes did not settle: their entries decide (see README, recovery)")
			return
		case jobC <- next:
			sh.queue = sh.queue[1:]
			sh.busy++
		case in := <-g.in:
			sh.handle(in)
		case m := <-acks:
			sh.ack(m)
		case <-timer.C:
			sh.armed = 0 // fired: the next deadline arms it again, even the same one
			t := time.Now()
			sh.step(core.Tick{At: t.UnixNano(), Late: int64(sh.wake(t))})
		case <-tick.C:
			// The loop's own time, not the tick's: a tick missed while the
			// loop was stalled carries the time it was due, the stall's
			// start, and the stall would be seen only a tick later.
			t := time.Now()
			g.beat(false)
			sh.tick(t.UnixNano(), sh.wake(t))
			if g.rlog != nil && !stopping {
				g.judgePeers(t)
				if t.Sub(lastSweep) >= g.cfg.SweepEvery {
					lastSweep = t
					g.requestSweep()
				}
			}
		}
	}
}

// awaitHandlers tells the loop, through its input channel, once every
// handler call on the stopped endpoints has returned. micro's Stop drains
// the endpoint subscriptions asynchronously, so handlers may still be
// called after it returns: after a flush the server sends nothing more to
// them, and a barrier runs once every message already delivered has been
// handled. The mark goes through the same channel as the handlers' own
// inputs, after them: the loop has seen every request handed to it before
// it may call itself idle.
func (g *GW) awaitHandlers() {
	if err := g.nc.FlushTimeout(logTimeout); err != nil {
		g.log.Warn().Err(err).Msg("flush at stop")
	}
	if err := g.nc.Barrier(func() { g.input(input{drained: true}) }); err != nil {
		// The connection is closed: no handler runs any more (and the loop
		// stops on the closed connection, mark or not).
		select {
		case g.in <- input{drained: true}:
		default:
		}
	}
}

// publishRCs exposes the core's RCs to RCs and WaitRCs.
func (g *GW) publishRCs(c *core.Core) {
	list := c.RCs()
	g.rcMu.Lock()
	defer g.rcMu.Unlock()
	if !slices.Equal(list, g.rcList) {
		g.rcList = list
		close(g.rcChanged)
		g.rcChanged = make(chan struct{})
		g.setReadiness(readinessOf(list))
	}
}

// carryOut does one command of the core.
func (g *GW) carryOut(cmd core.Command, sends *[]logSend, later *[]core.Event) {
	switch c := cmd.(type) {
	case core.WriteLog:
		*sends = append(*sends, logSend{write: c})
	case core.Submit:
		if err := g.submit(c); err != nil {
			*later = append(*later, core.SubmitFailed{At: now(), ID: c.Info.ID, Drive: c.Drive, Err: err})
		}
	case core.CancelDrive:
		h := nats.Header{}
		h.Set(messages.HdrRequestID, c.DriveID)
		if err := g.nc.PublishMsg(&nats.Msg{Subject: g.s.RCCancel(c.RCID), Header: h}); err != nil {
			g.log.Warn().Err(err).Str("request_id", c.ID).Str("rc_id", c.RCID).Msg("cancel to the RC not sent")
		}
	case core.Answer:
		if err := g.answer(c); err != nil && c.Relayed {
			*later = append(*later, core.RelayFailed{At: now(), Info: c.Info, Header: c.Header, Err: err, Answered: errors.Is(err, errAnsweredInstead)})
		}
	case core.Relay:
		// answer.go; an error end that could not be sent is not sent again.
		if err := g.relay(c); err != nil && c.Status.IsOK() {
			*later = append(*later, core.RelayFailed{At: now(), Info: c.Info, Header: c.Header, Err: err})
		}
	case core.StartStream:
		g.startStream(c)
	case core.AnswerCancel:
		ri := &reqInfo{api: APICancel, id: c.ClientID, clientID: c.ClientID, reply: c.Reply, content: messages.ContentJSON,
			received: time.Now(), log: g.log.With().Str("client_request_id", c.ClientID).Logger()}
		g.respondStatus(ri, c.Status)
	case core.Released:
		g.infoReq(c.Info).log.Info().Msg("left unanswered at shutdown; the request log keeps it for adoption")
	case core.HeldFull:
		g.met.heldFull.Inc()
		// Limited per kind: a burst of large answers must not flood the log.
		g.lim.Warn(&g.log, "held_full").Str("request_id", c.ID).Int64("limit", g.cfg.MaxHeldBytes).
			Msg("answer ended: the GW holds answers' bytes up to its limit")
	case core.Dropped:
		g.met.dropped.Inc()
		g.log.Debug().Str("request_id", c.ID).Str("why", c.Why).Msg("not answering here")
	case core.Malformed:
		g.met.malformed.WithLabelValues(c.Kind).Inc()
		// Counted each. One that ends an answer comes once per request held
		// and its caller sees the error: always logged. One skipped can come
		// in a flood (any publisher, any request id): logged within the
		// limit.
		ev, msg := g.log.Warn(), "answer message that does not read: the answer ends with an error"
		if !c.Ends {
			ev, msg = g.lim.Warn(&g.log, c.Kind), "answer message that does not read: skipped (not an answer held here)"
		}
		ev.Str("request_id", c.ID).Str("kind", c.Kind).Err(c.Err).Msg(msg)
	case core.Adopted:
		g.met.adopted.Inc()
		g.met.redrives.WithLabelValues("adopted").Inc()
		g.infoReq(c.Info).log.Info().Str("from_gw", c.FromGW).Bool("expired", c.Expired).Msg("request adopted from the request log")
	}
}

// startStream tells an Agg to send the rest of an answer stream (the core
// checked the ids as subject tokens). One lost is sent again by the core
// (core.StartResend) until the Agg's next frame comes.
func (g *GW) startStream(c core.StartStream) {
	h := make(nats.Header, 2)
	h.Set(messages.HdrRequestID, c.DriveID)
	h.Set(messages.HdrStreamID, c.StreamID)
	if err := g.nc.PublishMsg(&nats.Msg{Subject: g.s.AggStart(c.AggID), Header: h}); err != nil {
		g.met.streamStarts.WithLabelValues("failed").Inc()
		log := g.infoLog(c.Info)
		log.Warn().Err(err).Str("agg", c.AggID).Str("stream_id", c.StreamID).Msg("start signal to the Agg not sent")
		return
	}
	if c.Again {
		g.met.streamStarts.WithLabelValues("resent").Inc()
		return
	}
	g.met.streamStarts.WithLabelValues("sent").Inc()
}

// submit publishes a drive to its RC.
func (g *GW) submit(c core.Submit) error {
	// Only the headers the RC reads (the caller and the client's id for
	// position queries) and those that name the request to an observer;
	// api, deadline and content type are in the body the RC decodes.
	h := make(nats.Header, 4)
	messages.Routing{RequestID: c.Sub.RequestID, LogCorr: c.Info.LogCorr}.Write(h)
	messages.SetString(h, messages.HdrClientRequestID, c.Info.ClientID)
	messages.SetString(h, messages.HdrCaller, c.Info.Caller)
	err := messages.WithEncoded(&c.Sub, func(body []byte) error {
		return g.nc.PublishMsg(&nats.Msg{Subject: g.s.RCSubmit(c.RCID), Header: h, Data: body})
	})
	if err != nil {
		log := g.infoLog(c.Info)
		log.Warn().Err(err).Msg("submission to the RC failed")
		return err
	}
	g.met.byRC.WithLabelValues(c.RCID).Inc()
	if c.Why != "" && c.Why != "adopted" {
		g.met.redrives.WithLabelValues(c.Why).Inc()
		log := g.infoLog(c.Info)
		log.Info().Str("why", c.Why).Msg("driving the request again")
	}
	if g.log.GetLevel() <= zerolog.DebugLevel && zerolog.GlobalLevel() <= zerolog.DebugLevel {
		log := g.infoLog(c.Info)
		log.Debug().Time("deadline", time.Unix(0, c.Sub.Deadline)).Msg("request submitted")
	}
	return nil
}

// answer sends the core's answer for a request; an error when it could not
// be published.
func (g *GW) answer(c core.Answer) error {
	ri := g.infoReq(c.Info)
	switch {
	case c.Forward:
		return g.forward(ri, answer{header: c.Header, data: c.Data, err: c.Err, chunk: c.Chunk, relayed: c.Relayed})
	case c.Limit != "":
		if c.Limit == LimitInFlight {
			g.met.busy.Inc()
		}
		g.met.limited.WithLabelValues(c.Limit).Inc()
		h := nats.Header{}
		h.Set(messages.HdrLimit, c.Limit)
		messages.SetUint(h, messages.HdrRetryAfter, uint64(c.RetryAfter))
		return g.respondStatusWith(ri, c.Status, h)
	default:
		return g.respondStatus(ri, c.Status)
	}
}
