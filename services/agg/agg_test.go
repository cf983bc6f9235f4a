package agg

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/sg-project/sg/messages"
	"github.com/sg-project/sg/services/agg/merge"
	"github.com/sg-project/sg/services/dap/demo"
	"github.com/sg-project/sg/subjects"
	"github.com/vmihailenco/msgpack/v5"
)

var aggArgs = messages.GetDataArgs{Table: demo.Trade, GroupBy: []string{"region", "sym"},
	Agg: []messages.AggSpec{{Name: "n", Func: messages.AggCount}, {Name: "px", Func: messages.AggAvg, Column: "price"},
		{Name: "open", Func: messages.AggFirst, Column: "price"}}}

func TestMergedAnswerInEitherOrder(t *testing.T) {
	enc, dec := partials(t, aggArgs, demo.Config{Seed: 1})
	want, err := merge.Merge(aggArgs, dec)
	if err != nil {
		t.Fatal(err)
	}
	refs := []messages.PortionRef{ref(1, 1), ref(2, 1), ref(3, 1)}
	for _, expectFirst := range []bool{true, false} {
		t.Run(fmt.Sprint("expectFirst=", expectFirst), func(t *testing.T) {
			e := newEnv(t, nil)
			x := expectation("req1", subjects.APIGetData, aggArgs, refs...)
			if expectFirst {
				e.expect(x)
			}
			for i := len(refs) - 1; i >= 0; i-- { // any order
				e.partial(okPartial("req1", refs[i], fmt.Sprint("dap", i), enc[i]))
			}
			if !expectFirst {
				e.expect(x)
			}
			resp, h := e.answer()
			if !resp.Header.Status.IsOK() || resp.Header.RequestID != "req1" || resp.Header.API != subjects.APIGetData ||
				resp.Header.LogCorr != "corr-req1" || resp.Content != messages.ContentMsgpack {
				t.Fatalf("header %+v", resp.Header)
			}
			if st, err := messages.ReadStatus(h); err != nil || !st.IsOK() || h.Get(messages.HdrRequestID) != "req1" || h.Get(messages.HdrAPI) != subjects.APIGetData {
				t.Fatalf("NATS headers %v (%v)", h, err)
			}
			if got := decodeTable(t, resp.Payload); !reflect.DeepEqual(got, want) {
				t.Fatalf("answer differs from merge.Merge:\n got %d rows\nwant %d rows", got.NumRows(), want.NumRows())
			}
			if d := e.aggDone(); d.RequestID != "req1" || d.AggID != "agg1" || !d.Status.IsOK() {
				t.Fatalf("AggDone %+v", d)
			}
		})
	}
}

// Seed (Retries): the RC supersedes a label set's earlier attempt; its partials, and
// partials of portions never expected, do not count, whenever they arrive.
func TestSupersededAndUnexpectedPartialsIgnored(t *testing.T) {
	enc, dec := partials(t, aggArgs, demo.Config{Seed: 2})
	e := newEnv(t, nil)
	x := expectation("req1", subjects.APIGetData, aggArgs, ref(1, 1), ref(2, 1))
	x.Sealed = false
	e.expect(x)
	e.partial(okPartial("req1", ref(2, 1), "dap-old", enc[2])) // the attempt to be superseded
	e.partial(okPartial("req1", ref(1, 1), "dap0", enc[0]))
	e.partial(okPartial("req1", ref(1, 1), "dap0", enc[2])) // a duplicate of a: ignored
	// Seq 3 before Seq 2: held until Seq 2 comes.
	x3 := x
	x3.Seq, x3.Expect, x3.Supersede, x3.Sealed = 3, nil, nil, true
	e.expect(x3)
	x2 := x
	x2.Seq, x2.Expect, x2.Supersede = 2, []messages.PortionRef{ref(2, 2)}, []messages.PortionRef{ref(2, 1)}
	e.expect(x2)
	e.partial(okPartial("req1", ref(2, 1), "dap-old", enc[2]))   // late, superseded
	e.partial(okPartial("req1", ref(26, 1), "dap-lost", enc[2])) // never expected
	e.partial(okPartial("req1", ref(2, 2), "dap1", enc[1]))
	resp, _ := e.answer()
	want, _ := merge.Merge(aggArgs, dec[:2])
	if got := decodeTable(t, resp.Payload); !reflect.DeepEqual(got, want) {
		t.Fatalf("answer (%d rows) is not the merge of a#1 and b#2 (%d rows)", got.NumRows(), want.NumRows())
	}
	if s := e.agg.Stats(); s.Discarded != 4 || s.Answered != 1 {
		t.Fatalf("stats %+v", s)
	}
}

