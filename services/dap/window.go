package dap

import (
	"context"
	"fmt"

	"github.com/nats-io/nats.go"
	"github.com/sg-project/sg/messages"
	"github.com/sg-project/sg/services/agg/merge"
	"github.com/vmihailenco/msgpack/v5"
)

// A row partial larger than one window (Config.PartialWindow, at most the max
// payload) is sent as a sequence of windows (messages.PartialResult.Window,
// More), each a complete partial of a slice of the portion's rows in their
// order, encoded as it is sent: the DAP holds the partial's rows (for the
// engine, a view of its store) and one encoded window, never the encoded
// partial whole. The Agg grants windows (messages.PartialCredit on
// subjects.DAPCredit(ID)); the DAP may send InitialPartialCredit before it
// hears, then waits for credit, bounded by the portion's deadline, the RC's
// cancel and shutdown. A credit with Stop (the Agg needs no more: a limit
// reached, the answer over) ends the sending early; the portion completes OK.

// windowHeadroom is left below the max payload for the PartialResult's other
// fields and the NATS headers.
const windowHeadroom = 16 << 10

// credit is what the Agg granted of one portion's windows. Guarded by DAP.creditMu.
type credit struct {
	aggID   string
	granted uint32
	stop    bool
	wake    chan struct{} // capacity 1: a grant never blocks the subscription
}

// creditKey names one portion attempt being sent in windows.
type creditKey struct {
	requestID string
	portionID messages.PortionID
	attempt   uint32
}

// onCredit applies an Agg's grant to the portion it names; a grant for a
// portion not being sent (finished, never ours) is ignored.
func (d *DAP) onCredit(m *nats.Msg) {
	c, err := messages.DecodeValid[messages.PartialCredit](m.Data)
	if err != nil {
		d.countMalformed()
		d.lim.Warn(&d.log, "malformed_credit").Err(err).Msg("malformed partial credit")
		return
	}
	d.creditMu.Lock()
	defer d.creditMu.Unlock()
	cr := d.credits[creditKey{c.RequestID, c.PortionID, c.Attempt}]
	if cr == nil || cr.aggID != c.AggID {
		return
	}
	cr.granted = max(cr.granted, c.Windows)
	cr.stop = cr.stop || c.Stop
	select {
	case cr.wake <- struct{}{}:
	default:
	}
}

// windowLimit is the largest encoded window.
func (d *DAP) windowLimit() int {
	return int(max(1024, min(int64(d.cfg.PartialWindow), d.cfg.NC.MaxPayload()-windowHeadroom)))
}

// windowed reports whether part is sent in windows: a row partial above one
// window. Aggregates are small (groups) and go whole.
func (d *DAP) windowed(part *merge.Partial) bool {
	return !part.Aggregated && partialSizeHint(part) > d.windowLimit()
}

// partialSizeHint estimates the encoded size of a row partial.
func partialSizeHint(part *merge.Partial) int {
	return part.Rows.SizeHint() + 5*len(part.Times)
}

// sent is what sendWindows sent.
type sent struct {
	rows, bytes int64
	windows     uint32
	stopped     bool // the Agg said stop before the last window
}

// sendWindows sends part (a row partial) to p's Agg in windows. It returns
// ctx's error when ctx ends while it waits for credit.
func (d *DAP) sendWindows(ctx context.Context, p *messages.PortionDispatch, part *merge.Partial) (sent, error) {
	key := creditKey{p.RequestID, p.PortionID, p.Attempt}
	cr := &credit{aggID: p.AggID, granted: messages.InitialPartialCredit, wake: make(chan struct{}, 1)}
	d.creditMu.Lock()
	d.credits[key] = cr
	d.creditMu.Unlock()
	defer func() {
		d.creditMu.Lock()
		delete(d.credits, key)
		d.creditMu.Unlock()
	}()
	limit := d.windowLimit()
	n := part.Rows.NumRows()
	per := max(1, int(int64(n)*int64(limit)*3/4/int64(max(1, partialSizeHint(part)))))
	var s sent
	// Each window is encoded into buf in place, envelope and all, and sent
	// from it (NATS copies it): sized once for the largest window, and kept
	// for the slot's next partial.
	buf := d.windowBuf(min(partialSizeHint(part), limit) + windowHeadroom)
	defer func() { d.putWindowBuf(buf) }()
	for lo := 0; ; {
		if stop, err := d.waitCredit(ctx, cr, s.windows); err != nil || stop {
			s.stopped = stop
			return s, err
		}
		hi := min(n, lo+per)
		more := hi < n
		pr := d.envelope(p, messages.StatusOK, s.windows, more)
		if err := pr.Validate(); err != nil {
			return s, fmt.Errorf("window %d: %w", s.windows, err)
		}
		win := merge.Partial{Version: merge.PartialVersion, Rows: part.Rows.Slice(lo, hi), Times: part.Times[lo:hi:hi]}
		var size int
		var err error
		buf, size, err = messages.AppendPartialResult(buf[:0], &pr, func(enc *msgpack.Encoder) error { return merge.EncodePartialTo(enc, win) })
		if err != nil {
			return s, fmt.Errorf("encode window %d: %w", s.windows, err)
		}
		if size > limit && hi-lo > 1 {
			per = (hi - lo) / 2 // rows wider than the estimate: a smaller window
			continue
		}
		if err := d.publishPartial(p, messages.StatusOK, buf); err != nil {
			return s, fmt.Errorf("window %d: %w", s.windows, err)
		}
		s.rows += int64(hi - lo)
		s.bytes += int64(size)
		s.windows++
		if !more {
			return s, nil
		}
		// The next window: about 3/4 of the limit, from this one's bytes per row.
		per = max(1, int(int64(hi-lo)*int64(limit)*3/4/int64(max(1, size))))
		lo = hi
	}
}

// windowBuf is an empty buffer of at least size bytes.
func (d *DAP) windowBuf(size int) []byte {
	select {
	case b := <-d.windowBufs:
		if cap(b) >= size {
			return b[:0]
		}
	default:
	}
	return make([]byte, 0, size)
}

// putWindowBuf keeps b for another partial, unless it is well above a window
// (a partial sent whole in one grows it) or enough are kept. Twice a window is
// kept: a window whose rows were wider than estimated grows the buffer (by
// doubling) before it is cut smaller, and such a buffer is still the right one.
func (d *DAP) putWindowBuf(b []byte) {
	if cap(b) > 2*(d.windowLimit()+windowHeadroom) {
		return
	}
	select {
	case d.windowBufs <- b[:0]:
	default:
	}
}

// waitCredit waits until window i may be sent, or the Agg said stop.
func (d *DAP) waitCredit(ctx context.Context, cr *credit, i uint32) (stop bool, err error) {
	for {
		d.creditMu.Lock()
		granted, stop := cr.granted, cr.stop
		d.creditMu.Unlock()
		if stop || i < granted {
			return stop, nil
		}
		select {
		case <-cr.wake:
		case <-ctx.Done():
			return false, ctx.Err()
		}
	}
}
