package live

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/sg-project/sg/messages"
	"github.com/sg-project/sg/services/agg/merge"
	"github.com/sg-project/sg/services/dap"
	"github.com/sg-project/sg/services/dap/demo"
	"github.com/sg-project/sg/services/dap/engine"
	"github.com/sg-project/sg/services/dap/parquetdb"
	"github.com/sg-project/sg/subjects"
)

// The hdb's source hands its getData partial to the DAP unencoded
// (dap.PartialSource), so that a large one goes to the Agg in windows: the
// same rows as its encoded partial, for a Parquet time table and for a
// reference table from memory; other APIs take the encoded path.
func TestHDBSourceGivesItsPartialForWindows(t *testing.T) {
	dir := t.TempDir()
	day := time.Date(2026, 3, 2, 0, 0, 0, 0, time.UTC)
	var trade engine.TableDef
	ref := engine.NewStore()
	for _, d := range demo.Defs() {
		if d.Name == demo.Trade {
			trade = d
		}
		if err := ref.Create(d); err != nil {
			t.Fatal(err)
		}
	}
	rows, err := demo.Config{Seed: 3, TradesPerDay: 2000, QuotesPerDay: 10}.Rows(demo.Trade, "eu", day, day.Add(24*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	inst, err := demo.Config{Seed: 3}.Rows(demo.Instrument, "eu", day, day.Add(24*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if err := ref.Append(demo.Instrument, inst); err != nil {
		t.Fatal(err)
	}
	if _, err := parquetdb.Write(dir, trade, rows, day.UnixNano(), day.Add(24*time.Hour).UnixNano(), 500); err != nil {
		t.Fatal(err)
	}
	cat, err := parquetdb.Open(dir, demo.Defs(), day.Add(24*time.Hour).UnixNano())
	if err != nil {
		t.Fatal(err)
	}
	src := hdbSource{cat: cat, ref: ref}
	var _ dap.PartialSource = src

	ctx := context.Background()
	rng := messages.TimeRange{Start: day.UnixNano(), End: day.Add(24 * time.Hour).UnixNano()}
	for _, table := range []string{demo.Trade, demo.Instrument} {
		args, err := messages.Encode(&messages.GetDataArgs{Table: table, StartTS: day, EndTS: day.Add(24 * time.Hour)})
		if err != nil {
			t.Fatal(err)
		}
		p, ok, err := src.ExecutePartial(ctx, subjects.APIGetData, messages.MsgpackArgs(args), nil, rng)
		if err != nil || !ok {
			t.Fatalf("%s: ExecutePartial ok=%v err=%v", table, ok, err)
		}
		b, n, err := src.ExecuteRows(ctx, subjects.APIGetData, messages.MsgpackArgs(args), nil, rng)
		if err != nil {
			t.Fatal(err)
		}
		whole, err := merge.DecodePartial(b)
		if err != nil {
			t.Fatal(err)
		}
		if want := map[string]int{demo.Trade: rows.NumRows(), demo.Instrument: inst.NumRows()}[table]; p.Rows.NumRows() != want || want == 0 {
			t.Fatalf("%s: %d rows, want the %d stored", table, p.Rows.NumRows(), want)
		}
		if p.Rows.NumRows() != whole.Rows.NumRows() || int64(p.Rows.NumRows()) != n {
			t.Fatalf("%s: %d rows for windows, %d (%d) encoded", table, p.Rows.NumRows(), whole.Rows.NumRows(), n)
		}
		enc, err := merge.EncodePartial(p)
		if err != nil {
			t.Fatal(err)
		}
		if string(enc) != string(b) {
			t.Fatalf("%s: the partial for windows differs from the encoded one", table)
		}
	}
	if _, ok, err := src.ExecutePartial(ctx, subjects.APIPing, messages.Args{}, nil, rng); ok || err != nil {
		t.Fatalf("ping: ok=%v err=%v, want the encoded path", ok, err)
	}
}

// An hdb source without a reference store answers a getData of a table not
// in its Parquet catalog with an error that names the table, as it did before
// the source picked its executor itself (a nil store is not called).
func TestHDBSourceWithoutReferenceStoreErrs(t *testing.T) {
	day := time.Date(2026, 3, 2, 0, 0, 0, 0, time.UTC)
	cat, err := parquetdb.Open(t.TempDir(), demo.Defs(), day.Add(24*time.Hour).UnixNano())
	if err != nil {
		t.Fatal(err)
	}
	if cat.Has(demo.Instrument) {
		t.Fatalf("the catalog has %s: the test needs a table it lacks", demo.Instrument)
	}
	args, err := messages.Encode(&messages.GetDataArgs{Table: demo.Instrument, StartTS: day, EndTS: day.Add(24 * time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	rng := messages.TimeRange{Start: day.UnixNano(), End: day.Add(24 * time.Hour).UnixNano()}
	for _, src := range []hdbSource{{cat: cat}, {}} {
		if _, _, err := src.ExecuteRows(ctx, subjects.APIGetData, messages.MsgpackArgs(args), nil, rng); err == nil || !strings.Contains(err.Error(), demo.Instrument) {
			t.Errorf("ExecuteRows: %v, want an error naming %s", err, demo.Instrument)
		}
		if _, _, err := src.ExecutePartial(ctx, subjects.APIGetData, messages.MsgpackArgs(args), nil, rng); err == nil || !strings.Contains(err.Error(), demo.Instrument) {
			t.Errorf("ExecutePartial: %v, want an error naming %s", err, demo.Instrument)
		}
	}
}
