package gw

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sg-project/sg/messages"
)

// Recovery: GWs watch each other's heartbeats; the open requests of a GW that
// stops, restarts or falls silent are adopted from the request log by a
// surviving GW (or by its own next incarnation), which drives them again or
// answers them with a timeout. See requestlog.go for the log's protocol.

type gwPeer struct {
	startedAt int64
	lastSeen  time.Time
	period    time.Duration
}

type gwPeers struct {
	mu   sync.Mutex
	m    map[string]*gwPeer
	gone map[string]int64 // GW id -> incarnation that stopped or fell silent
}

// heartbeatLoop publishes this GW's heartbeat, prunes silent RCs and GWs and
// schedules sweeps of the request log, until ctx ends.
func (g *GW) heartbeatLoop(ctx context.Context) {
	t := time.NewTicker(g.cfg.AnnounceEvery)
	defer t.Stop()
	// The first whole sweep comes once this GW has listened to heartbeats
	// for DeadAfter (a GW that died before then is judged by its silence).
	lastFull := time.Now().Add(max(announceMisses*g.cfg.AnnounceEvery, g.cfg.DeadAfter) - g.cfg.SweepEvery + g.cfg.AnnounceEvery/2)
	g.beat(false)
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			g.beat(false)
			g.rcs.Prune(now)
			for _, id := range g.prunePeers(now) {
				g.log.Warn().Str("peer_gw", id).Dur("dead_after", g.cfg.DeadAfter).Msg("peer GW silent: adopting its open requests")
				g.requestSweep(id)
			}
			if now.Sub(lastFull) >= g.cfg.SweepEvery {
				lastFull = now
				g.requestSweep("")
			}
		}
	}
}

func (g *GW) beat(stopping bool) {
	h := messages.GWHeartbeat{V: messages.RecoveryVersion, GWID: g.cfg.ID, StartedAt: g.startedAt,
		IntervalMS: g.cfg.AnnounceEvery.Milliseconds(), Stopping: stopping}
	data, err := messages.Encode(&h)
	if err == nil {
		err = g.nc.Publish(g.s.GWHeartbeat(g.cfg.ID), data)
	}
	if err != nil {
		g.log.Warn().Err(err).Msg("GW heartbeat not sent")
	}
}

func (g *GW) onGWHeartbeat(m *nats.Msg) {
	h, err := messages.DecodeValid[messages.GWHeartbeat](m.Data)
	if err != nil {
		g.log.Warn().Err(err).Str("subject", m.Subject).Msg("dropping malformed GW heartbeat")
		return
	}
	if h.GWID == g.cfg.ID {
		return
	}
	sweep := false
	g.peers.mu.Lock()
	p := g.peers.m[h.GWID]
	switch {
	case h.Stopping:
		delete(g.peers.m, h.GWID)
		g.peers.gone[h.GWID] = h.StartedAt
		sweep = true
	case p == nil:
		g.peers.m[h.GWID] = &gwPeer{startedAt: h.StartedAt, lastSeen: time.Now(), period: time.Duration(h.IntervalMS) * time.Millisecond}
	default:
		if p.startedAt != h.StartedAt {
			g.peers.gone[h.GWID] = p.startedAt
			p.startedAt = h.StartedAt
			sweep = true
		}
		p.lastSeen, p.period = time.Now(), time.Duration(h.IntervalMS)*time.Millisecond
	}
	g.peers.mu.Unlock()
	if sweep {
		g.log.Info().Str("peer_gw", h.GWID).Bool("stopping", h.Stopping).Msg("peer GW stopped or restarted: adopting its open requests")
		g.requestSweep(h.GWID)
	}
}

func (g *GW) prunePeers(now time.Time) []string {
	g.peers.mu.Lock()
	defer g.peers.mu.Unlock()
	var gone []string
	for id, p := range g.peers.m {
		if now.Sub(p.lastSeen) > max(announceMisses*p.period, g.cfg.DeadAfter) {
			delete(g.peers.m, id)
			g.peers.gone[id] = p.startedAt
			gone = append(gone, id)
		}
	}
	return gone
}

// orphan reports whether an open entry has no live driver: its GW is this
// one's earlier incarnation, a stopped or restarted GW, or a GW not heard from
// for DeadAfter (judged only once this GW has listened that long).
func (g *GW) orphan(e messages.LogEntry) bool {
	if e.GWID == g.cfg.ID {
		return e.GWStarted != g.startedAt
	}
	g.peers.mu.Lock()
	defer g.peers.mu.Unlock()
	if st, ok := g.peers.gone[e.GWID]; ok && st == e.GWStarted {
		return true
	}
	p := g.peers.m[e.GWID]
	if p == nil {
		return time.Since(time.Unix(0, g.startedAt)) > max(announceMisses*g.cfg.AnnounceEvery, g.cfg.DeadAfter)
	}
	return p.startedAt != e.GWStarted
}

// requestSweep asks the sweeper to look at one GW's open entries ("" = all).
func (g *GW) requestSweep(owner string) {
	select {
	case g.sweeps <- owner:
	default:
		g.log.Warn().Str("owner", owner).Msg("request log sweep queue full; the periodic sweep will catch up")
	}
}

