package agg

import (
	"github.com/sg-project/sg/services/agg/merge"
)

// A large answer gathered whole (a row query not read as a stream) was
// decoded only once its last window had come: its windows' decoding (a
// fifth of the Agg's work on a large answer, about 5 ms of 20 for the
// whole `trade` table) waited for the slowest DAP, then ran on the answer's
// critical path. Each large window is decoded as it arrives instead, on an
// answerer (counted in Agg.answers, so that the Agg waits for it on stop),
// while the DAPs still send: the answer waits only for the last windows'.
// The memory is the same as before at its peak (the partials' bytes and their
// decoded columns), only reached while the windows come; MaxRequestBytes and
// MaxHeldBytes bound the bytes as before. A request dropped meanwhile lets
// its decodings go; they end on their own.

// earlyDecodeBytes: a window at least this large is decoded as it comes;
// a smaller one costs less than a goroutine hand-off. A variable for tests.
var earlyDecodeBytes = parallelDecodeBytes

// decoding is one window's decoding, under way or done.
type decoding struct {
	done chan struct{} // closed once part and err are set
	part merge.Partial
	err  error
}

// wait returns the decoded window once it is done.
func (d *decoding) wait() (merge.Partial, error) {
	<-d.done
	return d.part, d.err
}

// decodeEarlyLocked starts decoding payload, a window of a request gathered
// whole, on an answerer; nil when the Agg is stopping (the window is decoded
// with the answer, as a small one is). Agg.mu held.
func (a *Agg) decodeEarlyLocked(payload []byte) *decoding {
	if a.closing {
		return nil
	}
	d := &decoding{done: make(chan struct{})}
	a.answers.Add(1)
	a.answerers.run(func() {
		defer a.answers.Done()
		d.part, d.err = merge.DecodePartial(payload)
		close(d.done)
	})
	return d
}
