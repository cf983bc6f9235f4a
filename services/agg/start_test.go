package agg

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/sg-project/sg/messages"
	"github.com/sg-project/sg/services/dap/demo"
	"github.com/sg-project/sg/subjects"
)

// startSetup sends request req's three whole partials of trade (time,
// price) to an Agg that streams in frames of 1 KiB, far more frames than
// messages.StreamStartFrames, with the expectation start (StreamStart) and
// deadline.
func startSetup(t *testing.T, req string, start bool, deadline time.Time) *env {
	t.Helper()
	e := newEnv(t, func(c *Config) { c.StreamWindow = 1024 })
	args, enc := startPartials(t)
	e.startRequest(req, start, deadline, args, enc)
	return e
}

// startPartials are the encoded partials startSetup sends, and their args.
func startPartials(t *testing.T) (messages.GetDataArgs, [][]byte) {
	t.Helper()
	args := messages.GetDataArgs{Table: demo.Trade, StartTS: t0, EndTS: t0.Add(2 * time.Hour), Columns: []string{"time", "price"}}
	enc, _ := partials(t, args, demo.Config{Seed: 3})
	return args, enc
}

// startRequest sends request req's expectation (a stream, StreamStart
// start) and its partials enc, one portion each.
func (e *env) startRequest(req string, start bool, deadline time.Time, args messages.GetDataArgs, enc [][]byte) {
	e.t.Helper()
	var refs []messages.PortionRef
	for i := range enc {
		refs = append(refs, ref(messages.PortionID(i+1), 1))
	}
	x := expectation(req, "getData", args, refs...)
	x.Stream, x.StreamStart, x.Deadline = true, start, deadline.UnixNano()
	e.expect(x)
	for i, b := range enc {
		e.partial(okPartial(req, refs[i], fmt.Sprint("dap", i), b))
	}
}

// nextFrame reads the next frame of the answer stream and checks its place.
func (e *env) nextFrame(seq int) (*nats.Msg, messages.StreamFrame) {
	e.t.Helper()
	m, err := e.answers.NextMsg(wait)
	if err != nil {
		e.t.Fatalf("frame %d: %v", seq, err)
	}
	f, err := messages.ReadStreamFrame(m.Header)
	if err != nil || f.Seq != seq {
		e.t.Fatalf("frame %+v (%v) where %d was due", f, err, seq)
	}
	return m, f
}

// signal sends a start signal as a GW does, and waits until the Agg took it.
func (e *env) signal(req, stream string) {
	e.t.Helper()
	h := nats.Header{}
	h.Set(messages.HdrRequestID, req)
	h.Set(messages.HdrStreamID, stream)
	e.sendTaken(&nats.Msg{Subject: subj.AggStart("agg1"), Header: h})
}

// sendTaken publishes m and waits until the Agg took it (Agg.changed).
func (e *env) sendTaken(m *nats.Msg) {
	e.t.Helper()
	took := make(chan struct{}, 1)
	f := func() {
		select {
		case took <- struct{}{}:
		default:
		}
	}
	e.agg.changed.Store(&f)
	defer e.agg.changed.Store(nil)
	if err := e.nc.PublishMsg(m); err != nil {
		e.t.Fatal(err)
	}
	select {
	case <-took:
	case <-time.After(wait):
		e.t.Fatalf("%s not taken", m.Subject)
	}
}

// noFrame checks that no frame came (what the Agg published before it is
// here once a round trip to the server is over).
func (e *env) noFrame(why string) {
	e.t.Helper()
	if err := e.nc.Flush(); err != nil {
		e.t.Fatal(err)
	}
	if m, err := e.answers.NextMsg(0); err == nil {
		e.t.Fatalf("frame %s sent %s", m.Header.Get(messages.HdrStreamSeq), why)
	}
}