// A failed portion fails the request with the DAP's rc/ac/ai, without waiting for the
// portions still running (here c never comes).
func TestDAPErrorIsAnswered(t *testing.T) {
	enc, _ := partials(t, aggArgs, demo.Config{Seed: 3})
	e := newEnv(t, nil)
	e.expect(expectation("req1", subjects.APIGetData, aggArgs, ref(1, 1), ref(2, 1), ref(3, 1)))
	e.partial(okPartial("req1", ref(1, 1), "dap0", enc[0]))
	bad := okPartial("req1", ref(2, 1), "dap1", nil)
	bad.Status = messages.Errorf(messages.CodeBadRequest, messages.CodeErr, "unknown column: %q", "nope")
	e.partial(bad)
	resp, h := e.answer()
	st, err := messages.ReadStatus(h)
	if err != nil || st != bad.Status || resp.Header.Status != bad.Status || len(resp.Payload) != 0 {
		t.Fatalf("answer %+v, headers %+v (%v)", resp.Header, st, err)
	}
	// The RC hears the return code; the ai stays with the caller's answer.
	if d := e.aggDone(); d.Status.RC != bad.Status.RC || d.Status.AC != bad.Status.AC || d.Status.AI != "" {
		t.Fatalf("AggDone %+v", d)
	}
	// An error partial that is not expected (a superseded attempt's) fails nothing.
	x := expectation("req2", subjects.APIGetData, aggArgs, ref(1, 2))
	x.Supersede = []messages.PortionRef{ref(1, 1)}
	e.expect(x)
	old := bad
	old.RequestID, old.PortionID, old.Attempt = "req2", 1, 1
	e.partial(old)
	e.partial(okPartial("req2", ref(1, 2), "dap0", enc[0]))
	if resp, _ := e.answer(); resp.Header.RequestID != "req2" || !resp.Header.IsOK() {
		t.Fatalf("answer %+v", resp.Header)
	}
}

func TestJSONEnvelope(t *testing.T) {
	args := messages.GetDataArgs{Table: demo.Trade, Columns: []string{"time", "sym", "price", "block"}, Limit: 25}
	enc, dec := partials(t, args, demo.Config{Seed: 4})
	want, _ := merge.Merge(args, dec)
	wantRows, _ := want.MarshalJSON()
	e := newEnv(t, nil)
	x := expectation("req1", subjects.APIGetData, args, ref(1, 1), ref(2, 1), ref(3, 1))
	x.Content = messages.ContentJSON
	x.AnswerID = "caller-1" // the envelope names the caller's id; the routing headers the drive's
	e.expect(x)
	for i, b := range enc {
		e.partial(okPartial("req1", x.Expect[i], "dap", b))
	}
	m, err := e.answers.NextMsg(wait)
	if err != nil {
		t.Fatal(err)
	}
	var env struct {
		Header  map[string]any  `json:"header"`
		Payload json.RawMessage `json:"payload"`
	}
	if err := json.Unmarshal(m.Data, &env); err != nil {
		t.Fatalf("not a JSON envelope: %v: %.200s", err, m.Data)
	}
	if env.Header["requestId"] != "caller-1" || env.Header["rc"] != 0.0 || env.Header["api"] != "getData" ||
		m.Header.Get(messages.HdrRequestID) != "req1" {
		t.Fatalf("header %v, routing %v", env.Header, m.Header)
	}
	if !bytes.Equal(env.Payload, wantRows) || !bytes.HasPrefix(env.Payload, []byte(`[{"time":"`)) {
		t.Fatalf("payload %.200s\nwant %.200s", env.Payload, wantRows)
	}
	if m.Header.Get(messages.HdrContentType) != "json" {
		t.Fatalf("content header %q", m.Header.Get(messages.HdrContentType))
	}
}

