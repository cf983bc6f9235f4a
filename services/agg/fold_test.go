package agg

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/sg-project/sg/messages"
	"github.com/sg-project/sg/services/agg/merge"
	"github.com/sg-project/sg/subjects"
)

// foldArgs aggregate every way that a fold cannot take back (min, max,
// first, last) beside those it could (count, sum, avg).
var foldArgs = messages.GetDataArgs{Table: "t", GroupBy: []string{"sym"}, Agg: []messages.AggSpec{
	{Name: "n", Func: messages.AggCount}, {Name: "s", Func: messages.AggSum, Column: "px"},
	{Name: "a", Func: messages.AggAvg, Column: "px"}, {Name: "lo", Func: messages.AggMin, Column: "px"},
	{Name: "hi", Func: messages.AggMax, Column: "px"}, {Name: "f", Func: messages.AggFirst, Column: "px"},
	{Name: "l", Func: messages.AggLast, Column: "px"}}}

// foldRow is one source row of an aggregate partial.
type foldRow struct {
	sym string
	px  float64
	at  int64
}

// aggPart is the aggregate partial (foldArgs) of rows, encoded and decoded.
func aggPart(t testing.TB, rows ...foldRow) ([]byte, merge.Partial) {
	t.Helper()
	tb := messages.NewTable([]messages.ColumnSpec{{Name: "sym", Type: messages.TypeSymbol}, {Name: "px", Type: messages.TypeFloat}})
	times := make([]int64, len(rows))
	idx := make([]int, len(rows))
	for i, r := range rows {
		if err := tb.AppendRow(r.sym, r.px); err != nil {
			t.Fatal(err)
		}
		times[i], idx[i] = r.at, i
	}
	px := &tb.Columns[1]
	p, err := merge.AggregatePartial(&foldArgs, []*messages.Column{&tb.Columns[0]}, []*messages.Column{nil, px, px, px, px, px, px}, times, idx)
	if err != nil {
		t.Fatal(err)
	}
	b, err := merge.EncodePartial(p)
	if err != nil {
		t.Fatal(err)
	}
	d, err := merge.DecodePartial(b)
	if err != nil {
		t.Fatal(err)
	}
	return b, d
}

// randomPart is an aggregate partial of n random rows over syms symbols,
// at times in [at, at+1000).
func randomPart(t testing.TB, rng *rand.Rand, n, syms int, at int64) ([]byte, merge.Partial) {
	rows := make([]foldRow, n)
	for i := range rows {
		rows[i] = foldRow{fmt.Sprintf("S%d", rng.IntN(syms)), float64(rng.IntN(1000)) / 8, at + int64(rng.IntN(1000))}
	}
	return aggPart(t, rows...)
}

// extremePart holds, for the symbols of randomPart, values below and above
// any of its (min, max) at times before and after any (first, last): a
// partial that a fold could not give back.
func extremePart(t testing.TB) ([]byte, merge.Partial) {
	var rows []foldRow
	for s := range 8 {
		sym := fmt.Sprintf("S%d", s)
		rows = append(rows, foldRow{sym, -1e9, -1 << 40}, foldRow{sym, 1e9, 1 << 40})
	}
	return aggPart(t, rows...)
}

// foldWatch counts the partials an Agg folded as they came, and waits for them.
type foldWatch struct {
	tb   testing.TB
	a    *Agg
	wake chan struct{}
}

func watchFolds(tb testing.TB, a *Agg) *foldWatch {
	w := &foldWatch{tb: tb, a: a, wake: make(chan struct{}, 1)}
	hook := func(int) {
		select {
		case w.wake <- struct{}{}:
		default:
		}
	}
	a.foldHook.Store(&hook)
	return w
}

