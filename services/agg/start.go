package agg

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sg-project/sg/messages"
	"github.com/sg-project/sg/subjects"
)

// The GW paces an answer stream (messages.StreamStartFrames): it holds the
// frames that come while it writes `answered` to its request log, and a
// slow write must not overflow what it holds. An Agg whose expectation says
// so (StreamStart: the GW sends start signals, the RC passed the flag on)
// sends the first StreamStartFrames frames, then waits for the GW's start
// signal (subjects.AggStart: the drive's id in Sg-Request-Id, the stream's
// in Sg-Stream-Id), which the GW sends once frame 0 went out to the caller.
// The wait ends with the signal, the RC's cancel (nothing more is sent), the
// Agg stopping (an error frame), or the request's deadline (a TIMEOUT
// frame, as a stream that ran out of time ends). A signal that names no
// stream waiting here (forged, late, for another Agg's) changes nothing.

// startGate is one answer stream that may wait for its start signal.
type startGate struct {
	request, stream string
	// bytes: the partials of its answer, counted in Agg.held until the
	// stream ends (closeGate): a stream may wait until its deadline (its GW
	// died before it answered), and what such streams hold stays within
	// MaxHeldBytes; set under Agg.mu as the gate opens.
	bytes int64
	done  chan struct{} // closed once the wait is over: err says how
	err   error         // nil: the signal came; set before done is closed
	m     *metrics      // counts the wait and how it ended
}

// openGateLocked registers the start gate of stream of request; a.mu held.
// An Agg that stops opens it already closed.
func (a *Agg) openGateLocked(request, stream string) *startGate {
	g := &startGate{request: request, stream: stream, done: make(chan struct{}), m: a.metrics}
	if a.closing {
		g.err = errAggStopping(a.cfg.ID)
		close(g.done)
		return g
	}
	if a.gates == nil {
		a.gates = map[string]*startGate{}
	}
	a.gates[request] = g
	return g
}

// closeGate forgets g: its stream ended.
func (a *Agg) closeGate(g *startGate) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.gates[g.request] == g {
		delete(a.gates, g.request)
	}
	a.held -= g.bytes
	g.bytes = 0
}

// releaseLocked ends g's wait with err (nil: the signal), once; a.mu held.
func (g *startGate) releaseLocked(err error) {
	select {
	case <-g.done:
		return
	default:
	}
	g.err = err
	close(g.done)
}

// stopGateLocked ends the wait of request id's stream, if one waits: the
// RC cancelled it; a.mu held.
func (a *Agg) stopGateLocked(id string) {
	if g := a.gates[id]; g != nil {
		g.releaseLocked(errStopped)
	}
}

// stopGatesLocked ends every wait: the Agg stops; a.mu held.
func (a *Agg) stopGatesLocked() {
	for _, g := range a.gates {
		g.releaseLocked(errAggStopping(a.cfg.ID))
	}
}

func errAggStopping(id string) error {
	return &statusError{messages.Errorf(messages.CodeErr, messages.CodeErr,
		"Agg %s stopped while the answer streamed: the answer is cut, ask again", id)}
}

// before is called before frame seq of g's stream is sent: a stream the RC
// cancelled sends no more (an Agg that stops still sends what it may, as
// an unpaced stream does), and frame messages.StreamStartFrames waits for
// the signal.
func (g *startGate) before(seq int, deadline int64) error {
	if seq == messages.StreamStartFrames {
		return g.wait(deadline)
	}
	select {
	case <-g.done:
		if errors.Is(g.err, errStopped) {
			return g.err
		}
	default:
	}
	return nil
}

// wait waits for g's start signal until deadline (unix ns), and counts the
// wait and its outcome.
func (g *startGate) wait(deadline int64) error {
	g.m.startWaits.Inc()
	err := g.await(deadline)
	outcome := waitSignal
	switch {
	case err == nil:
	case errors.Is(err, errStopped):
		outcome = waitCancel
	case errors.Is(err, context.DeadlineExceeded):
		outcome = waitDeadline
	default:
		outcome = waitStop
	}
	g.m.startWaitsEnded.WithLabelValues(outcome).Inc()
	return err
}

func (g *startGate) await(deadline int64) error {
	select {
	case <-g.done:
		return g.err
	default:
	}
	t := time.NewTimer(time.Until(time.Unix(0, deadline)))
	defer t.Stop()
	select {
	case <-g.done:
		return g.err
	case <-t.C:
		return fmt.Errorf("no start signal from the GW after %d frames: %w", messages.StreamStartFrames, context.DeadlineExceeded)
	}
}

// onStart: the GW's start signal for an answer stream (headers only).
func (a *Agg) onStart(m *nats.Msg) {
	id, stream := m.Header.Get(messages.HdrRequestID), m.Header.Get(messages.HdrStreamID)
	if err := subjects.Validate("request id", id); err != nil {
		a.countMalformed()
		a.lim.Warn(&a.log, "malformed_start").Err(err).Msg("malformed start signal")
		return
	}
	if err := subjects.Validate("stream id", stream); err != nil {
		a.countMalformed()
		a.lim.Warn(&a.log, "malformed_start").Err(err).Str("request_id", id).Msg("malformed start signal")
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	g := a.gates[id]
	if g == nil || g.stream != stream {
		a.log.Debug().Str("request_id", id).Str("stream_id", stream).Msg("start signal for no stream waiting here: ignored")
		return
	}
	g.releaseLocked(nil)
}
