package live

import (
	"context"
	"fmt"
	"slices"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/sg-project/sg/messages"
	"github.com/sg-project/sg/services/dap"
	"github.com/sg-project/sg/services/dap/engine"
)

// handle applies one stream message and acks it once its rows are held (or it is
// rejected for good). Nothing in a message can stop the group: every fault is logged,
// counted and acked, so a poison message is not redelivered forever.
func (g *Group) handle(ctx context.Context, m jetstream.Msg) {
	md, err := m.Metadata()
	if err != nil {
		g.log.Error().Err(err).Str("subject", m.Subject()).Msg("live message without JetStream metadata")
		return
	}
	seq := md.Sequence.Stream
	log := g.log.With().Uint64("seq", seq).Str("subject", m.Subject()).Logger()
	defer func() {
		if err := m.DoubleAck(ctx); err != nil && ctx.Err() == nil {
			log.Warn().Err(err).Msg("ack not confirmed; the message may be delivered again (it is recognised by its sequence)")
		}
	}()
	if seq <= g.lastSeq {
		g.stats.Duplicates.Add(1)
		return
	}
	g.lastSeq = seq
	if !g.isReady() {
		g.stats.Replayed.Add(1)
		defer func() {
			if g.replayLeft--; g.replayLeft == 0 {
				g.replayed()
			}
		}()
	}
	if err := g.apply(seq, m.Data()); err != nil {
		// A poison record: acked above (deferred), so never redelivered;
		// a replay meets it again and skips it again.
		g.stats.Malformed.Add(1)
		g.poisoned.Skip(g.log, g.cfg.Subjects.LiveStream(), seq, m.Subject(), err)
		return
	}
	g.stats.Messages.Add(1)
}

func (g *Group) apply(seq uint64, data []byte) error {
	u, err := messages.DecodeValid[messages.LiveUpdate](data)
	if err != nil {
		return err
	}
	def, ok := g.def(u.Table)
	if !ok {
		return fmt.Errorf("%w: %q", engine.ErrUnknownTable, u.Table)
	}
	rows, err := conform(def, u.Rows)
	if err != nil {
		return err
	}
	if err := g.checkLabels(def, &rows); err != nil {
		return err
	}
	if !def.IsTimeTable() {
		return g.applyReference(seq, def, rows)
	}
	return g.applyRows(seq, def, rows)
}

func (g *Group) def(table string) (engine.TableDef, bool) {
	for _, d := range append(slices.Clip(g.time), g.refs...) {
		if d.Name == table {
			return d, true
		}
	}
	return engine.TableDef{}, false
}

// checkLabels rejects rows whose label columns disagree with the group's label set: they
// were published on the wrong subject and would answer for another label set.
func (g *Group) checkLabels(def engine.TableDef, rows *messages.Table) error {
	for _, l := range def.Labels {
		want, ok := g.cfg.Labels[l]
		c := rows.Col(l)
		if !ok || c == nil {
			continue
		}
		for i, v := range c.Strings {
			if v != want {
				return fmt.Errorf("row %d has %s=%q on the subject of %s", i, l, v, g.key)
			}
		}
	}
	return nil
}

// applyRows puts each row in the tier whose purview holds its time: before the hdb's end
// it is late (a closed day: corrections to history are not taken) or, on replay, already
// in Parquet; before the rdb's start it belongs to the idb; else to the rdb.
//
// A row older than the rdb's start but within the idb's interval (it arrived after its
// interval closed) is taken by the idb: the idb changes its data in one step with a
// purview version bump, so portions in flight RETRY (I3). The rule depends only on the
// hdb's end, which only grows, so a replay decides every row as it was decided live:
// a row at or after the current hdb end was taken then, one before it is in Parquet or
// was late.
func (g *Group) applyRows(seq uint64, def engine.TableDef, rows messages.Table) error {
	times := rows.Col(engine.TimeColumn).Ints
	rdbStart, hdbEnd := g.man.rdbStart(), g.man.HDBEnd
	var toIDB, toRDB []int
	late, maxT := 0, int64(-1<<63)
	for i, t := range times {
		switch {
		case t < hdbEnd:
			if g.isReady() {
				late++
			}
			continue
		case t < rdbStart:
			toIDB = append(toIDB, i)
		default:
			toRDB = append(toRDB, i)
		}
		maxT = max(maxT, t)
	}
	if late > 0 {
		g.stats.LateRows.Add(uint64(late))
		g.lim.Warn(&g.log, "late_rows").Uint64("seq", seq).Str("table", def.Name).Int("rows", late).
			Str("hdb_end", ts(hdbEnd)).Msg("late rows rejected: their day is closed")
	}
	if len(toIDB) > 0 {
		if err := g.idbTake(def.Name, rows.Take(toIDB)); err != nil {
			return err
		}
	}
	if len(toRDB) > 0 {
		if err := g.rdbStore.Append(def.Name, rows.Take(toRDB)); err != nil {
			return err
		}
	}
	if n := len(toIDB) + len(toRDB); n > 0 {
		g.stats.Rows.Add(uint64(n))
		g.held = append(g.held, heldMsg{seq: seq, maxTime: maxT})
	}
	return nil
}