// until waits (bounded) until n partials in all were folded as they came.
func (w *foldWatch) until(n uint64) {
	w.tb.Helper()
	timeout := time.After(wait)
	for {
		if got := w.a.Stats().Folded; got == n {
			return
		} else if got > n {
			w.tb.Fatalf("%d partials folded as they came, want %d", got, n)
		}
		select {
		case <-w.wake:
		case <-timeout:
			w.tb.Fatalf("%d partials folded as they came after %v, want %d", w.a.Stats().Folded, wait, n)
		}
	}
}

// past waits (bounded) until more than n partials in all were folded as
// they came.
func (w *foldWatch) past(n uint64) {
	w.tb.Helper()
	timeout := time.After(wait)
	for w.a.Stats().Folded <= n {
		select {
		case <-w.wake:
		case <-timeout:
			w.tb.Fatalf("%d partials folded as they came after %v, want more than %d", w.a.Stats().Folded, wait, n)
		}
	}
}

// answerTable reads the next answer, which must be OK, as a table. The
// answer's bytes must be the table's, encoded: floats to the bit.
func (e *env) answerTable(id string) messages.Table {
	e.t.Helper()
	resp, _ := e.answer()
	if resp.Header.RequestID != id || !resp.Header.Status.IsOK() {
		e.t.Fatalf("answer %+v, want %s OK", resp.Header, id)
	}
	return decodeTable(e.t, resp.Payload)
}