// sweeper adopts orphaned entries, one sweep at a time, until ctx ends.
func (g *GW) sweeper(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case owner := <-g.sweeps:
			g.sweep(ctx, owner)
		}
	}
}

func (g *GW) sweep(ctx context.Context, owner string) {
	filter := g.s.RequestLogEntryPattern()
	if owner != "" {
		filter = g.s.RequestLogOwnedBy(owner)
	}
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var orphans []logRef
	err := g.rlog.scan(sctx, filter, func(ref logRef) {
		if ref.entry.State == messages.LogOpen && g.orphan(ref.entry) {
			orphans = append(orphans, ref)
		}
	})
	if err != nil {
		g.met.logErrors.WithLabelValues("scan").Inc()
		g.log.Warn().Err(err).Str("filter", filter).Msg("request log sweep failed")
	}
	for _, ref := range orphans {
		if ctx.Err() != nil {
			return
		}
		g.adoptEntry(ref)
	}
}

// adoptEntry takes an orphaned request over and drives it to its one answer.
func (g *GW) adoptEntry(old logRef) {
	g.mu.Lock()
	closing := g.closing
	_, local := g.pending[old.entry.RequestID]
	g.mu.Unlock()
	if closing || local {
		return
	}
	ref, err := g.rlog.adopt(old)
	if err != nil {
		if !errors.Is(err, errLogConflict) {
			g.met.logErrors.WithLabelValues("adopt").Inc()
			g.log.Warn().Err(err).Str("request_id", old.entry.RequestID).Msg("adopting a request failed")
		}
		return
	}
	e := ref.entry
	ri := &reqInfo{api: e.API, id: e.RequestID, clientID: e.ClientRequestID, caller: e.Caller, reply: e.ClientReply,
		content: e.Content, logCorr: e.LogCorr, received: time.Unix(0, e.Submission.ReceivedAt)}
	if ri.clientID == "" {
		ri.clientID = ri.id
	}
	ri.log = g.log.With().Str("request_id", ri.id).Str("client_request_id", ri.clientID).Str("api", ri.api).
		Str("from_gw", old.entry.GWID).Logger()
	p := &pending{id: ri.id, done: make(chan answer, 1), streams: map[string]*messages.Reassembler{}}
	g.mu.Lock()
	if g.closing {
		g.mu.Unlock()
		return
	}
	if _, dup := g.pending[ri.id]; dup {
		g.mu.Unlock()
		return
	}
	g.pending[ri.id] = p
	g.wg.Add(1)
	g.mu.Unlock()
	g.met.adopted.Inc()
	ri.log.Info().Uint32("drive", e.Drive).Str("rc_id", e.RCID).Msg("request adopted from the request log")
	go func() {
		defer g.wg.Done()
		// The answer of any drive arrives on the submission's ReplyTo: listen
		// there if it is another GW's subject.
		if !g.ownsReply(e.Submission.ReplyTo) {
			sub, err := g.nc.Subscribe(e.Submission.ReplyTo, g.onAnswer)
			if err == nil {
				// A large chunked answer must not make it a slow consumer.
				err = sub.SetPendingLimits(-1, int(min(4*g.cfg.MaxAnswerBytes, 1<<31-1)))
			}
			if err != nil {
				ri.log.Error().Err(err).Msg("subscribe to the adopted request's answer subject")
			} else {
				defer func() { _ = sub.Unsubscribe() }()
				_ = g.nc.Flush()
			}
		}
		d := &driveState{sub: e.Submission, drive: e.Drive, rcID: e.RCID, rcStarted: e.RCStarted,
			deadline: time.Unix(0, e.Submission.Deadline), ref: ref}
		g.drive(ri, p, d, driveAdopted)
	}()
}

// checkAdoptable refuses an entry this GW must never act on, whoever wrote
// it: a client reply that is not an allowed inbox (it would make the GW
// answer onto an internal subject), or a submission whose answer subject is
// not a GW answer subject.
func (g *GW) checkAdoptable(e *messages.LogEntry) error {
	if err := g.checkReply(e.ClientReply); err != nil {
		return fmt.Errorf("request log entry %s: %w", e.RequestID, err)
	}
	if !g.isAnswerSubject(e.Submission.ReplyTo) {
		return fmt.Errorf("request log entry %s: answer subject %q is not its GW's", e.RequestID, safeLabel(e.Submission.ReplyTo))
	}
	return nil
}

// isAnswerSubject reports whether subject is some GW's answer subject for
// some request (subjects.GWAnswer with plain tokens).
func (g *GW) isAnswerSubject(subject string) bool {
	want := strings.Split(g.s.GWAnswer("\x00", "\x00"), ".")
	got := strings.Split(subject, ".")
	if len(got) != len(want) {
		return false
	}
	for i, w := range want {
		if w == "\x00" {
			if got[i] == "" || strings.ContainsAny(got[i], "*> \t\r\n") {
				return false
			}
		} else if got[i] != w {
			return false
		}
	}
	return true
}

func (g *GW) ownsReply(subject string) bool {
	prefix := g.s.GWAnswer(g.cfg.ID, "")
	return len(subject) > len(prefix) && subject[:len(prefix)] == prefix
}
