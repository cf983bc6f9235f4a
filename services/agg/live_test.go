package agg

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/sg-project/sg/messages"
	"github.com/sg-project/sg/services/agg/merge"
	"github.com/sg-project/sg/services/dap/demo"
)

// windowDAP plays one DAP that sends a portion's partial in windows, as
// services/dap does: the first InitialPartialCredit at once, the others as
// the Agg grants them, none after a Stop.
type windowDAP struct {
	e       *env
	req     string
	ref     messages.PortionRef
	dap     string
	wins    [][]byte // encoded windows
	sent    int
	granted uint32
	stopped bool
}

// windowsOf cuts a row partial into windows of n rows, encoded.
func windowsOf(t *testing.T, p merge.Partial, n int) [][]byte {
	t.Helper()
	var out [][]byte
	for lo := 0; lo == 0 || lo < p.Rows.NumRows(); lo += n {
		hi := min(lo+n, p.Rows.NumRows())
		b, err := merge.EncodePartial(merge.Partial{Version: merge.PartialVersion, Rows: p.Rows.Slice(lo, hi), Times: p.Times[lo:hi]})
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, b)
	}
	return out
}

func (d *windowDAP) window(i int) messages.PartialResult {
	p := okPartial(d.req, d.ref, d.dap, d.wins[i])
	p.Window, p.More = uint32(i), i < len(d.wins)-1
	return p
}

// send sends the windows the credit allows.
func (d *windowDAP) send() {
	for !d.stopped && d.sent < len(d.wins) && uint32(d.sent) < max(d.granted, messages.InitialPartialCredit) {
		d.e.partial(d.window(d.sent))
		d.sent++
	}
}

// credit applies one credit message; it reports false when it is not this DAP's.
func (d *windowDAP) credit(t *testing.T, m *nats.Msg) bool {
	c, err := messages.DecodeValid[messages.PartialCredit](m.Data)
	if err != nil {
		t.Fatal(err)
	}
	if c.RequestID != d.req || c.Ref() != d.ref || m.Subject != subj.DAPCredit(d.dap) {
		return false
	}
	if c.AggID != "agg1" {
		t.Fatalf("credit from %q", c.AggID)
	}
	d.granted = max(d.granted, c.Windows)
	d.stopped = d.stopped || c.Stop
	return true
}

// readStream reads an answer stream to its end: the rows of column v (or
// every frame's row count), the last frame's status, and the frame count.
func (e *env) readStream(col string, onWait func()) (vals []string, rows int, last messages.Status, frames int) {
	e.t.Helper()
	return e.readStreamFrom(0, col, onWait)
}

// readStreamFrom is readStream after the frames before first were read.
func (e *env) readStreamFrom(first int, col string, onWait func()) (vals []string, rows int, last messages.Status, frames int) {
	e.t.Helper()
	frames = first
	deadline := time.Now().Add(wait)
	for {
		m, err := e.answers.NextMsg(20 * time.Millisecond)
		if err == nats.ErrTimeout && time.Now().Before(deadline) {
			onWait()
			continue
		}
		if err != nil {
			e.t.Fatalf("frame %d: %v", frames, err)
		}
		if frames == 0 && !messages.IsStreamFrame(m.Header) {
			// A whole answer: an error before any frame went out.
			r, err := messages.DecodeResponse(m.Header, m.Data)
			if err != nil {
				e.t.Fatal(err)
			}
			return nil, 0, r.Header.Status, 0
		}
		f, err := messages.ReadStreamFrame(m.Header)
		if err != nil {
			e.t.Fatalf("frame %d: %v", frames, err)
		}
		if f.Seq != frames {
			e.t.Fatalf("frame %d where %d was due", f.Seq, frames)
		}
		frames++
		data := m.Data
		if f.Seq == 0 {
			r, err := messages.DecodeResponse(m.Header, m.Data)
			if err != nil {
				e.t.Fatal(err)
			}
			data, last = r.Payload, r.Header.Status
		}
		if st, err := messages.ReadStatus(m.Header); err == nil && f.Seq > 0 {
			last = st
		}
		if len(data) > 0 {
			tb := decodeTable(e.t, data)
			rows += tb.NumRows()
			if c := tb.Col(col); c != nil {
				for i := range tb.NumRows() {
					vals = append(vals, fmt.Sprint(c.Value(i)))
				}
			}
		}
		if f.End {
			return vals, rows, last, frames
		}
	}
}