// sameAnswer reports whether got is want to the bit, as the answer encodes
// it (reflect.DeepEqual takes -0 for 0).
func sameAnswer(t testing.TB, got, want messages.Table) bool {
	t.Helper()
	g, err := messages.EncodeTableMsgpack(got, 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	w, err := messages.EncodeTableMsgpack(want, 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	return bytes.Equal(g, w) && reflect.DeepEqual(got, want)
}

func mustMerge(t testing.TB, parts ...merge.Partial) messages.Table {
	t.Helper()
	want, err := merge.Merge(foldArgs, parts)
	if err != nil {
		t.Fatal(err)
	}
	return want
}

// foldArgsJSON are foldArgs as a JSON caller sends them (argsj).
const foldArgsJSON = `{"table":"t","groupBy":["sym"],"agg":[["n","count",""],["s","sum","px"],["a","avg","px"],` +
	`["lo","min","px"],["hi","max","px"],["f","first","px"],["l","last","px"]]}`

// Issue 10: each partial is folded as it comes, once; the answer, once the
// last has come, folds none of them again. Whether the caller's arguments
// are msgpack or JSON (argsj).
func TestAggregatesFoldedAsTheyCome(t *testing.T) {
	for _, json := range []bool{false, true} {
		t.Run(fmt.Sprint("json=", json), func(t *testing.T) { testAggregatesFoldedAsTheyCome(t, json) })
	}
}

func testAggregatesFoldedAsTheyCome(t *testing.T, json bool) {
	const n = 100
	rng := rand.New(rand.NewPCG(10, 1))
	var enc [][]byte
	var dec []merge.Partial
	var refs []messages.PortionRef
	for i := range n {
		size, syms := 4+rng.IntN(40), 8
		if i%10 == 0 {
			size, syms = 600, 200 // above foldInlineBytes: folded on an answerer
		}
		b, p := randomPart(t, rng, size, syms, int64(i)*500)
		enc, dec, refs = append(enc, b), append(dec, p), append(refs, ref(messages.PortionID(i+1), 1))
	}
	if len(enc[0]) <= foldInlineBytes || len(enc[1]) > foldInlineBytes {
		t.Fatalf("partials of %d and %d bytes: want one above and one within %d", len(enc[0]), len(enc[1]), foldInlineBytes)
	}
	e := newEnv(t, nil)
	folds := watchFolds(e.t, e.agg)
	x := expectation("req1", subjects.APIGetData, foldArgs, refs[:n/2]...)
	if json {
		x.V, x.Args, x.ArgsJSON = messages.ArgsJSONVersion, nil, []byte(foldArgsJSON)
		if a, err := x.Arguments().GetData(); err != nil || !reflect.DeepEqual(a, foldArgs) {
			t.Fatalf("JSON arguments %+v (%v), want %+v", a, err, foldArgs)
		}
	}
	x.Sealed = false // the set is not whole yet
	e.expect(x)
	// The second half come before their expectation: held, not folded.
	held := int64(0)
	for i := n / 2; i < n; i++ {
		e.partial(okPartial("req1", refs[i], "dap", enc[i]))
		held += int64(len(enc[i]))
	}
	waitHeld(t, e.agg, "req1", n/2, held)
	if s := e.agg.Stats(); s.Folded != 0 {
		t.Fatalf("%d partials folded before they were expected", s.Folded)
	}
	// The first half: folded as they come (or as their expectation does).
	for i := range n / 2 {
		e.partial(okPartial("req1", refs[i], "dap", enc[i]))
	}
	folds.until(n / 2)
	// The second half's expectation: they are folded as it comes.
	x2 := x
	x2.Seq, x2.Expect = 2, refs[n/2:]
	e.expect(x2)
	folds.until(n)
	x3 := x
	x3.Seq, x3.Expect, x3.Sealed = 3, nil, true
	e.expect(x3)
	if got, want := e.answerTable("req1"), mustMerge(t, dec...); !sameAnswer(t, got, want) {
		t.Fatalf("answer of %d rows is not the merge of the %d partials (%d rows)", got.NumRows(), n, want.NumRows())
	}
	if s := e.agg.Stats(); s.Folded != n || s.FoldedAtAnswer != 0 || s.Answered != 1 {
		t.Fatalf("stats %+v: want %d folded as they came, none at the answer", s, n)
	}
}

// Seed (Retries): a RETRY after partials were folded. The superseded
// attempt held every group's extremes (min, max, first, last), which no
// fold can give back: the answer is the fold of the surviving partials
// only, rebuilt at once, and each of them counts once.
func TestRetryAfterFoldsCountsSurvivorsOnce(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 1))
	extreme, extremeDec := extremePart(t)
	type part struct {
		enc []byte
		dec merge.Partial
	}
	normal := func() part {
		b, p := randomPart(t, rng, 30, 8, 0)
		return part{b, p}
	}
	a1, b1, c1 := part{extreme, extremeDec}, normal(), normal()
	a2, b2, c2 := normal(), normal(), normal()
	for _, tc := range []struct {
		name string
		api  string
		// first attempts, the refs superseded with the attempts that replace them
		first      [3]part
		superseded []int
		second     map[int]part
		// refolded: survivors folded again at once after the supersede
		refolded int
	}{
		{"label set retry", subjects.APIGetData, [3]part{a1, b1, c1}, []int{0}, map[int]part{0: a2}, 2},
		{"lost DAP", subjects.APIGetData, [3]part{a1, {extreme, extremeDec}, c1}, []int{0, 1}, map[int]part{0: a2, 1: b2}, 1},
		{"whole sql retry", subjects.APISQL, [3]part{a1, b1, c1}, []int{0, 1, 2}, map[int]part{0: a2, 1: b2, 2: c2}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, nil)
			folds := watchFolds(e.t, e.agg)
			ids := []string{"a", "b", "c"}
			var refs1 []messages.PortionRef
			for i := range ids {
				refs1 = append(refs1, ref(messages.PortionID(i+1), 1))
			}
			x := expectation("req1", tc.api, foldArgs, refs1...)
			x.Sealed = false
			e.expect(x)
			for i, p := range tc.first {
				e.partial(okPartial("req1", refs1[i], "dap"+ids[i], p.enc))
			}
			folds.until(3)
			x2 := x
			x2.Seq, x2.Expect, x2.Supersede = 2, nil, nil
			survivors := []merge.Partial{}
			for i, p := range tc.first {
				if p2, ok := tc.second[i]; ok {
					x2.Supersede = append(x2.Supersede, refs1[i])
					x2.Expect = append(x2.Expect, ref(messages.PortionID(i+1), 2))
					survivors = append(survivors, p2.dec)
				} else {
					survivors = append(survivors, p.dec)
				}
			}
			e.expect(x2)
			folds.until(uint64(3 + tc.refolded))
			n := 3 + tc.refolded
			for i := range 3 {
				if p2, ok := tc.second[i]; ok {
					e.partial(okPartial("req1", ref(messages.PortionID(i+1), 2), "dap-new", p2.enc))
					n++
					folds.until(uint64(n))
				}
			}
			x3 := x
			x3.Seq, x3.Expect, x3.Sealed = 3, nil, true
			e.expect(x3)
			got, want := e.answerTable("req1"), mustMerge(t, survivors...)
			if !sameAnswer(t, got, want) {
				t.Fatalf("answer\n%v\nis not the fold of the survivors\n%v", got, want)
			}
			var all []merge.Partial
			for _, p := range tc.first {
				all = append(all, p.dec)
			}
			if sameAnswer(t, got, mustMerge(t, append(all, survivors...)...)) {
				t.Fatal("the superseded partials make no difference: the test proves nothing")
			}
			if s := e.agg.Stats(); s.FoldedAtAnswer != 0 || s.Folded != uint64(n) {
				t.Fatalf("stats %+v: want %d folded as they came (the survivors again), none at the answer", s, n)
			}
		})
	}
}

