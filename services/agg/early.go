package agg

import (
	"runtime"

	"github.com/sg-project/sg/messages"
	"github.com/sg-project/sg/services/agg/merge"
	"github.com/sg-project/sg/subjects"
)

// A large answer gathered whole (a row query not read as a stream) was
// decoded only once its last window had come: its windows' decoding (a
// fifth of the Agg's work on a large answer, about 5 ms of 20 for the
// whole `trade` table) waited for the slowest DAP, then ran on the answer's
// critical path. Each large window is decoded as it arrives instead, on an
// answerer (counted in Agg.answers, so that the Agg waits for it on stop),
// while the DAPs still send: the answer waits only for the last windows'.
// A request dropped meanwhile lets its decodings go; they end on their own.
//
// Decoded columns are held beside their window's bytes until the answer, and
// may be up to earlyExpansion times larger: MaxHeldBytes bounds the bytes,
// not the columns. So a window is decoded early only while every request's
// bytes together (its own included) stay within MaxHeldBytes/earlyExpansion:
// the columns decoded early, all of them from windows still held, then
// take at most MaxHeldBytes more. Past it (a slow or stuck DAP holding
// windows open, many large answers at once) windows wait for their answer,
// as before. And at most maxEarlyDecodes run at once, so that decodes do not
// pile up on goroutines when windows come faster than they are decoded.

// A large partial in one piece (a portion below a DAP's window: the demo's
// idb portions of the whole trade table, 125 KB each) of a row query
// gathered whole is decoded as it comes too, within the same bounds: its
// decoding had waited for the last window of the slowest DAP, and was most
// of the Agg's work between the last partial and the merge (0.4 ms of a
// 9 ms answer).

// earlyDecodeBytes: a window at least this large is decoded as it comes;
// a smaller one costs less than a goroutine hand-off. A variable for tests.
var earlyDecodeBytes = parallelDecodeBytes

// earlyExpansion bounds how much larger a window's decoded columns are than
// its bytes: an empty string's one byte becomes a 16-byte string header (an
// int's, 8 bytes; a symbol code's, 4).
const earlyExpansion = 16

// maxEarlyDecodes: early decodes under way at once, Agg-wide.
var maxEarlyDecodes = int32(2 * runtime.GOMAXPROCS(0))

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
// whole, on an answerer; nil when the Agg is stopping, or when the bounds
// above say no (the window is decoded with the answer, as a small one is).
// held is every request's bytes with this window's. Agg.mu held.
func (a *Agg) decodeEarlyLocked(payload []byte, held int64) *decoding {
	if a.closing || held > a.cfg.MaxHeldBytes/earlyExpansion || a.earlyDecodes.Load() >= maxEarlyDecodes {
		return nil
	}
	d := &decoding{done: make(chan struct{})}
	a.answers.Add(1)
	a.earlyDecodes.Add(1)
	a.answerers.run(func() {
		defer a.answers.Done()
		defer a.earlyDecodes.Add(-1)
		d.part, d.err = merge.DecodePartial(payload)
		close(d.done)
	})
	return d
}

// decodeWholeEarlyLocked starts decoding p, a partial in one piece just
// added to r, when r is a row query gathered whole and p is large (within
// the bounds of decodeEarlyLocked). A decoding of the partial p replaced is
// let go: r.decodedWhole holds the decoding of the OK partial in partials
// under its ref, if any. Agg.mu held.
func (a *Agg) decodeWholeEarlyLocked(r *request, p *messages.PartialResult) {
	ref := p.Ref()
	delete(r.decodedWhole, ref)
	if len(p.Payload) < earlyDecodeBytes || !p.Status.IsOK() || !r.rowsGatheredWhole() {
		return
	}
	if _, ok := r.partials[ref]; !ok {
		return // not kept (too large, refused)
	}
	d := a.decodeEarlyLocked(p.Payload, a.held)
	if d == nil {
		return
	}
	if r.decodedWhole == nil {
		r.decodedWhole = map[messages.PortionRef]*decoding{}
	}
	r.decodedWhole[ref] = d
}

// rowsGatheredWhole reports whether r's answer is a merge of row partials
// gathered whole (getData or sql without aggregation, not streamed live):
// the answer decodes its partials with merge.DecodePartial.
func (r *request) rowsGatheredWhole() bool {
	if r.exp == nil || r.live != nil || r.streamsLive() || (r.exp.API != subjects.APIGetData && r.exp.API != subjects.APISQL) {
		return false
	}
	args, err := r.args.of(r.exp)
	return err == nil && !args.Aggregating()
}

// padDecodings extends d with none (nil: decoded when the answer is made)
// to n, so that the next decoding appended is the n'th partial's.
func padDecodings(d []*decoding, n int) []*decoding {
	return append(d, make([]*decoding, n-len(d))...)
}