func TestPingAnswersOneBooleanPerDAP(t *testing.T) {
	e := newEnv(t, nil)
	refs := []messages.PortionRef{ref(1, 1), ref(2, 1), ref(3, 1)}
	e.expect(expectation("req1", subjects.APIPing, nil, refs...))
	for i, dap := range []string{"dap-us", "dap-eu", "dap-us"} {
		e.partial(okPartial("req1", refs[i], dap, []byte{0xc3}))
	}
	resp, _ := e.answer()
	var got map[string]bool
	if err := msgpack.Unmarshal(resp.Payload, &got); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, map[string]bool{"dap-eu": true, "dap-us": true}) {
		t.Fatalf("ping answer %v", got)
	}
}

// bigPartials are three row partials of about 1.6 MiB each, above NATS's max payload.
func bigPartials(t *testing.T) (messages.GetDataArgs, [][]byte, []merge.Partial) {
	args := messages.GetDataArgs{Table: "t"}
	schema := []messages.ColumnSpec{{Name: "time", Type: messages.TypeTimestamp}, {Name: "note", Type: messages.TypeString}}
	var dec []merge.Partial
	var enc [][]byte
	for k := range 3 {
		rows := messages.NewTable(schema)
		var times []int64
		for i := range 20_000 {
			ts := t0.Add(time.Duration(i*3+k) * time.Millisecond)
			if err := rows.AppendRow(ts, fmt.Sprintf("row %d of part %d %s", i, k, strings.Repeat("x", 40))); err != nil {
				t.Fatal(err)
			}
			times = append(times, ts.UnixNano())
		}
		p, err := merge.RowsPartial(&args, rows, times)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := merge.EncodePartial(p)
		dec, enc = append(dec, p), append(enc, b)
	}
	return args, enc, dec
}

// A multi-MiB answer arrives whole: partials and answer both travel in chunks.
func TestLargeAnswerIsChunked(t *testing.T) {
	args, enc, dec := bigPartials(t)
	want, _ := merge.Merge(args, dec)
	e := newEnv(t, nil)
	refs := []messages.PortionRef{ref(1, 1), ref(2, 1), ref(3, 1)}
	e.expect(expectation("req1", subjects.APIGetData, args, refs...))
	for i, b := range enc {
		e.partial(okPartial("req1", refs[i], "dap", b))
	}
	resp, _ := e.answer()
	if len(resp.Payload) < 3<<20 {
		t.Fatalf("answer of %d bytes: want a multi-MiB one for this test", len(resp.Payload))
	}
	if got := decodeTable(t, resp.Payload); !reflect.DeepEqual(got, want) {
		t.Fatalf("answer (%d rows) differs from merge (%d rows)", got.NumRows(), want.NumRows())
	}
}

