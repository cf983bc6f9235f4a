package core

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/sg-project/sg/messages"
)

// timeout handles a request whose deadline has passed. Its own status block
// is composed now, from the facts at the deadline. Without secondaries the
// answer goes out at once; with them the primary asks each for its block and
// waits up to MultiRCMaxWait RC timer periods (seed: unknown status).
func (c *Core) timeout(r *request) {
	block, err := c.primaryBlock(r)
	c.stats.Timeouts++
	if err != nil {
		// Seed: on an error composing the message, the ai is the fallback
		// text followed by the error.
		c.stats.ComposeErrors++
		c.reply(r, ReplyTimeout, composeErrorPrefix+err.Error())
		return
	}
	missing := c.unreported(r)
	if len(missing) == 0 {
		c.replyTimeout(r, block, false)
		return
	}
	r.timingOut = true
	r.ownBlock = block
	c.unqueueAll(r)
	r.waitUntil = c.now + int64(c.cfg.MultiRCMaxWait)*int64(c.cfg.TickEvery/time.Nanosecond)
	c.schedule(timerEntry{at: r.waitUntil, kind: timerWaitEnd, id: r.ID})
	for _, rc := range missing {
		c.emit(QueryPeerStatus{RC: rc, Request: r.ID})
	}
}

func (c *Core) unreported(r *request) []string {
	var out []string
	for _, s := range r.secondaries {
		if _, ok := r.peerBlocks[s]; !ok {
			out = append(out, s)
		}
	}
	return out
}

// finishTimeout composes the message once every secondary reported or the
// wait is over; silent secondaries are "unknown".
func (c *Core) finishTimeout(r *request) {
	missing := c.unreported(r)
	if len(missing) > 0 {
		c.emit(TimeoutIncomplete{Request: r.ID, Max: c.cfg.MultiRCMaxWait, Unreported: missing})
	}
	c.replyTimeout(r, r.ownBlock, len(missing) > 0)
}

func (c *Core) replyTimeout(r *request, own string, incomplete bool) {
	blocks := []string{own}
	for _, s := range r.secondaries {
		b, ok := r.peerBlocks[s]
		if !ok {
			b = renderBlock(blockFacts{rc: s, status: messages.StatusUnknown})
		}
		blocks = append(blocks, b)
	}
	if incomplete {
		c.stats.IncompleteTimeoutMessages++
	}
	c.reply(r, ReplyTimeout, "Request timed out, "+strings.Join(blocks, " "))
}

// blockFacts is one RC's [...] block of a timeout message, as data.
type blockFacts struct {
	rc     string
	status messages.RequestStatus
	// allocating: queue blocks, or the error form if the queue is empty.
	queue []queueBlock
	// executing, inactive, aggregating, pending aggregation, received too late.
	daps        []string
	respTooLate []string
	agg         string
	rcvTooLate  []string
	// late: received too late, by the primary: how long after its deadline.
	late time.Duration
}

// queueBlock is one portion and reason of an allocating block.
type queueBlock struct {
	kind   TableKind
	labels Labels
	rng    TimeRange
	reason string
	daps   []string
}

var errUnknownStatus = errors.New("unknown status")

// renderBlock writes a block in the seed's form; fields appear only when set.
func renderBlock(b blockFacts) string {
	s, err := tryRenderBlock(b)
	if err != nil {
		return fmt.Sprintf("[rc=%s;status=\"unknown\"]", b.rc)
	}
	return s
}

func tryRenderBlock(b blockFacts) (string, error) {
	var w strings.Builder
	fmt.Fprintf(&w, "[rc=%s;status=%q", b.rc, b.status)
	switch b.status {
	case messages.StatusAllocating:
		if len(b.queue) == 0 {
			fmt.Fprintf(&w, ";error=%q", errorEmptyQueue)
			break
		}
		parts := make([]string, len(b.queue))
		for i, q := range b.queue {
			p, err := q.render()
			if err != nil {
				return "", err
			}
			parts[i] = p
		}
		fmt.Fprintf(&w, ";queue=%q", strings.Join(parts, " "))
	case messages.StatusExecuting, messages.StatusInactive, messages.StatusAggregating, messages.StatusPendingAggregation:
		if len(b.daps) > 0 {
			fmt.Fprintf(&w, ";dap=%s", list(b.daps))
		}
		if len(b.respTooLate) > 0 {
			fmt.Fprintf(&w, ";respTooLate=%s", list(b.respTooLate))
		}
		if b.agg != "" {
			fmt.Fprintf(&w, ";agg=%s", b.agg)
		}
	case messages.StatusReceivedTooLate:
		if len(b.rcvTooLate) > 0 {
			fmt.Fprintf(&w, ";rcvTooLate=%s", list(b.rcvTooLate))
		}
		if len(b.rcvTooLate) == 0 {
			// A primary that got the request after its deadline: by how much.
			fmt.Fprintf(&w, ";afterDeadline=%q", b.late.Round(time.Microsecond).String())
		}
	case messages.StatusCompleted, messages.StatusUnknown:
	default:
		return "", fmt.Errorf("%w %q for rc %s", errUnknownStatus, b.status, b.rc)
	}
	w.WriteByte(']')
	return w.String(), nil
}