// liveSetup is three DAPs whose partials of trade come in windows of 7 rows.
func liveSetup(t *testing.T, args messages.GetDataArgs, stream bool) (*env, []*windowDAP, *nats.Subscription, messages.AggExpectation, merge.Partial) {
	e := newEnv(t, nil)
	credits := subscribe(t, e.nc, subj.DAPCredit("*"))
	_, dec := partials(t, args, demo.Config{Seed: 3})
	want, err := merge.Merge(args, dec)
	if err != nil {
		t.Fatal(err)
	}
	var daps []*windowDAP
	var refs []messages.PortionRef
	for i, p := range dec {
		d := &windowDAP{e: e, req: "live1", ref: ref(messages.PortionID(i+1), 1), dap: fmt.Sprint("dap", i), wins: windowsOf(t, p, 7)}
		daps, refs = append(daps, d), append(refs, d.ref)
	}
	x := expectation("live1", "getData", args, refs...)
	x.Stream = stream
	return e, daps, credits, x, merge.Partial{Rows: want}
}

// pump delivers every credit that came to its DAP, which sends what it may.
func pump(t *testing.T, credits *nats.Subscription, daps []*windowDAP) {
	for {
		m, err := credits.NextMsg(0)
		if err != nil {
			return
		}
		for _, d := range daps {
			if d.credit(t, m) {
				d.send()
			}
		}
	}
}

func rowStrings(tb messages.Table, col string) []string {
	c := tb.Col(col)
	out := make([]string, 0, tb.NumRows())
	for i := range tb.NumRows() {
		out = append(out, fmt.Sprint(c.Value(i)))
	}
	return out
}

// A stream reader's answer merges the DAPs' windows as they come, under
// credit: the same rows, in the same order, as the merge of whole partials,
// with no DAP ever sending beyond its credit (the Agg would fail the request).
func TestLiveMergeOfWindows(t *testing.T) {
	args := messages.GetDataArgs{Table: demo.Trade, StartTS: t0, EndTS: t0.Add(2 * time.Hour), Columns: []string{"time", "sym", "price"}}
	e, daps, credits, x, want := liveSetup(t, args, true)
	e.expect(x)
	for _, d := range daps {
		d.send()
	}
	got, _, st, frames := e.readStream("price", func() { pump(t, credits, daps) })
	if !st.IsOK() {
		t.Fatalf("status %+v", st)
	}
	if w := rowStrings(want.Rows, "price"); strings.Join(got, ",") != strings.Join(w, ",") {
		t.Fatalf("%d rows streamed in %d frames, want the %d of the merge", len(got), frames, len(w))
	}
	if d := e.aggDone(); !d.Status.IsOK() {
		t.Fatalf("AggDone %+v", d)
	}
	for _, d := range daps {
		if d.sent != len(d.wins) {
			t.Fatalf("%s sent %d of %d windows", d.dap, d.sent, len(d.wins))
		}
	}
	if s := e.agg.Stats(); s.Malformed != 0 || s.Answered != 1 || s.Pending != 0 {
		t.Fatalf("stats %+v", s)
	}
}

