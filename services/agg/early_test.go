package agg

import (
	"testing"

	"github.com/sg-project/sg/messages"
	"github.com/sg-project/sg/services/agg/merge"
	"github.com/sg-project/sg/subjects"
)

// Windows are decoded early only while the Agg's held bytes stay within
// MaxHeldBytes/earlyExpansion: decoded columns (up to 16 times a window's
// bytes) are held beside the windows until the answer, outside
// MaxHeldBytes, so a DAP that keeps a request's windows open could
// otherwise make the Agg hold many times its bound (the review measured
// 185 MiB for 14 MiB of windows). Windows past the bound are decoded with
// the answer, which is whole and right either way.
func TestEarlyDecodesStayWithinABoundOnHeldBytes(t *testing.T) {
	const maxHeld = 4 << 20
	e := newEnv(t, func(c *Config) { c.MaxHeldBytes, c.MaxRequestBytes = maxHeld, maxHeld })
	schema := []messages.ColumnSpec{{Name: "time", Type: messages.TypeTimestamp}, {Name: "a", Type: messages.TypeInt}, {Name: "s", Type: messages.TypeString}}
	const rows, windows = 20_000, 8
	var wins [][]byte
	for w := range windows {
		tb := messages.NewTable(schema)
		for i := range rows {
			if err := tb.AppendRow(int64(w*rows+i), int64(i), "x"); err != nil {
				t.Fatal(err)
			}
		}
		p, err := merge.RowsPartial(&messages.GetDataArgs{Table: "t"}, tb, tb.Columns[0].Ints)
		if err != nil {
			t.Fatal(err)
		}
		win, err := merge.EncodePartial(p)
		if err != nil {
			t.Fatal(err)
		}
		if len(win) < earlyDecodeBytes {
			t.Fatalf("a window of %d bytes, want at least %d to be decoded early", len(win), earlyDecodeBytes)
		}
		wins = append(wins, win)
	}
	// Expectations are taken in order, and partials are, but the two not
	// with each other: a ping answered after its expectation and partial
	// says that what came before each on its subject has been taken.
	synced := func(id string) {
		e.expect(expectation(id, subjects.APIPing, nil, ref(1, 1)))
		e.partial(okPartial(id, ref(1, 1), "dap1", []byte{0xc3}))
		if resp, _ := e.answer(); resp.Header.RequestID != id {
			t.Fatalf("answer %+v, want %s's", resp.Header, id)
		}
	}
	r := ref(100, 1)
	e.expect(expectation("h1", subjects.APIGetData, messages.GetDataArgs{Table: "t"}, r))
	synced("z1") // h1's expectation is known: its windows are gathered whole
	for i, win := range wins[:windows-1] {
		w := okPartial("h1", r, "dap0", win)
		w.Window, w.More = uint32(i), true
		e.partial(w)
	}
	synced("z2") // h1's windows have been taken
	wantEarly, held := 0, 0
	for _, win := range wins[:windows-1] {
		if held += len(win); held <= maxHeld/earlyExpansion {
			wantEarly++
		}
	}
	if wantEarly == 0 || wantEarly == windows-1 {
		t.Fatalf("the test's windows (%d bytes each) should cross the bound %d", len(wins[0]), maxHeld/earlyExpansion)
	}
	e.agg.mu.Lock()
	var queued, early int
	if req := e.agg.requests["h1"]; req != nil && req.windows[r] != nil {
		w := req.windows[r]
		queued = len(w.queue)
		for _, d := range w.decoded {
			if d != nil {
				early++
			}
		}
	}
	e.agg.mu.Unlock()
	if queued != windows-1 || early != wantEarly {
		t.Fatalf("%d windows held, %d of them decoded early; want %d and %d (within %d bytes held)", queued, early, windows-1, wantEarly, maxHeld/earlyExpansion)
	}
	last := okPartial("h1", r, "dap0", wins[windows-1])
	last.Window = windows - 1
	e.partial(last)
	resp, _ := e.answer()
	if resp.Header.RequestID != "h1" || !resp.Header.Status.IsOK() {
		t.Fatalf("answer %+v, want h1 answered", resp.Header)
	}
	if tb := decodeTable(t, resp.Payload); tb.NumRows() != rows*windows {
		t.Fatalf("%d rows, want %d", tb.NumRows(), rows*windows)
	}
}

