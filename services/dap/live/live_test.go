package live

import (
	"errors"
	"testing"

	"github.com/sg-project/sg/messages"
	"github.com/sg-project/sg/services/dap/engine"
)

func TestManifestCuts(t *testing.T) {
	m := manifest{HDBEnd: 10, Cuts: []cut{{Seq: 0, RDBStart: 10}, {Seq: 5, RDBStart: 20}, {Seq: 9, RDBStart: 30}}, ReplayFrom: 7}
	m.prune() // ReplayFrom 7 needs the cut of seq 5 and later ones
	if len(m.Cuts) != 2 || m.Cuts[0].Seq != 5 || m.rdbStart() != 30 {
		t.Fatalf("pruned cuts %+v", m.Cuts)
	}
	if err := m.validate(); err != nil {
		t.Fatal(err)
	}
	bad := manifest{HDBEnd: 40, Cuts: []cut{{Seq: 0, RDBStart: 30}}}
	if bad.validate() == nil {
		t.Fatal("hdb end after rdb start accepted")
	}
	if (&manifest{}).validate() == nil {
		t.Fatal("no cut accepted")
	}
	dir := t.TempDir()
	if err := m.save(dir); err != nil {
		t.Fatal(err)
	}
	got, ok, err := loadManifest(dir)
	if err != nil || !ok || got.rdbStart() != 30 || got.ReplayFrom != 7 {
		t.Fatalf("loaded %+v %v %v", got, ok, err)
	}
}

func TestConform(t *testing.T) {
	def := engine.TableDef{Name: "t", Columns: []messages.ColumnSpec{{Name: "time", Type: messages.TypeTimestamp},
		{Name: "sym", Type: messages.TypeSymbol}, {Name: "px", Type: messages.TypeFloat}}}
	in := messages.NewTable([]messages.ColumnSpec{{Name: "px", Type: messages.TypeInt}, {Name: "time", Type: messages.TypeTimestamp},
		{Name: "sym", Type: messages.TypeString}})
	_ = in.AppendRow(int64(3), int64(7), "A")
	out, err := conform(def, in)
	if err != nil {
		t.Fatal(err)
	}
	if out.Columns[0].Name != "time" || out.Col("px").Floats[0] != 3 || out.Col("sym").Type != messages.TypeSymbol {
		t.Fatalf("%+v", out)
	}
	wrong := messages.NewTable([]messages.ColumnSpec{{Name: "px", Type: messages.TypeBool}, {Name: "time", Type: messages.TypeTimestamp},
		{Name: "sym", Type: messages.TypeString}})
	if _, err := conform(def, wrong); !errors.Is(err, engine.ErrSchema) {
		t.Fatalf("bool into float: %v", err)
	}
	short := messages.NewTable(def.Columns[:2])
	if _, err := conform(def, short); !errors.Is(err, engine.ErrSchema) {
		t.Fatalf("missing column: %v", err)
	}
}