// synced returns once everything sent before it on both subjects (partials
// and expectations) has been taken: a ping request answered after its
// expectation and partial.
func (e *env) synced(id string) {
	e.t.Helper()
	e.expect(expectation(id, subjects.APIPing, nil, ref(1, 1)))
	e.partial(okPartial(id, ref(1, 1), "dap1", []byte{0xc3}))
	if resp, _ := e.answer(); resp.Header.RequestID != id {
		e.t.Fatalf("answer %+v, want %s's", resp.Header, id)
	}
}

// A partial is folded only once it counts: never one for a ref not
// expected, nor one superseded, whenever it comes; and the last one,
// which completes the request, by the answer.
func TestOnlyCountedPartialsAreFolded(t *testing.T) {
	rng := rand.New(rand.NewPCG(12, 1))
	extreme, _ := extremePart(t)
	aEnc, aDec := randomPart(t, rng, 30, 8, 0)
	bEnc, bDec := randomPart(t, rng, 30, 8, 0)
	e := newEnv(t, nil)
	x := expectation("req1", subjects.APIGetData, foldArgs, ref(1, 1), ref(2, 1))
	x.Sealed = false
	e.expect(x)
	e.partial(okPartial("req1", ref(26, 1), "dap-lost", extreme)) // never expected
	e.partial(okPartial("req1", ref(1, 1), "dap0", aEnc))
	x2 := x
	x2.Seq, x2.Expect, x2.Supersede = 2, []messages.PortionRef{ref(2, 2)}, []messages.PortionRef{ref(2, 1)}
	e.expect(x2)
	e.synced("s1")
	if s := e.agg.Stats(); s.Folded != 1 {
		t.Fatalf("%d folded, want a#1's only", s.Folded)
	}
	e.partial(okPartial("req1", ref(2, 1), "dap1", extreme)) // late, superseded
	e.synced("s2")
	if s := e.agg.Stats(); s.Folded != 1 {
		t.Fatalf("%d folded, want a#1's only", s.Folded)
	}
	x3 := x
	x3.Seq, x3.Expect, x3.Sealed = 3, nil, true
	e.expect(x3)
	e.synced("s3")
	e.partial(okPartial("req1", ref(2, 2), "dap1", bEnc)) // completes the request
	if got, want := e.answerTable("req1"), mustMerge(t, aDec, bDec); !sameAnswer(t, got, want) {
		t.Fatalf("answer\n%v\nis not the merge of a#1 and b#2\n%v", got, want)
	}
	if s := e.agg.Stats(); s.Folded != 1 || s.FoldedAtAnswer != 1 {
		t.Fatalf("stats %+v: want a#1 folded as it came, b#2 at the answer", s)
	}
}

