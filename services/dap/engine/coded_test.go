package engine_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/sg-project/sg/messages"
)

// TestStoreKeepsSymbolsCoded: the store holds symbol columns coded, whether
// the rows came as strings or coded, so a partial's symbol columns are coded
// views; filters on them (each operator, like) select the rows a filter over
// the strings selects.
func TestStoreKeepsSymbolsCoded(t *testing.T) {
	s := handStore(t)
	def, _ := s.Def("trade")
	// More rows from bytes (coded, with a dictionary of its own), one value new.
	more := messages.NewTable(def.Columns)
	for _, r := range [][]any{{t0.Add(7 * time.Second), "us", "MSFT", 300.0, int64(1), false}, {t0.Add(8 * time.Second), "eu", "VOD", 2.0, int64(2), false}} {
		if err := more.AppendRow(r...); err != nil {
			t.Fatal(err)
		}
	}
	b, err := messages.Encode(&more)
	if err != nil {
		t.Fatal(err)
	}
	var coded messages.Table
	if err := messages.DecodeCoded(b, &coded, messages.PayloadLimits); err != nil {
		t.Fatal(err)
	}
	if err := s.Append("trade", coded); err != nil {
		t.Fatal(err)
	}
	p, err := s.Execute(messages.GetDataArgs{Table: "trade"}, time.Time{}, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	sym := p.Rows.Col("sym")
	if !sym.Coded() || len(sym.Dict) != 4 {
		t.Fatalf("sym of a partial: %+v, want coded with VOD, AAPL, BP, MSFT", sym)
	}
	var all []string
	for i := range sym.Len() {
		all = append(all, sym.Str(i))
	}
	if want := []string{"VOD", "AAPL", "VOD", "BP", "AAPL", "VOD", "MSFT", "VOD"}; !slices.Equal(all, want) {
		t.Fatalf("sym %v, want %v", all, want)
	}
	for _, tc := range []struct {
		f    messages.Filter
		keep func(string) bool
	}{
		{messages.Filter{Op: messages.FilterEq, Column: "sym", Value: "VOD"}, func(s string) bool { return s == "VOD" }},
		{messages.Filter{Op: messages.FilterNe, Column: "sym", Value: "VOD"}, func(s string) bool { return s != "VOD" }},
		{messages.Filter{Op: messages.FilterLt, Column: "sym", Value: "BP"}, func(s string) bool { return s < "BP" }},
		{messages.Filter{Op: messages.FilterGe, Column: "sym", Value: "BP"}, func(s string) bool { return s >= "BP" }},
		{messages.Filter{Op: messages.FilterIn, Column: "sym", Value: []any{"MSFT", "BP", "NONE"}}, func(s string) bool { return s == "MSFT" || s == "BP" }},
		{messages.Filter{Op: messages.FilterWithin, Column: "sym", Value: []any{"AAPL", "BP"}}, func(s string) bool { return s >= "AAPL" && s <= "BP" }},
		{messages.Filter{Op: messages.FilterLike, Column: "sym", Value: "*P*"}, func(s string) bool { return slices.Contains([]string{"AAPL", "BP"}, s) }},
	} {
		p, err := s.Execute(messages.GetDataArgs{Table: "trade", Columns: []string{"sym"}, Filter: []messages.Filter{tc.f}}, time.Time{}, time.Time{})
		if err != nil {
			t.Fatalf("%s %v: %v", tc.f.Op, tc.f.Value, err)
		}
		var got, want []string
		c := p.Rows.Col("sym")
		for i := range c.Len() {
			got = append(got, c.Str(i))
		}
		for _, s := range all {
			if tc.keep(s) {
				want = append(want, s)
			}
		}
		if !slices.Equal(got, want) {
			t.Errorf("%s %v: %v, want %v", tc.f.Op, tc.f.Value, got, want)
		}
	}
	// Rows (end of day to Parquet) and Slice give the same values.
	rows, err := s.Rows("trade", t0.UnixNano(), t0.Add(time.Hour).UnixNano())
	if err != nil || rows.NumRows() != len(all) || rows.Col("sym").Str(6) != "MSFT" {
		t.Fatalf("Rows: %v %+v", err, rows.Col("sym"))
	}
	// After Upsert (a reference table's columns may be uncoded) appending still works.
	inst := messages.NewTable([]messages.ColumnSpec{{Name: "sym", Type: messages.TypeSymbol}, {Name: "lot", Type: messages.TypeInt}})
	_ = inst.AppendRow("VOD", int64(5))
	_ = inst.AppendRow("RIO", int64(7))
	if err := s.Upsert("instrument", inst); err != nil {
		t.Fatal(err)
	}
	if err := s.Append("instrument", coded.Slice(0, 0)); err == nil {
		t.Fatal("append of another schema accepted")
	}
	ref := messages.NewTable([]messages.ColumnSpec{{Name: "sym", Type: messages.TypeSymbol}, {Name: "lot", Type: messages.TypeInt}})
	_ = ref.AppendRow("ZZZ", int64(9))
	if err := s.Append("instrument", ref); err != nil {
		t.Fatal(err)
	}
	if got := run(t, s, messages.GetDataArgs{Table: "instrument"}); got != `[{"sym":"AAPL","lot":100},{"sym":"RIO","lot":7},{"sym":"VOD","lot":5},{"sym":"ZZZ","lot":9}]` {
		t.Fatalf("instrument after upsert and append: %s", got)
	}
}

// A store rolled again and again (Slice, as a live DAP's rolls do), each
// time with rows of symbols never seen before, keeps in its dictionaries the
// symbols its rows use, not every one it ever held; and rows moved into
// another store (Rows, then Append) bring only the symbols they use.
func TestRolledStoreDictionaryStaysWithItsRows(t *testing.T) {
	s := handStore(t)
	def, _ := s.Def("trade")
	const perRoll = 2000
	at := t0.Add(time.Hour)
	for roll := range 5 {
		rows := messages.NewTable(def.Columns)
		for i := range perRoll {
			if err := rows.AppendRow(at.Add(time.Duration(i)*time.Millisecond), "us", fmt.Sprintf("S%d-%d", roll, i), 1.0, int64(1), false); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.Append("trade", rows); err != nil {
			t.Fatal(err)
		}
		last := at.Add(perRoll*time.Millisecond - time.Millisecond)
		s = s.Slice(last.UnixNano(), last.Add(time.Hour).UnixNano()) // keeps one row: the roll's last
		at = at.Add(time.Minute)
	}
	kept, err := s.Rows("trade", t0.UnixNano(), t0.Add(24*time.Hour).UnixNano())
	if err != nil {
		t.Fatal(err)
	}
	sym := kept.Col("sym")
	if kept.NumRows() != 1 || !sym.Coded() || len(sym.Dict) > 1 {
		t.Fatalf("after 5 rolls of %d new symbols: %d rows, a dictionary of %d values (coded %v); want 1 row and its one symbol", perRoll, kept.NumRows(), len(sym.Dict), sym.Coded())
	}
	other := handStore(t)
	view, err := s.Rows("trade", t0.UnixNano(), t0.Add(24*time.Hour).UnixNano())
	if err != nil {
		t.Fatal(err)
	}
	if err := other.Append("trade", view); err != nil {
		t.Fatal(err)
	}
	before, _ := handStore(t).Rows("trade", t0.UnixNano(), t0.Add(24*time.Hour).UnixNano())
	after, _ := other.Rows("trade", t0.UnixNano(), t0.Add(24*time.Hour).UnixNano())
	if got, want := len(after.Col("sym").Dict), len(before.Col("sym").Dict)+1; got > want {
		t.Fatalf("a store given one row holds %d symbols, want at most %d", got, want)
	}
	if got := after.Col("sym").Str(after.NumRows() - 1); got != "S4-1999" {
		t.Fatalf("the row moved reads sym %q, want S4-1999", got)
	}
}