func (q queueBlock) render() (string, error) {
	if q.kind != TimePartitioned && q.kind != Sharded && q.kind != Unsharded {
		return "", fmt.Errorf("queued portion of %s has unknown table kind %q", q.labels, q.kind)
	}
	var w strings.Builder
	w.WriteByte('[')
	if q.kind != Unsharded {
		fmt.Fprintf(&w, "labels=%s;", q.labels)
	}
	if q.kind == TimePartitioned {
		fmt.Fprintf(&w, "startTS=%s;endTS=%s;", formatTS(q.rng.Start), formatTS(q.rng.End))
	}
	fmt.Fprintf(&w, "reason=%q;dap=%s]", q.reason, list(q.daps))
	return w.String(), nil
}

func list(xs []string) string { return "[" + strings.Join(xs, ",") + "]" }

// primaryBlock composes this RC's block for a request it coordinates. If
// composing fails (a bug), the seed's fallback text is used for the whole
// message.
func (c *Core) primaryBlock(r *request) (string, error) {
	b, err := c.primaryFacts(r)
	if err != nil {
		return "", err
	}
	return tryRenderBlock(b)
}

func (c *Core) primaryFacts(r *request) (blockFacts, error) {
	b := blockFacts{rc: c.cfg.Addr}
	ownRunning, peerRunning := c.runningDAPs(r)
	switch {
	case r.errored:
		b.status = messages.StatusInactive
		b.daps = ownRunning
		b.respTooLate = r.tooLate
		if len(ownRunning) == 0 {
			b.agg = r.Agg
		}
	case r.aggregating:
		b.status = messages.StatusAggregating
		b.agg = r.Agg
	case r.queued > 0:
		b.status = messages.StatusAllocating
		q, err := c.queueBlocks(r)
		if err != nil {
			return b, err
		}
		b.queue = q
	case len(ownRunning) > 0 || len(r.tooLate) > 0:
		b.status = messages.StatusExecuting
		b.daps = ownRunning
		b.respTooLate = r.tooLate
		if len(ownRunning) == 0 && r.tooLateOK {
			b.agg = r.Agg
		}
	case len(peerRunning) > 0:
		b.status = messages.StatusPendingAggregation
		b.agg = r.Agg
	default:
		b.status = messages.StatusUnknown
	}
	return b, nil
}

// runningDAPs lists the addresses of DAPs still executing portions of the
// request (any attempt), ours and our peers'.
func (c *Core) runningDAPs(r *request) (own, peer []string) {
	ids := r.portionIDs(func(ps *portionState) bool { return !ps.finished })
	seen := map[string]bool{}
	for _, id := range ids {
		ps := r.portion(id)
		addr := ps.dap
		if d := c.fleet.byID[ps.dap]; d != nil {
			addr = d.Addr
		}
		if seen[addr] {
			continue
		}
		seen[addr] = true
		if ps.via == "" {
			own = append(own, addr)
		} else {
			peer = append(peer, addr)
		}
	}
	return own, peer
}

// queueBlocks: one block per queued portion and distinct reason, DAPs
// grouped under the reason string they share.
func (c *Core) queueBlocks(r *request) ([]queueBlock, error) {
	var out []queueBlock
	for _, ls := range r.sets {
		items := append([]*item(nil), ls.items...)
		sort.Slice(items, func(i, j int) bool { return less(items[i], items[j]) })
		for _, it := range items {
			var order []string
			byReason := map[string][]string{}
			for _, d := range c.fleet.group(ls.group) {
				listed, reasons := c.explain(d, it)
				if !listed {
					continue
				}
				reason := strings.Join(reasons, ", ")
				if _, ok := byReason[reason]; !ok {
					order = append(order, reason)
				}
				byReason[reason] = append(byReason[reason], d.Addr)
			}
			base := queueBlock{kind: r.kind, labels: ls.labels, rng: it.rng}
			if len(order) == 0 && r.SQL && len(ls.dropped) > 0 {
				// Seed: "the request specifically required the listed
				// DAPs, but they dropped from the RC".
				base.reason, base.daps = ReasonRequiredDropped, ls.dropped
				out = append(out, base)
				continue
			}
			if len(order) == 0 {
				base.reason, base.daps = ReasonNoDAP, nil
				out = append(out, base)
				continue
			}
			for _, reason := range order {
				qb := base
				qb.reason, qb.daps = reason, byReason[reason]
				out = append(out, qb)
			}
		}
	}
	// Counted as queued but no item found renders as the seed's
	// error="Empty queue encountered" (a bug indicator).
	return out, nil
}