// A partial that does not decode, or does not fit the request or the
// others (ErrSchemaMismatch; ErrAggType, which its decoding finds), gives
// the answer the status it had when every partial was merged at the
// answer: the fold gives way to that merge, in expectation order, whatever
// order the partials came in and whether they were folded as they came.
func TestBadPartialAnswersAsBefore(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 1))
	good, _ := randomPart(t, rng, 30, 8, 0)
	other, _ := randomPart(t, rng, 30, 8, 0)
	// px an int column: the states' input types differ from the others'.
	intTable := messages.NewTable([]messages.ColumnSpec{{Name: "sym", Type: messages.TypeSymbol}, {Name: "px", Type: messages.TypeInt}})
	for i := range 10 {
		if err := intTable.AppendRow(fmt.Sprint("S", i%3), int64(i)); err != nil {
			t.Fatal(err)
		}
	}
	px := &intTable.Columns[1]
	ip, err := merge.AggregatePartial(&foldArgs, []*messages.Column{&intTable.Columns[0]}, []*messages.Column{nil, px, px, px, px, px, px}, make([]int64, 10), []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9})
	if err != nil {
		t.Fatal(err)
	}
	intTyped, err := merge.EncodePartial(ip)
	if err != nil {
		t.Fatal(err)
	}
	// A sum of a symbol column: its decoding fails with ErrAggType.
	_, sp := randomPart(t, rng, 5, 2, 0)
	sp.Aggs[1].Type = messages.TypeSymbol
	symbolSum, err := merge.EncodePartial(sp)
	if err != nil {
		t.Fatal(err)
	}
	renamed := foldArgs
	renamed.Agg = append([]messages.AggSpec(nil), foldArgs.Agg...)
	renamed.Agg[0].Name = "count"
	for _, tc := range []struct {
		name string
		bad  []byte
		args messages.GetDataArgs // the request's
		want string               // in the status's ai
	}{
		{"undecodable", []byte{0xa1, 0x78}, foldArgs, "partial result of portion 2#1 from DAP dap1: invalid partial result"},
		{"sum of a symbol", symbolSum, foldArgs, "aggregation does not apply to column type"},
		{"input types differ", intTyped, foldArgs, "merge: partial 1: partial results do not match: key or input types differ"},
		{"another aggregation", good, renamed, "merge: partial 0: partial results do not match: agg 0"},
	} {
		for _, badFirst := range []bool{false, true} {
			for _, folded := range []bool{false, true} {
				t.Run(fmt.Sprintf("%s/badFirst=%t/folded=%t", tc.name, badFirst, folded), func(t *testing.T) {
					e := newEnv(t, nil)
					x := expectation("req1", subjects.APIGetData, tc.args, ref(1, 1), ref(2, 1), ref(3, 1))
					x.Sealed = !folded // unsealed: each is folded as it comes
					e.expect(x)
					ps := []messages.PartialResult{okPartial("req1", ref(1, 1), "dap0", good),
						okPartial("req1", ref(2, 1), "dap1", tc.bad), okPartial("req1", ref(3, 1), "dap2", other)}
					order := []int{0, 1, 2}
					if badFirst {
						order = []int{1, 2, 0}
					}
					for _, i := range order {
						e.partial(ps[i])
					}
					if folded {
						e.synced("s1")
						x2 := x
						x2.Seq, x2.Expect, x2.Sealed = 2, nil, true
						e.expect(x2)
					}
					resp, h := e.answer()
					// The status of the merge at the answer, as before.
					j := job{exp: x, partials: ps}
					want, _ := getData(j, messages.ContentMsgpack)
					if resp.Header.Status != want || !strings.Contains(want.AI, tc.want) {
						t.Fatalf("answer %+v, want %+v (ai with %q)", resp.Header.Status, want, tc.want)
					}
					if st, err := messages.ReadStatus(h); err != nil || st != want {
						t.Fatalf("headers' status %+v (%v), want %+v", st, err, want)
					}
				})
			}
		}
	}
}