func TestTooLarge(t *testing.T) {
	args := messages.GetDataArgs{Table: demo.Quote}
	enc, _ := partials(t, args, demo.Config{Seed: 5, QuotesPerDay: 20_000})
	total := len(enc[0]) + len(enc[1]) + len(enc[2])

	// The partials pass the limit while buffered: TOO_LARGE without waiting for the rest.
	e := newEnv(t, func(c *Config) { c.MaxAnswerBytes = int64(len(enc[0]) + len(enc[1]) - 1) })
	x := expectation("req1", subjects.APIGetData, args, ref(1, 1), ref(2, 1), ref(3, 1))
	e.expect(x)
	e.partial(okPartial("req1", ref(1, 1), "dap", enc[0]))
	e.partial(okPartial("req1", ref(2, 1), "dap", enc[1]))
	resp, _ := e.answer()
	if resp.Header.RC != messages.CodeTooLarge || !strings.Contains(resp.Header.AI, "limit") ||
		!strings.Contains(resp.Header.AI, messages.HdrAcceptStream+": 1") {
		t.Fatalf("answer %+v: want the limit and the stream's header named", resp.Header)
	}
	if d := e.aggDone(); d.Status.RC != messages.CodeTooLarge {
		t.Fatalf("AggDone %+v", d)
	}

	// The partials fit, the JSON answer does not.
	e = newEnv(t, func(c *Config) { c.MaxAnswerBytes = int64(total + 1000) })
	x.Content = messages.ContentJSON
	e.expect(x)
	for i, b := range enc {
		e.partial(okPartial("req1", x.Expect[i], "dap", b))
	}
	resp, _ = e.answer()
	if resp.Header.RC != messages.CodeTooLarge || resp.Content != messages.ContentJSON ||
		!strings.Contains(resp.Header.AI, "for a whole answer") || !strings.Contains(resp.Header.AI, messages.HdrAcceptStream+": 1") {
		t.Fatalf("answer %+v", resp.Header)
	}
	if s := e.agg.Stats(); s.TooLarge != 1 || s.Errors != 1 {
		t.Fatalf("stats %+v", s)
	}

	// A chunked partial announcing more than the limit is refused at its first chunk.
	args, big, _ := bigPartials(t)
	e = newEnv(t, func(c *Config) { c.MaxAnswerBytes = 1 << 20 })
	e.expect(expectation("req1", subjects.APIGetData, args, ref(1, 1)))
	e.partial(okPartial("req1", ref(1, 1), "dap", big[0]))
	if resp, _ := e.answer(); resp.Header.RC != messages.CodeTooLarge {
		t.Fatalf("answer %+v", resp.Header)
	}
}

// The answered id is remembered: a repeated expectation or partial answers nothing. A
// second request, through the same subscriptions after them, proves they were handled.
func TestAnsweredOnce(t *testing.T) {
	e := newEnv(t, nil)
	x := expectation("req1", subjects.APIPing, nil, ref(1, 1))
	e.expect(x)
	e.partial(okPartial("req1", ref(1, 1), "dap0", []byte{0xc3}))
	if resp, _ := e.answer(); resp.Header.RequestID != "req1" {
		t.Fatalf("answer %+v", resp.Header)
	}
	e.expect(x)
	e.partial(okPartial("req1", ref(1, 1), "dap0", []byte{0xc3}))
	e.expect(expectation("req2", subjects.APIPing, nil, ref(1, 1)))
	e.partial(okPartial("req2", ref(1, 1), "dap0", []byte{0xc3}))
	if resp, _ := e.answer(); resp.Header.RequestID != "req2" {
		t.Fatalf("second answer is for %s, want req2", resp.Header.RequestID)
	}
	if s := e.agg.Stats(); s.Answered != 2 || s.Discarded != 1 || s.Pending != 0 {
		t.Fatalf("stats %+v", s)
	}
}

// Cancel drops the request; an expectation already past its deadline is not answered.
// Expectations and partials travel on two subscriptions, so each step is closed by a
// marker request whose answer proves the messages before it were handled.
func TestCancelAndDeadline(t *testing.T) {
	e := newEnv(t, nil)
	marker := func(id string) {
		t.Helper()
		e.expect(expectation(id, subjects.APIPing, nil, ref(13, 1)))
		e.partial(okPartial(id, ref(13, 1), "dap0", []byte{0xc3}))
		if resp, _ := e.answer(); resp.Header.RequestID != id {
			t.Fatalf("answer for %s, want the marker %s", resp.Header.RequestID, id)
		}
	}
	x := expectation("req1", subjects.APIPing, nil, ref(1, 1), ref(2, 1))
	e.expect(x)
	e.partial(okPartial("req1", ref(1, 1), "dap0", []byte{0xc3}))
	cancel := x
	cancel.Seq, cancel.Expect, cancel.Cancel = 2, nil, true
	e.expect(cancel)
	marker("m1")
	e.partial(okPartial("req1", ref(2, 1), "dap1", []byte{0xc3}))

	late := expectation("req2", subjects.APIPing, nil, ref(1, 1))
	late.Deadline = time.Now().Add(-time.Millisecond).UnixNano()
	e.expect(late)
	marker("m2")
	e.partial(okPartial("req2", ref(1, 1), "dap0", []byte{0xc3}))
	marker("m3")
	if s := e.agg.Stats(); s.Answered != 3 || s.Expired != 1 || s.Discarded != 3 || s.Pending != 0 {
		t.Fatalf("stats %+v", s)
	}
}

