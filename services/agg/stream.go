package agg

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nuid"
	"github.com/rs/zerolog"

	"github.com/sg-project/sg/messages"
	"github.com/sg-project/sg/services/agg/merge"
	"github.com/sg-project/sg/subjects"
)

// streams reports whether j is answered as a stream of frames (messages/stream.go):
// its caller reads streams, and it is a getData (or sql) whose partials all succeeded.
// Everything else (errors, ping, a refused or too large request) is a whole answer,
// which a stream reader takes as well.
func streams(j job) bool {
	if !j.exp.Stream || j.tooLarge || j.refused || j.failed != nil {
		return false
	}
	if j.exp.API != subjects.APIGetData && j.exp.API != subjects.APISQL {
		return false
	}
	for _, p := range j.partials {
		if !p.Status.IsOK() {
			return false
		}
	}
	return true
}

// frameHeadroom is left below the max payload for a frame's NATS headers.
const frameHeadroom = 4 << 10

// firstWindowRows is the first window's size in rows; each frame's encoded
// size sets the next one's.
const firstWindowRows = 1024

// frameSender sends the frames of one answer stream, in order.
type frameSender struct {
	a       *Agg
	e       *messages.AggExpectation
	content messages.Content
	id      string
	limit   int
	frames  int
	bytes   int64
	rows    int
	gate    *startGate // the GW paces the stream (start.go); nil: it does not
}

// answerStream merges j window by window and sends each window as a frame as
// soon as it is encoded: the merged answer is never built whole, and the Agg
// holds one window of it beside the partials. ok is false when the merge
// failed before anything was sent: the caller answers st whole.
func (a *Agg) answerStream(j job, content messages.Content, log zerolog.Logger) (st messages.Status, ok bool) {
	start := time.Now()
	m, parts, st := merger(j)
	if !st.IsOK() {
		return st, false
	}
	var w *merge.Windows
	var err error
	if parts == nil {
		w, err = m.Windows()
	} else {
		// Dropped as merged, and released once copied into a frame's window:
		// the next windows decode into their storage.
		if w, err = m.Stream(merge.SourceFetches(parts.runs, true)); err == nil {
			w.ReleaseFetched()
		}
	}
	if st = mergeStatus(err); !st.IsOK() {
		return st, false
	}
	return a.streamWindows(&j.exp, w, content, log, start, len(j.partials), nil, j.gate)
}

// streamWindows sends the windows of w as the frames of e's answer, then
// tells the RC. ok is false when it failed before anything was sent: the
// caller answers st whole. lm is the live merge that feeds w, if any
// (live.go): its failures end the stream with their status. gate is the
// stream's start gate if it was registered already (takeReadyLocked); nil:
// streamWindows registers one when the GW paces the stream.
func (a *Agg) streamWindows(e *messages.AggExpectation, w *merge.Windows, content messages.Content, log zerolog.Logger,
	start time.Time, partials int, lm *liveMerge, gate *startGate) (st messages.Status, ok bool) {
	if time.Now().UnixNano() >= e.Deadline {
		// Seed: the RC answers TIMEOUT at the deadline; a late answer would be a second one.
		a.stats.expired.Add(1)
		log.Warn().Msg("answer ready after the deadline: not sent")
		a.tellTimedOut(e, "answer ready after the deadline", time.Now()) // timeout.go
		return st, true
	}
	fs := &frameSender{a: a, e: e, content: content, id: nuid.Next(), gate: gate,
		limit: int(max(1024, min(int64(a.cfg.StreamWindow), a.cfg.NC.MaxPayload()-frameHeadroom)))}
	if gate != nil {
		fs.id = gate.stream
	} else if e.StreamStart {
		a.mu.Lock()
		fs.gate = a.openGateLocked(e.RequestID, fs.id)
		a.mu.Unlock()
		defer a.closeGate(fs.gate)
	}
	st = messages.StatusOK
	if err := fs.pipeline(w); err != nil {
		switch {
		case errors.Is(err, errStopped):
			// Cancelled by the RC (which answers) or the Agg stops: nothing more goes out.
			log.Info().Int("frames_sent", fs.frames).Msg("answer stream dropped")
			return st, true
		case fs.frames == 0 && lm != nil:
			return liveStatus(err), false
		case fs.frames == 0:
			return messages.Errorf(messages.CodeInternal, messages.CodeErr, "Agg could not encode the answer: %v", err), false
		}
		// Frames went out: the stream ends with the error, never looks whole.
		var se *statusError
		if lm != nil || errors.As(err, &se) || errors.Is(err, context.DeadlineExceeded) {
			st = liveStatus(err)
			st.AI = fmt.Sprintf("Answer stream broken after %d frames: %s", fs.frames, st.AI)
		} else {
			st = messages.Errorf(messages.CodeErr, messages.CodeErr, "Answer stream broken after %d frames: %v", fs.frames, err)
		}
		if err := fs.publish(nil, true, st); err != nil {
			log.Error().Err(err).Int("frames_sent", fs.frames).Msg("answer stream cut: its last frame not sent")
		}
	}
	a.metrics.merged(e.API, start)
	a.metrics.answered(st)
	if !st.IsOK() {
		a.stats.errors.Add(1)
	}
	log.Info().Stringer("rc", st.RC).Int64("bytes", fs.bytes).Int("rows", fs.rows).Int("frames", fs.frames).
		Int("partials", partials).Dur("elapsed", time.Since(start)).Msg("answered (stream)")
	a.tellDone(e, st)
	return st, true
}