// Under -race: partials arrive, and are folded (some on answerers), while a
// supersede of half of them comes on the other subscription and resets the
// fold. Whatever the interleaving, the answer is the fold of the survivors.
// In every other round a superseded partial is folded before the rest are
// sent, so that its supersede surely resets a fold that has folded.
func TestFoldsWhileSupersedesCome(t *testing.T) {
	const rounds, n = 12, 16
	rng := rand.New(rand.NewPCG(14, 1))
	e := newEnv(t, nil)
	folds := watchFolds(e.t, e.agg)
	other, err := nats.Connect(e.nc.ConnectedUrl())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(other.Close)
	for round := range rounds {
		id := fmt.Sprint("req", round)
		var first, second [][]byte
		var survivors []merge.Partial
		refs1 := make([]messages.PortionRef, n)
		x2 := expectation(id, subjects.APIGetData, foldArgs)
		x2.Seq, x2.Sealed = 2, true
		for i := range n {
			refs1[i] = ref(messages.PortionID(i+1), 1)
			syms := 8
			if i%4 == 0 {
				syms = 200 // above foldInlineBytes: folded on an answerer
			}
			b1, p1 := randomPart(t, rng, 300, syms, int64(i)*1000)
			first = append(first, b1)
			if i%2 == 0 { // superseded: its first attempt holds the extremes
				first[i], _ = extremePart(t)
				b2, p2 := randomPart(t, rng, 300, syms, int64(i)*1000)
				second = append(second, b2)
				survivors = append(survivors, p2)
				x2.Supersede = append(x2.Supersede, refs1[i])
				x2.Expect = append(x2.Expect, ref(refs1[i].PortionID, 2))
			} else {
				survivors = append(survivors, p1)
			}
		}
		x := expectation(id, subjects.APIGetData, foldArgs, refs1...)
		x.Sealed = false
		e.expect(x)
		from := 0
		if round%2 == 1 {
			before := e.agg.Stats().Folded
			e.partial(okPartial(id, refs1[0], "dap", first[0])) // superseded below
			folds.past(before)
			from = 1
		}
		var wg sync.WaitGroup
		wg.Go(func() { // the first attempts, on one connection
			for i := from; i < n; i++ {
				if err := partialOn(e.nc, okPartial(id, refs1[i], "dap", first[i])); err != nil {
					t.Error(err)
				}
			}
		})
		wg.Go(func() { // the retry, and then its partials, on another
			if err := publishOn(other, subj.AggExpect("agg1"), &x2, nil); err != nil {
				t.Error(err)
			}
			for k, r := range x2.Expect {
				if err := partialOn(other, okPartial(id, r, "dap-new", second[k])); err != nil {
					t.Error(err)
				}
			}
		})
		wg.Wait()
		if got, want := e.answerTable(id), mustMerge(t, survivors...); !sameAnswer(t, got, want) {
			t.Fatalf("round %d: answer\n%v\nis not the fold of the survivors\n%v", round, got, want)
		}
	}
	if s := e.agg.Stats(); s.Answered != rounds || s.Folded == 0 {
		t.Fatalf("stats %+v", s)
	}
	if got := e.agg.stats.foldResets.Load(); got < rounds/2 {
		t.Fatalf("%d supersedes reset a fold that had folded, want at least %d: the test proves little", got, rounds/2)
	}
}

