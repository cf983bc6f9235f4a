package messages

import (
	"errors"
	"testing"
)

func TestLiveUpdateRoundTrip(t *testing.T) {
	rows := NewTable([]ColumnSpec{{Name: "time", Type: TypeTimestamp}, {Name: "sym", Type: TypeSymbol}, {Name: "px", Type: TypeFloat}})
	if err := rows.AppendRow(int64(5), "A", 1.5); err != nil {
		t.Fatal(err)
	}
	in := LiveUpdate{V: LiveVersion, Table: "trade", Rows: rows}
	b, err := Encode(&in)
	if err != nil {
		t.Fatal(err)
	}
	out, err := DecodeValid[LiveUpdate](b)
	if err != nil || out.Table != "trade" || out.Rows.NumRows() != 1 || out.Rows.Col("sym").Strings[0] != "A" {
		t.Fatalf("%+v %v", out, err)
	}
	for _, bad := range []LiveUpdate{{V: 0, Table: "t", Rows: rows}, {V: LiveVersion, Rows: rows}} {
		b, _ := Encode(&bad)
		if _, err := DecodeValid[LiveUpdate](b); !errors.Is(err, ErrInvalid) {
			t.Errorf("%+v: %v", bad, err)
		}
	}
	if _, err := DecodeValid[LiveUpdate]([]byte{0x92, 0xc1}); err == nil {
		t.Fatal("garbage decoded")
	}
}