// A deadline that passes while partials are missing: the request is dropped by the
// sweep and a partial after it answers nothing.
func TestDeadlinePassesWhileWaiting(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.PartialTTL = 40 * time.Millisecond })
	x := expectation("req1", subjects.APIPing, nil, ref(1, 1), ref(2, 1))
	x.Deadline = time.Now().Add(50 * time.Millisecond).UnixNano()
	e.expect(x)
	e.partial(okPartial("req1", ref(1, 1), "dap0", []byte{0xc3}))
	timer := time.NewTimer(time.Until(time.Unix(0, x.Deadline))) // waits for the clock, the condition under test
	<-timer.C
	e.partial(okPartial("req1", ref(2, 1), "dap1", []byte{0xc3}))
	e.expect(expectation("req2", subjects.APIPing, nil, ref(1, 1)))
	e.partial(okPartial("req2", ref(1, 1), "dap0", []byte{0xc3}))
	if resp, _ := e.answer(); resp.Header.RequestID != "req2" {
		t.Fatalf("answer for %s after its deadline", resp.Header.RequestID)
	}
	if s := e.agg.Stats(); s.Answered+s.Expired < 2 {
		t.Fatalf("stats %+v", s)
	}
}

func TestMalformedInput(t *testing.T) {
	e := newEnv(t, nil)
	junk := [][]byte{nil, {0xc1}, {0x92, 0x01}, bytes.Repeat([]byte{0xdf, 0xff, 0xff, 0xff, 0xff}, 8)}
	for _, b := range junk {
		for _, s := range []string{subj.AggExpect("agg1"), subj.AggPartial("agg1")} {
			if err := e.nc.Publish(s, b); err != nil {
				t.Fatal(err)
			}
		}
	}
	// A chunk that announces a huge transfer for a request: refused before buffering.
	m := &natsMsg{subject: subj.AggPartial("agg1"), data: []byte("x")}
	m.header(messages.HdrChunkStream, "s1", messages.HdrChunkIndex, "0", messages.HdrChunkCount, "2",
		messages.HdrChunkTotal, "not a number", messages.HdrRequestID, "reqX")
	if err := e.nc.PublishMsg(m.msg()); err != nil {
		t.Fatal(err)
	}
	// Invalid but decodable: wrong version, empty reply.
	x := expectation("req1", subjects.APIPing, nil, ref(1, 1))
	x.V, x.ReplyTo = 9, ""
	e.expect(x)
	e.expect(expectation("req2", subjects.APIPing, nil, ref(1, 1)))
	e.partial(okPartial("req2", ref(1, 1), "dap0", []byte{0xc3}))
	if resp, _ := e.answer(); resp.Header.RequestID != "req2" || !resp.Header.IsOK() {
		t.Fatalf("answer %+v", resp.Header)
	}
	if s := e.agg.Stats(); s.Malformed != uint64(2*len(junk)+2) {
		t.Fatalf("stats %+v", s)
	}
}

func TestNewValidates(t *testing.T) {
	nc := startNATS(t)
	for _, c := range []Config{{ID: "", NC: nc}, {ID: "a.b", NC: nc}, {ID: "a"}, {ID: "a", NC: nc, MaxAnswerBytes: -1}} {
		if _, err := New(c); err == nil {
			t.Errorf("%+v accepted", c)
		}
	}
}