// The running folds are bounded, not counted: partials are folded as they
// come only while the bytes held stay within MaxHeldBytes/earlyExpansion;
// past it the answer folds them, and the answer is the same.
func TestFoldsStayWithinABoundOnHeldBytes(t *testing.T) {
	const n, bound = 10, 3000
	rng := rand.New(rand.NewPCG(15, 1))
	e := newEnv(t, func(c *Config) { c.MaxHeldBytes, c.MaxRequestBytes = bound*earlyExpansion, bound*earlyExpansion })
	var refs []messages.PortionRef
	var enc [][]byte
	var dec []merge.Partial
	held, within := 0, 0
	for i := range n {
		b, p := randomPart(t, rng, 30, 8, 0)
		refs, enc, dec = append(refs, ref(messages.PortionID(i+1), 1)), append(enc, b), append(dec, p)
		if held += len(b); held <= bound {
			within++
		}
	}
	if within == 0 || within == n {
		t.Fatalf("%d of %d partials within the bound: the test proves nothing", within, n)
	}
	x := expectation("req1", subjects.APIGetData, foldArgs, refs...)
	x.Sealed = false
	e.expect(x)
	e.synced("s0")
	for i := range n {
		e.partial(okPartial("req1", refs[i], "dap", enc[i]))
	}
	e.synced("s1")
	if s := e.agg.Stats(); s.Folded != uint64(within) {
		t.Fatalf("%d folded as they came, want the %d within the bound", s.Folded, within)
	}
	x2 := x
	x2.Seq, x2.Expect, x2.Sealed = 2, nil, true
	e.expect(x2)
	if got, want := e.answerTable("req1"), mustMerge(t, dec...); !sameAnswer(t, got, want) {
		t.Fatalf("answer of %d rows is not the merge (%d rows)", got.NumRows(), want.NumRows())
	}
	if s := e.agg.Stats(); s.FoldedAtAnswer != uint64(n-within) {
		t.Fatalf("%d folded at the answer, want %d", s.FoldedAtAnswer, n-within)
	}
}

// A runner on the goroutine that received a small partial is handed no
// large one (its decode would hold up every request's partials): the large
// one is left to the answer.
func TestLargePartialNotFoldedInline(t *testing.T) {
	e := newEnv(t, nil)
	a := e.agg
	small, _ := aggPart(t, foldRow{"a", 1, 1})
	large, _ := randomPart(t, rand.New(rand.NewPCG(3, 1)), 400, 400, 0)
	if len(small) > foldInlineBytes || len(large) <= foldInlineBytes {
		t.Fatalf("partials of %d and %d bytes: want one small, one large", len(small), len(large))
	}
	r := newRequest("x", time.Now())
	r.expectation(expectation("x", subjects.APIGetData, foldArgs, ref(1, 1), ref(2, 1)))
	a.mu.Lock()
	r.partials[ref(1, 1)] = okPartial("x", ref(1, 1), "dapa", small)
	run := a.foldArrivedLocked(r, ref(1, 1))
	r.partials[ref(2, 1)] = okPartial("x", ref(2, 1), "dapb", large)
	if a.foldArrivedLocked(r, ref(2, 1)) != nil {
		t.Error("a second runner was started")
	}
	a.mu.Unlock()
	if run == nil {
		t.Fatal("the small partial was not folded inline")
	}
	run()
	r.fold.mu.Lock()
	defer r.fold.mu.Unlock()
	if !r.fold.folded[ref(1, 1)] || r.fold.claimed[ref(2, 1)] {
		t.Fatalf("folded %v, claimed %v: want the small partial folded inline, the large one left to the answer",
			r.fold.folded, r.fold.claimed)
	}
}