// A limit ends the stream early and tells the DAPs still sending to stop.
func TestLiveMergeLimitStopsTheDAPs(t *testing.T) {
	args := messages.GetDataArgs{Table: demo.Trade, StartTS: t0, EndTS: t0.Add(2 * time.Hour), Columns: []string{"time", "price"}, Limit: 10}
	e, daps, credits, x, want := liveSetup(t, args, true)
	e.expect(x)
	for _, d := range daps {
		d.send()
	}
	got, _, st, _ := e.readStream("price", func() { pump(t, credits, daps) })
	if w := rowStrings(want.Rows, "price"); !st.IsOK() || strings.Join(got, ",") != strings.Join(w, ",") {
		t.Fatalf("status %+v, %d rows, want %d", st, len(got), len(w))
	}
	e.aggDone()
	// Every DAP with windows left hears Stop.
	deadline := time.Now().Add(wait)
	for {
		pump(t, credits, daps)
		open := 0
		for _, d := range daps {
			if d.sent < len(d.wins) && !d.stopped {
				open++
			}
		}
		if open == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d DAPs not told to stop", open)
		}
		if m, err := credits.NextMsg(wait); err == nil {
			for _, d := range daps {
				if d.credit(t, m) {
					d.send()
				}
			}
		}
	}
}

// A caller that does not read streams gets the whole answer; windows are
// credited as they come.
func TestWindowsGatheredForAWholeAnswer(t *testing.T) {
	for _, early := range []int{parallelDecodeBytes, 0} {
		// 0: every window (of 7 rows) is decoded as it comes (early.go).
		t.Run(fmt.Sprint("decoded early from ", early, " bytes"), func(t *testing.T) {
			was := earlyDecodeBytes
			earlyDecodeBytes = early
			t.Cleanup(func() { earlyDecodeBytes = was }) // registered before the Agg is: run once it has stopped
			windowsGatheredForAWholeAnswer(t)
		})
	}
}

