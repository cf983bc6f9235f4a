package gw

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sg-project/sg/messages"
	"github.com/sg-project/sg/services/gw/core"
	"github.com/sg-project/sg/services/stall"
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
	// listening: since when this GW has listened to heartbeats, moved
	// forward by its stalls like lastSeen: a GW never heard from is judged
	// gone once this GW has listened for the failover window.
	listening time.Time
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
		g.lim.Warn(&g.log, "malformed_gw_heartbeat").Err(err).Str("subject", m.Subject).Msg("dropping malformed GW heartbeat")
		return
	}
	g.heardPeer(h, time.Now())
}

// heardPeer takes a peer GW's heartbeat, heard at at.
func (g *GW) heardPeer(h messages.GWHeartbeat, at time.Time) {
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
		g.peers.m[h.GWID] = &gwPeer{startedAt: h.StartedAt, lastSeen: at, period: time.Duration(h.IntervalMS) * time.Millisecond}
	default:
		if p.startedAt != h.StartedAt {
			g.peers.gone[h.GWID] = p.startedAt
			p.startedAt = h.StartedAt
			sweep = true
		}
		p.lastSeen, p.period = at, time.Duration(h.IntervalMS)*time.Millisecond
	}
	g.peers.mu.Unlock()
	if sweep {
		g.log.Info().Str("peer_gw", h.GWID).Bool("stopping", h.Stopping).Msg("peer GW stopped or restarted: adopting its open requests")
		g.requestSweep()
	}
}

// judgePeers judges the peers' silence at now, a periodic tick of the loop
// (credited with its lateness: shell.wake), and asks for a sweep of the
// request log for each peer found gone.
func (g *GW) judgePeers(now time.Time) {
	for _, id := range g.prunePeers(now) {
		g.log.Warn().Str("peer_gw", id).Dur("dead_after", g.cfg.DeadAfter).Msg("peer GW silent: adopting its open requests")
		g.requestSweep()
	}
}

// creditPeers moves the peers' last-heard times (and the start of this GW's
// listening) forward by the loop's lateness at now (shell.wake): this GW's
// own stall is not their silence.
func (g *GW) creditPeers(late time.Duration, now time.Time) {
	if late <= 0 {
		return
	}
	g.peers.mu.Lock()
	defer g.peers.mu.Unlock()
	for _, p := range g.peers.m {
		p.lastSeen = stall.Credit(p.lastSeen, late, now)
	}
	g.peers.listening = stall.Credit(g.peers.listening, late, now)
}

// prunePeers ends the peers silent for the failover window at now, on this
// GW's running time (creditPeers).
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
// for DeadAfter (judged only once this GW has listened that long), at now.
func (g *GW) orphan(e messages.LogEntry, now time.Time) bool {
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
		return now.Sub(g.peers.listening) > max(announceMisses*g.cfg.AnnounceEvery, g.cfg.DeadAfter)
	}
	return p.startedAt != e.GWStarted
}

// requestSweep asks the sweeper for a sweep of the whole request log (one
// pending request stands for any number). Entries stay on the subject of
// the GW that accepted them, adopted or not, so every sweep reads them all:
// the log holds only open requests.
func (g *GW) requestSweep() {
	select {
	case g.sweeps <- struct{}{}:
	default:
	}
}

// sweeper hands orphaned entries to the loop, one sweep at a time, until
// ctx ends.
func (g *GW) sweeper(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-g.sweeps:
			g.sweep(ctx)
		}
	}
}

func (g *GW) sweep(ctx context.Context) {
	filter := g.s.RequestLogEntryPattern()
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var orphans []core.Adopt
	err := g.rlog.scan(sctx, filter, func(ref logRef) {
		if ref.entry.State == messages.LogOpen && g.orphan(ref.entry, time.Now()) {
			orphans = append(orphans, core.Adopt{Subject: ref.subject, Seq: ref.seq, Entry: ref.entry})
		}
	})
	if err != nil {
		g.met.logErrors.WithLabelValues("scan").Inc()
		g.log.Warn().Err(err).Str("filter", filter).Msg("request log sweep failed")
	}
	for _, a := range orphans {
		// The core adopts it unless it holds it already or is stopping.
		a.At = now()
		select {
		case g.in <- input{ev: a}:
		case <-ctx.Done():
			return
		}
	}
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
		return fmt.Errorf("request log entry %s: answer subject %q is not a GW's", e.RequestID, safeLabel(e.Submission.ReplyTo))
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