// An RC retrying a label set one expectation at a time resets the fold as
// often: the survivors are folded again on the first reset only (else K
// resets are K passes over every survivor); later, the answer folds them.
func TestSupersedesRefoldOnce(t *testing.T) {
	e := newEnv(t, nil)
	folds := watchFolds(e.t, e.agg)
	rng := rand.New(rand.NewPCG(5, 1))
	b, bDec := randomPart(t, rng, 30, 8, 0)
	c, cDec := randomPart(t, rng, 30, 8, 0)
	a, aDec := randomPart(t, rng, 30, 8, 0)
	x := expectation("req1", subjects.APIGetData, foldArgs, ref(1, 1), ref(2, 1), ref(3, 1))
	x.Sealed = false
	e.expect(x)
	e.partial(okPartial("req1", ref(1, 1), "dapa", a))
	e.partial(okPartial("req1", ref(2, 1), "dapb", b))
	e.partial(okPartial("req1", ref(3, 1), "dapc", c))
	folds.until(3)
	const retries = 5
	n := uint64(3)
	for k := uint32(1); k <= retries; k++ {
		xk := x
		xk.Seq, xk.Expect, xk.Supersede = k+1, []messages.PortionRef{ref(1, k+1)}, []messages.PortionRef{ref(1, k)}
		e.expect(xk)
		e.partial(okPartial("req1", ref(1, k+1), "dapa", a))
		n++ // a's new attempt
		if k == 1 {
			n += 2 // b and c, folded again on the first reset only
		}
		folds.until(n)
	}
	xs := x
	xs.Seq, xs.Expect, xs.Sealed = retries+2, nil, true
	e.expect(xs)
	if got, want := e.answerTable("req1"), mustMerge(t, aDec, bDec, cDec); !sameAnswer(t, got, want) {
		t.Fatalf("answer\n%v\nis not the fold of the survivors\n%v", got, want)
	}
	if s := e.agg.Stats(); s.Folded != n || s.FoldedAtAnswer != 2 {
		t.Fatalf("stats %+v: want %d folded as they came, b and c at the answer", s, n)
	}
}

// Fold work is tied to the Agg's lifetime: Run does not return while a fold
// handed to a receiving goroutine is still to run, and when it stops, the
// folds of the requests it held (never answered now) are let go.
func TestFoldsEndWithRun(t *testing.T) {
	e := newEnv(t, nil)
	a := e.agg
	folds := watchFolds(e.t, e.agg)
	small, _ := aggPart(t, foldRow{"a", 1, 1})
	x := expectation("held", subjects.APIGetData, foldArgs, ref(1, 1), ref(2, 1))
	x.Sealed = false
	e.expect(x)
	e.partial(okPartial("held", ref(1, 1), "dapa", small))
	folds.until(1)

	r := newRequest("x", time.Now())
	r.expectation(expectation("x", subjects.APIGetData, foldArgs, ref(1, 1), ref(2, 1)))
	a.mu.Lock()
	r.partials[ref(1, 1)] = okPartial("x", ref(1, 1), "dapa", small)
	run := a.foldArrivedLocked(r, ref(1, 1))
	a.mu.Unlock()
	if run == nil {
		t.Fatal("the small partial was not folded inline")
	}
	stopped := make(chan struct{})
	go func() { e.stop(); close(stopped) }()
	select {
	case <-stopped:
		t.Fatal("Run returned while a fold was still to run")
	case <-time.After(100 * time.Millisecond): // a negative: Run must still be waiting
	}
	run()
	select {
	case <-stopped:
	case <-time.After(wait):
		t.Fatal("Run did not return after the fold ran")
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	h := a.requests["held"]
	if h == nil || h.fold == nil {
		t.Fatal("the held request or its fold is gone")
	}
	h.fold.mu.Lock()
	defer h.fold.mu.Unlock()
	if !h.fold.closed {
		t.Fatal("Run stopped with a held request's fold still open")
	}
}

// A request handed to its answer (on an answerer) makes no fold: its
// arguments are not decoded for it.
func TestAnsweredRequestMakesNoFold(t *testing.T) {
	e := newEnv(t, nil)
	a := e.agg
	small, _ := aggPart(t, foldRow{"a", 1, 1})
	r := newRequest("x", time.Now())
	r.expectation(expectation("x", subjects.APIGetData, foldArgs, ref(1, 1), ref(2, 1)))
	r.answering = true
	a.mu.Lock()
	defer a.mu.Unlock()
	r.partials[ref(1, 1)] = okPartial("x", ref(1, 1), "dapa", small)
	if a.foldArrivedLocked(r, ref(1, 1)) != nil || a.foldExpectedLocked(r) != nil || r.fold != nil || r.foldKnown {
		t.Fatalf("a fold was made (%v) for a request being answered", r.fold != nil)
	}
}