// checkWaits checks sg_agg_stream_start_waits_total (begun) and
// sg_agg_stream_start_waits_ended_total by outcome (those not in ended: 0).
func (e *env) checkWaits(begun int, ended map[string]int) {
	e.t.Helper()
	read := func(c prometheus.Counter) int {
		var m dto.Metric
		if err := c.Write(&m); err != nil {
			e.t.Fatal(err)
		}
		return int(m.GetCounter().GetValue())
	}
	if n := read(e.agg.metrics.startWaits); n != begun {
		e.t.Errorf("sg_agg_stream_start_waits_total %d, want %d", n, begun)
	}
	for _, o := range []string{waitSignal, waitCancel, waitStop, waitDeadline} {
		if n := read(e.agg.metrics.startWaitsEnded.WithLabelValues(o)); n != ended[o] {
			e.t.Errorf("sg_agg_stream_start_waits_ended_total{outcome=%q} %d, want %d", o, n, ended[o])
		}
	}
}

// waiting reports whether req's stream waits for its start signal.
func (e *env) waiting(req string) bool {
	e.agg.mu.Lock()
	defer e.agg.mu.Unlock()
	g := e.agg.gates[req]
	if g == nil {
		return false
	}
	select {
	case <-g.done:
		return false
	default:
		return true
	}
}

// An Agg the GW paces sends messages.StreamStartFrames frames and waits for
// the GW's start signal; signals that do not name its stream (another
// stream id, another request) leave it waiting; the signal sends the rest,
// whole.
func TestStreamWaitsForStartSignal(t *testing.T) {
	e := startSetup(t, "s1", true, time.Now().Add(time.Minute))
	var stream string
	rows := 0
	for seq := range messages.StreamStartFrames {
		m, f := e.nextFrame(seq)
		if f.End {
			t.Fatalf("the stream ended at frame %d: too short to test", seq)
		}
		stream = f.ID
		if seq > 0 {
			tb := decodeTable(t, m.Data)
			rows += tb.NumRows()
		}
	}
	for _, forged := range [][2]string{{"s1", "not" + stream}, {"s2", stream}, {"s1", "a.b"}, {"s1", strings.Repeat("x", 200)}} {
		e.signal(forged[0], forged[1])
		if !e.waiting("s1") {
			t.Fatalf("signal %q released the stream %s of s1", forged, stream)
		}
	}
	e.noFrame("before the start signal")
	e.signal("s1", stream)
	for seq := messages.StreamStartFrames; ; seq++ {
		m, f := e.nextFrame(seq)
		if st, err := messages.ReadStatus(m.Header); err == nil && !st.IsOK() {
			t.Fatalf("frame %d: %+v", seq, st)
		}
		tb := decodeTable(t, m.Data)
		rows += tb.NumRows()
		if f.End {
			break
		}
	}
	if rows == 0 {
		t.Fatal("no rows after frame 0")
	}
	if d := e.aggDone(); d.RequestID != "s1" || !d.Status.IsOK() {
		t.Fatalf("done notice %+v", d)
	}
	e.checkWaits(1, map[string]int{waitSignal: 1})
}

// Without StreamStart (an older GW or RC) nothing waits: every frame goes.
func TestStreamWithoutStartSignal(t *testing.T) {
	e := startSetup(t, "s1", false, time.Now().Add(time.Minute))
	for seq := 0; ; seq++ {
		if _, f := e.nextFrame(seq); f.End {
			if seq < messages.StreamStartFrames {
				t.Fatalf("the stream ended at frame %d: too short to test", seq)
			}
			break
		}
	}
	e.checkWaits(0, nil)
}

// A stream whose start signal never comes ends at the request's deadline as
// a stream that ran out of time does: a TIMEOUT frame after the first
// messages.StreamStartFrames.
func TestStreamStartWaitEndsAtDeadline(t *testing.T) {
	e := startSetup(t, "s1", true, time.Now().Add(2*time.Second))
	for seq := range messages.StreamStartFrames {
		e.nextFrame(seq)
	}
	m, f := e.nextFrame(messages.StreamStartFrames)
	st, err := messages.ReadStatus(m.Header)
	if err != nil || st.RC != messages.CodeTimeout || !f.End || len(m.Data) != 0 {
		t.Fatalf("after the deadline: frame %+v, status %+v (%v), %d bytes; want a TIMEOUT end", f, st, err, len(m.Data))
	}
	if d := e.aggDone(); d.RequestID != "s1" || d.Status.RC != messages.CodeTimeout {
		t.Fatalf("done notice %+v", d)
	}
	e.checkWaits(1, map[string]int{waitDeadline: 1})
	// The gate is forgotten as the answer ends, just after its done notice:
	// once the Agg stopped (it waits for its answers), none is left.
	e.stop()
	e.agg.mu.Lock()
	defer e.agg.mu.Unlock()
	if g := e.agg.gates["s1"]; g != nil {
		t.Fatal("the stream's start gate outlived it")
	}
}