// idbTake adds rows of the idb's interval to it. On replay the idb is unavailable and
// being rebuilt: they are appended. Live, they change what the idb serves: a copy takes
// them and replaces the store with a purview version bump, in one step.
func (g *Group) idbTake(table string, rows messages.Table) error {
	if !g.isReady() {
		return g.idbSt.Append(table, rows)
	}
	next := g.idbSt.Slice(messages.TSMin, messages.TSMax)
	if err := next.Append(table, rows); err != nil {
		return err
	}
	g.idbSt = next
	g.stats.LateInIDB.Add(uint64(rows.NumRows()))
	g.idb.Apply(dap.Change{BumpPurviewVersion: true, Source: g.wrap(messages.TierIDB, dap.EngineSource{Store: next})})
	g.log.Info().Str("table", table).Int("rows", rows.NumRows()).Msg("late rows taken by the idb: their interval is closed, their day is not")
	return nil
}

// applyReference upserts a reference update, persists the table, and sets every DAP's
// reference vintage to the message's stream position (seed: "on each reference data
// update, the DAP sends its latest stream position"). The hdb swaps source and vintage
// in one step, so no portion sees the new rows at the old vintage or the reverse.
func (g *Group) applyReference(seq uint64, def engine.TableDef, rows messages.Table) error {
	if seq <= g.man.Vintage {
		return nil // replay: the snapshot has it
	}
	next := g.ref.Slice(0, 0) // a copy: portions running on the old one keep it
	if err := next.Upsert(def.Name, rows); err != nil {
		return err
	}
	all, err := next.Rows(def.Name, 0, 0)
	if err != nil {
		return err
	}
	if err := saveRef(g.cfg.Dir, def.Name, seq, all); err != nil {
		return err
	}
	g.man.Vintage = seq
	if err := g.man.save(g.cfg.Dir); err != nil {
		return err
	}
	g.ref = next
	g.stats.ReferenceUpdates.Add(1)
	v := seq
	g.hdb.Apply(dap.Change{Vintage: &v, Source: g.wrap(messages.TierHDB, hdbSource{g.cat, g.ref})})
	g.idb.Apply(dap.Change{Vintage: &v})
	g.rdb.Apply(dap.Change{Vintage: &v})
	g.log.Info().Uint64("vintage", v).Str("table", def.Name).Int("rows", rows.NumRows()).Msg("reference data updated")
	return nil
}

// conform returns the rows with the table's columns in its order and types: columns are
// matched by name; an int column feeds a float one, a string column a symbol one (and
// back), a timestamp an int.
func conform(def engine.TableDef, rows messages.Table) (messages.Table, error) {
	if err := rows.Validate(); err != nil {
		return messages.Table{}, err
	}
	if len(rows.Columns) != len(def.Columns) {
		return messages.Table{}, fmt.Errorf("%w: %q has %d columns, the update %d", engine.ErrSchema, def.Name, len(def.Columns), len(rows.Columns))
	}
	out := messages.Table{Columns: make([]messages.Column, len(def.Columns))}
	for k, spec := range def.Columns {
		c := rows.Col(spec.Name)
		if c == nil {
			return messages.Table{}, fmt.Errorf("%w: update of %q lacks column %q", engine.ErrSchema, def.Name, spec.Name)
		}
		conv := *c
		conv.Name = spec.Name
		switch {
		case c.Type == spec.Type:
		case spec.Type == messages.TypeFloat && c.Type == messages.TypeInt:
			conv = messages.Column{Name: spec.Name, Type: spec.Type, Floats: make([]float64, len(c.Ints))}
			for i, v := range c.Ints {
				conv.Floats[i] = float64(v)
			}
		case isText(spec.Type) && isText(c.Type), isWhole(spec.Type) && isWhole(c.Type):
			conv.Type = spec.Type
		default:
			return messages.Table{}, fmt.Errorf("%w: column %q of %q is %s, the update has %s", engine.ErrSchema, spec.Name, def.Name, spec.Type, c.Type)
		}
		out.Columns[k] = conv
	}
	return out, out.Validate()
}

func isText(t messages.ColumnType) bool {
	return t == messages.TypeString || t == messages.TypeSymbol
}

func isWhole(t messages.ColumnType) bool {
	return t == messages.TypeInt || t == messages.TypeTimestamp
}