// window is one window of the merged answer on its way to be sent.
type window struct {
	t    messages.Table
	last bool
	err  error // the merge failed (Windows.Err): t is not sent
}

// pipeline sends every window of w as frames, merging the next window while
// the one before is encoded and published: the two halves of the work run
// side by side, on two cores, instead of one after the other. It returns the
// error that stopped the stream. The merging goroutine is its own:
// it stops, and is waited for, before pipeline returns. At most three
// windows exist at a time (one merged, one queued, one sent), and their
// storage is reused from one frame to the next.
func (fs *frameSender) pipeline(w *merge.Windows) error {
	var next atomic.Int64 // rows of the next window
	next.Store(firstWindowRows)
	windows := make(chan window, 1)
	spare := make(chan messages.Table, 2)
	defer recycle(w, spare) // once the merging goroutine is done (the defer below)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	defer wg.Wait()
	defer close(stop)
	wg.Go(func() {
		defer close(windows)
		for more := true; more; {
			var t messages.Table
			select {
			case t = <-spare:
			default:
			}
			more = w.NextInto(&t, int(next.Load()))
			select {
			case windows <- window{t, !more, w.Err()}:
			case <-stop:
				return
			}
		}
	})
	for win := range windows {
		if win.err != nil {
			return win.err
		}
		size, err := fs.send(win.t, win.last)
		if err != nil {
			return err
		}
		// The next window: about 3/4 of a frame, from this one's bytes per row.
		if n := win.t.NumRows(); n > 0 && size > 0 {
			next.Store(max(1, int64(n)*int64(fs.limit)*3/4/int64(size)))
		}
		select {
		case spare <- win.t:
		default:
		}
	}
	return nil
}

// recycle gives the storage of the spare windows, which nothing reads any
// more, to the next answer's windows (merge.Windows.Recycle).
func recycle(w *merge.Windows, spare chan messages.Table) {
	for {
		select {
		case t := <-spare:
			w.Recycle(&t)
		default:
			return
		}
	}
}

// send encodes t as the next frame (frame 0 in a response envelope) and
// publishes it; a window that encodes above the limit goes as two halves. It
// returns the bytes of the largest frame it sent.
func (fs *frameSender) send(t messages.Table, last bool) (int, error) {
	data, own, err := fs.encode(t)
	if err != nil {
		return 0, err
	}
	if own {
		// NATS copies what it publishes: the buffer is the next frame's.
		defer messages.ReleaseBuffer(data)
	}
	if len(data) > fs.limit {
		n := t.NumRows()
		if n <= 1 {
			return 0, fmt.Errorf("one row encodes to %d bytes, above the frame limit of %d", len(data), fs.limit)
		}
		a, err := fs.send(t.Slice(0, n/2), false)
		if err != nil {
			return 0, err
		}
		b, err := fs.send(t.Slice(n/2, n), last)
		return max(a, b), err
	}
	if fs.gate != nil {
		if err := fs.gate.before(fs.frames, fs.e.Deadline); err != nil {
			return 0, err
		}
	}
	if err := fs.publish(data, last, messages.StatusOK); err != nil {
		return 0, err
	}
	fs.rows += t.NumRows()
	return len(data), nil
}

// encode is t as the next frame's data. own: data is t's msgpack form alone,
// in a buffer that may be given back once sent (messages.ReleaseBuffer), to
// be the next frame's: a frame's half MB is then not allocated and cleared
// afresh, frame after frame.
func (fs *frameSender) encode(t messages.Table) (data []byte, own bool, err error) {
	var b []byte
	if fs.content == messages.ContentJSON {
		b, err = t.MarshalJSON()
	} else {
		b, err = messages.EncodeTableMsgpack(t, 1, t.SizeHint())
	}
	if err != nil || fs.frames > 0 {
		return b, err == nil && fs.content != messages.ContentJSON, err
	}
	e := fs.e
	body, err := messages.Response{Header: messages.ResponseHeader{V: messages.RequestVersion, RequestID: answerID(e),
		API: e.API, LogCorr: e.LogCorr, Status: messages.StatusOK}, Payload: b, Content: fs.content}.EncodeOwn()
	return body.Join(), false, err
}

// publish sends one frame; st goes in the headers of frame 0 and of an
// error's last frame.
func (fs *frameSender) publish(data []byte, last bool, st messages.Status) error {
	e := fs.e
	h := nats.Header{}
	messages.Routing{RequestID: e.RequestID, API: e.API, AggID: fs.a.cfg.ID, LogCorr: e.LogCorr, Content: fs.content}.Write(h)
	if fs.frames == 0 || !st.IsOK() {
		st.Write(h)
	}
	messages.SetStreamFrame(h, fs.id, fs.frames, last)
	if err := fs.a.cfg.NC.PublishMsg(&nats.Msg{Subject: e.ReplyTo, Header: h, Data: data}); err != nil {
		return fmt.Errorf("frame %d of answer stream %s: %w", fs.frames, fs.id, err)
	}
	fs.frames++
	fs.bytes += int64(len(data))
	return nil
}