// The RC's cancel ends the wait: nothing more is sent.
func TestStreamStartWaitEndsOnCancel(t *testing.T) {
	e := startSetup(t, "s1", true, time.Now().Add(time.Minute))
	for seq := range messages.StreamStartFrames {
		e.nextFrame(seq)
	}
	if !e.waiting("s1") {
		t.Fatal("not waiting for the start signal")
	}
	h := nats.Header{}
	h.Set(messages.HdrRequestID, "s1")
	e.sendTaken(&nats.Msg{Subject: subj.AggCancel("agg1"), Header: h})
	if e.waiting("s1") {
		t.Fatal("still waiting after the cancel")
	}
	// The answer ends with no frame more (an Agg that stops would send
	// its error frame): Run's wait for answers returns.
	e.stop()
	e.noFrame("after the cancel")
	e.checkWaits(1, map[string]int{waitCancel: 1})
}

// An Agg that stops ends the wait with its error frame (the GW tells its
// caller the answer was cut), counted as a stop.
func TestStreamStartWaitEndsWhenTheAggStops(t *testing.T) {
	e := startSetup(t, "s1", true, time.Now().Add(time.Minute))
	for seq := range messages.StreamStartFrames {
		e.nextFrame(seq)
	}
	if !e.waiting("s1") {
		t.Fatal("not waiting for the start signal")
	}
	e.stop()
	m, f := e.nextFrame(messages.StreamStartFrames)
	if st, err := messages.ReadStatus(m.Header); err != nil || st.IsOK() || !f.End {
		t.Fatalf("after the stop: frame %+v, status %+v (%v); want an error end", f, st, err)
	}
	e.checkWaits(1, map[string]int{waitStop: 1})
}

// The RC's cancel that comes once the request is being answered but before
// its stream began (the merge is set up on an answerer) stops the stream
// all the same: no frame goes, and it does not wait for a start signal
// until its deadline.
func TestStreamCancelledBeforeItsFirstFrame(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.StreamWindow = 1024 })
	args, enc := startPartials(t)
	e.cancelBeforeFirstFrame("s1", func() { e.startRequest("s1", true, time.Now().Add(time.Minute), args, enc) })
}

// cancelBeforeFirstFrame starts request req's answer (start), holds the
// answerer before its first frame (Agg.beforeAnswer), sends the RC's cancel
// and lets it go on: no frame may go out.
func (e *env) cancelBeforeFirstFrame(req string, start func()) {
	e.t.Helper()
	held, release := make(chan struct{}), make(chan struct{})
	hook := func() {
		close(held)
		<-release
	}
	e.agg.beforeAnswer.Store(&hook)
	released := false
	defer func() { // a failure must not leave the answerer held: the Agg's stop waits for it
		if !released {
			close(release)
		}
	}()
	start()
	select {
	case <-held:
	case <-time.After(wait):
		e.t.Fatal("the answer did not begin")
	}
	h := nats.Header{}
	h.Set(messages.HdrRequestID, req)
	e.sendTaken(&nats.Msg{Subject: subj.AggCancel("agg1"), Header: h})
	// sendTaken may have seen the last partial's own change, noted after
	// the answer began: wait until the cancel reached the stream's gate.
	e.agg.mu.Lock()
	g := e.agg.gates[req]
	e.agg.mu.Unlock()
	if g == nil {
		e.t.Fatal("no start gate while the answer is held before its first frame")
	}
	select {
	case <-g.done:
	case <-time.After(wait):
		e.t.Fatal("the cancel did not reach the stream's gate")
	}
	released = true
	close(release)
	// Stopping the Agg waits for the answer; one still waiting for its
	// start signal would send its error frame now.
	e.stop()
	e.noFrame("after the cancel")
}