func windowsGatheredForAWholeAnswer(t *testing.T) {
	args := messages.GetDataArgs{Table: demo.Trade, StartTS: t0, EndTS: t0.Add(2 * time.Hour), Columns: []string{"time", "price"}}
	e, daps, credits, x, want := liveSetup(t, args, false)
	e.expect(x)
	for _, d := range daps {
		d.send()
	}
	var resp messages.Response
	for got, end := false, time.Now().Add(wait); !got; {
		m, err := e.answers.NextMsg(20 * time.Millisecond)
		if err == nats.ErrTimeout && time.Now().Before(end) {
			pump(t, credits, daps)
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if resp, err = messages.DecodeResponse(m.Header, m.Data); err != nil {
			t.Fatal(err)
		}
		got = true
	}
	if !resp.Header.Status.IsOK() {
		t.Fatalf("status %+v", resp.Header.Status)
	}
	tb := decodeTable(t, resp.Payload)
	if strings.Join(rowStrings(tb, "price"), ",") != strings.Join(rowStrings(want.Rows, "price"), ",") {
		t.Fatalf("%d rows, want %d", tb.NumRows(), want.Rows.NumRows())
	}
}

// Once the stream has begun, a portion superseded or failed cannot be taken
// back: the stream ends with an error frame, never looking whole.
func TestLiveMergeEndsWithAnErrorFrame(t *testing.T) {
	for _, how := range []string{"superseded", "failed"} {
		t.Run(how, func(t *testing.T) {
			args := messages.GetDataArgs{Table: demo.Trade, StartTS: t0, EndTS: t0.Add(2 * time.Hour), Columns: []string{"time", "price"}}
			e, daps, credits, x, _ := liveSetup(t, args, true)
			e.expect(x)
			for _, d := range daps {
				d.send()
			}
			// Credits go round until the first frame is out; then no more.
			var m *nats.Msg
			for end := time.Now().Add(wait); m == nil; {
				var err error
				if m, err = e.answers.NextMsg(20 * time.Millisecond); err == nats.ErrTimeout && time.Now().Before(end) {
					pump(t, credits, daps)
				} else if err != nil {
					t.Fatal(err)
				}
			}
			if f, err := messages.ReadStreamFrame(m.Header); err != nil || f.Seq != 0 || f.End {
				t.Fatalf("first frame %+v %v", f, err)
			}
			switch how {
			case "superseded":
				y := x
				y.Seq, y.Args, y.Expect, y.Supersede = 2, nil, []messages.PortionRef{ref(100, 2)}, []messages.PortionRef{daps[0].ref}
				e.expect(y)
			case "failed":
				p := okPartial("live1", daps[1].ref, daps[1].dap, nil)
				p.Status = messages.Errorf(messages.CodeTimeout, messages.CodeErr, "DAP dap1: portion did not complete before its deadline")
				e.partial(p)
			}
			_, _, st, _ := e.readStreamFrom(1, "price", func() {})
			if st.IsOK() {
				t.Fatal("the stream ended OK")
			}
			if how == "failed" && st.RC != messages.CodeTimeout {
				t.Fatalf("status %+v, want the DAP's", st)
			}
			if d := e.aggDone(); d.Status.IsOK() || d.TimedOut {
				t.Fatalf("AggDone %+v", d)
			}
		})
	}
}

// Before the stream begins, a superseded attempt's windows are dropped and
// its replacement's make the answer.
func TestSupersededBeforeTheStreamBegins(t *testing.T) {
	args := messages.GetDataArgs{Table: demo.Trade, StartTS: t0, EndTS: t0.Add(2 * time.Hour), Columns: []string{"time", "price"}}
	e, daps, credits, x, want := liveSetup(t, args, true)
	e.expect(x)
	daps[0].send() // the first attempt sends its first windows, then is lost
	y := x
	y.Seq, y.Args, y.Expect, y.Supersede = 2, nil, []messages.PortionRef{ref(100, 2)}, []messages.PortionRef{daps[0].ref}
	e.expect(y)
	e.expectationsApplied()
	again := &windowDAP{e: e, req: "live1", ref: ref(100, 2), dap: "dap9", wins: daps[0].wins}
	daps[0] = again
	for _, d := range daps {
		d.send()
	}
	got, _, st, _ := e.readStream("price", func() { pump(t, credits, daps) })
	if w := rowStrings(want.Rows, "price"); !st.IsOK() || strings.Join(got, ",") != strings.Join(w, ",") {
		t.Fatalf("status %+v, %d rows, want %d", st, len(got), len(w))
	}
}

// Hostile windows fail the request and are counted: without credit, out of
// order, first not window 0, from another DAP.
func TestHostileWindows(t *testing.T) {
	for _, how := range []string{"no credit", "out of order", "not first", "other DAP"} {
		t.Run(how, func(t *testing.T) {
			args := messages.GetDataArgs{Table: demo.Trade, StartTS: t0, EndTS: t0.Add(2 * time.Hour), Columns: []string{"time", "price"}}
			e, daps, _, x, _ := liveSetup(t, args, true)
			x.Expect = x.Expect[:2] // p1 sends nothing: the stream never begins, nothing is credited
			e.expect(x)
			e.expectationsApplied() // before it, windows are credited as they come
			d := daps[0]
			switch how {
			case "no credit":
				for i := range 3 {
					e.partial(d.window(i))
				}
			case "out of order":
				e.partial(d.window(0))
				e.partial(d.window(0))
			case "not first":
				e.partial(d.window(1))
			case "other DAP":
				e.partial(d.window(0))
				p := d.window(1)
				p.DAPID = "dap7"
				e.partial(p)
			}
			if _, _, st, _ := e.readStream("price", func() {}); st.IsOK() {
				t.Fatal("answer OK, want an error")
			}
			if s := e.agg.Stats(); s.Malformed == 0 {
				t.Fatalf("stats %+v: nothing counted malformed", s)
			}
		})
	}
}

// expectationsApplied waits until the expectations sent so far are applied:
// a marker request's, on the same subscription, is answered after them.
func (e *env) expectationsApplied() {
	e.t.Helper()
	marks := subscribe(e.t, e.nc, subj.GWAnswer("gw2", "mark"))
	x := expectation("mark", "getData", messages.GetDataArgs{Table: "t"})
	x.ReplyTo = subj.GWAnswer("gw2", "mark")
	e.expect(x)
	if _, err := marks.NextMsg(wait); err != nil {
		e.t.Fatalf("marker not answered: %v", err)
	}
}

// Windows that all came before the expectation (credited as they came) make
// a stream reader's answer too: merged portion by portion, as whole partials.
func TestWindowsBeforeTheExpectationStream(t *testing.T) {
	args := messages.GetDataArgs{Table: demo.Trade, StartTS: t0, EndTS: t0.Add(2 * time.Hour), Columns: []string{"time", "price"}, Limit: 1000}
	e, daps, credits, x, want := liveSetup(t, args, true)
	for _, d := range daps {
		d.send()
	}
	for end := time.Now().Add(wait); ; {
		open := 0
		for _, d := range daps {
			if d.sent < len(d.wins) {
				open++
			}
		}
		if open == 0 {
			break
		}
		if time.Now().After(end) {
			t.Fatalf("%d DAPs not credited all their windows", open)
		}
		m, err := credits.NextMsg(wait)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range daps {
			if d.credit(t, m) {
				d.send()
			}
		}
	}
	e.expect(x)
	got, _, st, _ := e.readStream("price", func() {})
	if w := rowStrings(want.Rows, "price"); !st.IsOK() || strings.Join(got, ",") != strings.Join(w, ",") {
		t.Fatalf("status %+v, %d rows, want %d", st, len(got), len(w))
	}
}

// An Agg that stops while an answer streams ends the stream with an error
// frame and returns, rather than wait for windows until the deadline.
func TestStopEndsALiveStream(t *testing.T) {
	nc := startNATS(t)
	a, err := New(Config{ID: "agg1", NC: nc, Subjects: subj})
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, nc: nc, agg: a, answers: subscribe(t, nc, subj.GWAnswerPattern("gw1")), done: subscribe(t, nc, subj.RCAggDone("rc1"))}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ran := make(chan error, 1)
	go func() { ran <- a.Run(ctx) }()
	select {
	case <-a.Ready():
	case <-time.After(wait):
		t.Fatal("Agg not ready")
	}
	args := messages.GetDataArgs{Table: demo.Trade, StartTS: t0, EndTS: t0.Add(2 * time.Hour), Columns: []string{"time", "price"}}
	_, dec := partials(t, args, demo.Config{Seed: 3})
	var refs []messages.PortionRef
	var daps []*windowDAP
	for i, p := range dec {
		d := &windowDAP{e: e, req: "live1", ref: ref(messages.PortionID(i+1), 1), dap: fmt.Sprint("dap", i), wins: windowsOf(t, p, 7)}
		daps, refs = append(daps, d), append(refs, d.ref)
	}
	x := expectation("live1", "getData", args, refs...)
	x.Stream = true
	e.expect(x)
	credits := subscribe(t, nc, subj.DAPCredit("*"))
	for _, d := range daps {
		d.send()
	}
	var first *nats.Msg
	for end := time.Now().Add(wait); first == nil; {
		if first, err = e.answers.NextMsg(20 * time.Millisecond); err == nats.ErrTimeout && time.Now().Before(end) {
			pump(t, credits, daps)
		} else if err != nil {
			t.Fatal(err)
		}
	}
	cancel() // no more credit goes out: the merge waits for a window
	select {
	case err := <-ran:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(wait):
		t.Fatal("Run did not return while an answer streamed")
	}
	if _, _, st, _ := e.readStreamFrom(1, "price", func() {}); st.IsOK() {
		t.Fatal("the stream ended OK")
	}
}