// Seed (Retries): a RETRY restarts a label set's attempt whole, its portions
// that already answered OK included (a whole SQL retry, every label set's), so
// a partial the Agg holds may be superseded at any time before the answer,
// sealed set or not. The answer counts the new attempt's partials once and
// the old ones not at all, and the held bytes go with them. (Aggregates are
// folded as they come: the supersede resets the fold, which cannot give the
// old partials back, and folds the survivors again: fold.go.)
func TestRetryAfterPartialsCameCountsOnce(t *testing.T) {
	args := aggArgs
	args.Agg = append(append([]messages.AggSpec(nil), aggArgs.Agg...), messages.AggSpec{Name: "vol", Func: messages.AggSum, Column: "price"})
	enc, dec := partials(t, args, demo.Config{Seed: 4})
	e := newEnv(t, nil)
	x := expectation("req1", subjects.APIGetData, args, ref(1, 1), ref(2, 1), ref(3, 1))
	e.expect(x)
	e.partial(okPartial("req1", ref(1, 1), "dap0", enc[0]))
	e.partial(okPartial("req1", ref(2, 1), "dap1", enc[1]))
	waitHeld(t, e.agg, "req1", 2, int64(len(enc[0])+len(enc[1])))
	x2 := x
	x2.Seq, x2.Expect, x2.Supersede, x2.Sealed = 2, []messages.PortionRef{ref(1, 2), ref(2, 2)}, []messages.PortionRef{ref(1, 1), ref(2, 1)}, false
	e.expect(x2)
	waitHeld(t, e.agg, "req1", 0, 0)
	e.partial(okPartial("req1", ref(1, 1), "dap0", enc[0])) // late, superseded
	e.partial(okPartial("req1", ref(3, 1), "dap2", enc[2]))
	e.partial(okPartial("req1", ref(1, 2), "dap3", enc[0]))
	e.partial(okPartial("req1", ref(2, 2), "dap4", enc[1]))
	x3 := x
	x3.Seq, x3.Expect, x3.Sealed = 3, nil, true
	e.expect(x3)
	resp, _ := e.answer()
	want, err := merge.Merge(args, dec)
	if err != nil {
		t.Fatal(err)
	}
	if got := decodeTable(t, resp.Payload); !resp.Header.IsOK() || !reflect.DeepEqual(got, want) {
		t.Fatalf("answer %+v (%d rows) is not the merge of one partial per shard (%d rows)", resp.Header, got.NumRows(), want.NumRows())
	}
	if s := e.agg.Stats(); s.Discarded != 3 || s.Answered != 1 {
		t.Fatalf("stats %+v, want 3 discarded (a#1, b#1, the late a#1), 1 answered", s)
	}
	e.agg.mu.Lock()
	held := e.agg.held
	e.agg.mu.Unlock()
	if held != 0 {
		t.Fatalf("the Agg holds %d bytes after the answer", held)
	}
}

// waitHeld waits (bounded) until request id holds n partials of bytes in
// all: partials and expectations come on two subscriptions, so a test that
// orders them waits for the first to be applied.
func waitHeld(t *testing.T, a *Agg, id string, n int, bytes int64) {
	t.Helper()
	var held int
	var b int64
	waitChanged(t, a, func() bool {
		a.mu.Lock()
		defer a.mu.Unlock()
		held, b = 0, 0
		if r := a.requests[id]; r != nil {
			held, b = len(r.partials), r.bytes
		}
		return held == n && b == bytes
	}, func() string {
		return fmt.Sprintf("request %s holds %d partials of %d bytes after %v, want %d of %d", id, held, b, wait, n, bytes)
	})
}

// waitChanged waits, within wait, until ok holds, looking again each time
// the Agg says something changed (Agg.changed); fail says what did not come.
func waitChanged(t *testing.T, a *Agg, ok func() bool, fail func() string) {
	t.Helper()
	changed := make(chan struct{}, 1)
	hook := func() {
		select {
		case changed <- struct{}{}:
		default:
		}
	}
	a.changed.Store(&hook)
	defer a.changed.Store(nil)
	bound := time.After(wait)
	for !ok() {
		select {
		case <-changed:
		case <-bound:
			t.Fatal(fail())
		}
	}
}