// A live merge's stream (a stream reader's rows, in windows) registers its
// start gate as the merge starts, as a gathered answer's does: the RC's
// cancel that comes once its first windows are fetched, before its first
// frame, ends it, and no frame goes out (before, 16 frames went out after
// the cancel and the stream then waited for its start signal).
func TestLiveStreamCancelledBeforeItsFirstFrame(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.StreamWindow = 1024 })
	args, _ := startPartials(t)
	_, dec := partials(t, args, demo.Config{Seed: 3})
	var refs []messages.PortionRef
	var daps []*windowDAP
	for i, p := range dec {
		// Two windows each, the first with every row but one: far more
		// than StreamStartFrames frames of 1 KiB before a second is needed.
		d := &windowDAP{e: e, req: "live1", ref: ref(messages.PortionID(i+1), 1), dap: fmt.Sprint("dap", i),
			wins: windowsOf(t, p, max(1, p.Rows.NumRows()-1))}
		if len(d.wins) != 2 {
			t.Fatalf("portion %d in %d windows, want 2", i, len(d.wins))
		}
		daps, refs = append(daps, d), append(refs, d.ref)
	}
	x := expectation("live1", "getData", args, refs...)
	x.Stream, x.StreamStart, x.Deadline = true, true, time.Now().Add(time.Minute).UnixNano()
	e.cancelBeforeFirstFrame("live1", func() {
		e.expect(x)
		for _, d := range daps {
			e.partial(d.window(0)) // the second is still to come: a live merge
		}
	})
}

// A stream waiting for its start signal still holds its partials: they
// count in MaxHeldBytes until it ends, so that streams left waiting (a GW
// that died before it answered) cannot grow the Agg past its bound; the
// request that would pass it is answered RATE_LIMITED meanwhile.
func TestWaitingStreamCountsInHeldBytes(t *testing.T) {
	args, enc := startPartials(t)
	blob, err := msgpack.Marshal(bytes.Repeat([]byte{1}, 100))
	if err != nil {
		t.Fatal(err)
	}
	total := 0
	for _, b := range enc {
		total += len(b)
	}
	e := newEnv(t, func(c *Config) { c.StreamWindow, c.MaxHeldBytes = 1024, int64(total+len(blob)-1) })
	e.startRequest("s1", true, time.Now().Add(time.Minute), args, enc)
	var stream string
	for seq := range messages.StreamStartFrames {
		_, f := e.nextFrame(seq)
		stream = f.ID
	}
	ping := func(id string) messages.Response {
		t.Helper()
		e.expect(expectation(id, subjects.APIPing, nil, ref(1, 1)))
		e.partial(okPartial(id, ref(1, 1), "dap0", blob))
		resp, _ := e.answer()
		if resp.Header.RequestID != id {
			t.Fatalf("answer to %s, want %s", resp.Header.RequestID, id)
		}
		return resp
	}
	if resp := ping("s2"); resp.Header.RC != messages.CodeRateLimited {
		t.Fatalf("while s1 waits: %+v, want RATE_LIMITED", resp.Header)
	}
	if d := e.aggDone(); d.RequestID != "s2" {
		t.Fatalf("done notice %+v, want s2's", d)
	}
	e.signal("s1", stream)
	for seq := messages.StreamStartFrames; ; seq++ {
		if _, f := e.nextFrame(seq); f.End {
			break
		}
	}
	if d := e.aggDone(); d.RequestID != "s1" || !d.Status.IsOK() {
		t.Fatalf("done notice %+v", d)
	}
	// The stream ended: its bytes were released.
	if resp := ping("s3"); resp.Header.RC != messages.CodeOK {
		t.Fatalf("after s1: %+v, want OK", resp.Header)
	}
}