// A large partial in one piece of a row query gathered whole is decoded as
// it comes, not with the answer (after the slowest DAP's last window), and
// the answer is the same; an aggregating request's is left to its fold.
func TestLargeWholePartialDecodedAsItComes(t *testing.T) {
	e := newEnv(t, nil)
	schema := []messages.ColumnSpec{{Name: "time", Type: messages.TypeTimestamp}, {Name: "a", Type: messages.TypeInt}}
	const rows = 20_000
	tb := messages.NewTable(schema)
	for i := range rows {
		if err := tb.AppendRow(int64(i), int64(i)); err != nil {
			t.Fatal(err)
		}
	}
	p, err := merge.RowsPartial(&messages.GetDataArgs{Table: "t"}, tb, tb.Columns[0].Ints)
	if err != nil {
		t.Fatal(err)
	}
	whole, err := merge.EncodePartial(p)
	if err != nil {
		t.Fatal(err)
	}
	if len(whole) < earlyDecodeBytes {
		t.Fatalf("a partial of %d bytes, want at least %d to be decoded early", len(whole), earlyDecodeBytes)
	}
	synced := func(id string) { // as in TestEarlyDecodesStayWithinABoundOnHeldBytes
		e.expect(expectation(id, subjects.APIPing, nil, ref(1, 1)))
		e.partial(okPartial(id, ref(1, 1), "dap1", []byte{0xc3}))
		if resp, _ := e.answer(); resp.Header.RequestID != id {
			t.Fatalf("answer %+v, want %s's", resp.Header, id)
		}
	}
	decoding := func(id string, r messages.PortionRef) bool {
		e.agg.mu.Lock()
		defer e.agg.mu.Unlock()
		req := e.agg.requests[id]
		return req != nil && req.decodedWhole[r] != nil
	}

	r1, r2 := ref(100, 1), ref(101, 1)
	e.expect(expectation("w1", subjects.APIGetData, messages.GetDataArgs{Table: "t"}, r1, r2))
	synced("z1")
	e.partial(okPartial("w1", r1, "dap0", whole))
	synced("z2")
	if !decoding("w1", r1) {
		t.Fatal("the large partial in one piece of a row query is not being decoded as it came")
	}
	// The answer must be made from that decoding, not from a second decode
	// of the bytes: once it is done, its result is swapped for a partial of
	// marked rows, which only an answer that uses it can contain.
	const marked = 7
	mark := messages.NewTable(schema)
	for i := range marked {
		if err := mark.AppendRow(int64(rows+i), int64(-1)); err != nil {
			t.Fatal(err)
		}
	}
	mp, err := merge.RowsPartial(&messages.GetDataArgs{Table: "t"}, mark, mark.Columns[0].Ints)
	if err != nil {
		t.Fatal(err)
	}
	mb, err := merge.EncodePartial(mp)
	if err != nil {
		t.Fatal(err)
	}
	markPart, err := merge.DecodePartial(mb)
	if err != nil {
		t.Fatal(err)
	}
	e.agg.mu.Lock()
	d := e.agg.requests["w1"].decodedWhole[r1]
	e.agg.mu.Unlock()
	if _, err := d.wait(); err != nil {
		t.Fatalf("early decoding: %v", err)
	}
	e.agg.mu.Lock()
	d.part = markPart
	e.agg.mu.Unlock()
	e.partial(okPartial("w1", r2, "dap1", whole))
	resp, _ := e.answer()
	if resp.Header.RequestID != "w1" || !resp.Header.Status.IsOK() {
		t.Fatalf("answer %+v, want w1 answered", resp.Header)
	}
	got := decodeTable(t, resp.Payload)
	if got.NumRows() != rows+marked {
		t.Fatalf("%d rows, want %d: the early decoding's %d and the other partial's %d (an answer that decoded the bytes again has %d)",
			got.NumRows(), rows+marked, marked, rows, 2*rows)
	}
	if n := got.NumRows(); got.Columns[1].Ints[n-1] != -1 {
		t.Fatalf("last row's a = %d, want a marked row's -1", got.Columns[1].Ints[n-1])
	}

	e.expect(expectation("g1", subjects.APIGetData, messages.GetDataArgs{Table: "t", Agg: []messages.AggSpec{{Name: "n", Func: "count"}}}, r1, r2))
	synced("z3")
	e.partial(okPartial("g1", r1, "dap0", whole))
	synced("z4")
	if decoding("g1", r1) {
		t.Fatal("an aggregating request's partial decoded early: its fold decodes it")
	}
}
