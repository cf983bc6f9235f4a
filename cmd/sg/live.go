package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sg-project/sg/messages"
	"github.com/sg-project/sg/services/dap/engine"
	"github.com/sg-project/sg/services/dap/live"
)

// liveSchema is the --tables file of sg live.
type liveSchema struct {
	LabelSets []messages.LabelSet `json:"labelSets"`
	Tables    []struct {
		Name    string   `json:"name"`
		Labels  []string `json:"labels"`
		Columns []struct {
			Name string `json:"name"`
			Type string `json:"type"`
		} `json:"columns"`
	} `json:"tables"`
}

func columnType(name string) (messages.ColumnType, bool) {
	for t := range 256 {
		if ct := messages.ColumnType(t); ct.Valid() && ct.String() == name {
			return ct, true
		}
	}
	return 0, false
}

func loadLiveSchema(path string) ([]messages.LabelSet, []engine.TableDef, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, err
	}
	var s liveSchema
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil {
		return nil, nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(s.LabelSets) == 0 || len(s.Tables) == 0 {
		return nil, nil, fmt.Errorf("%s: want at least one label set and one table", path)
	}
	var defs []engine.TableDef
	for _, t := range s.Tables {
		d := engine.TableDef{Name: t.Name, Labels: t.Labels}
		for _, c := range t.Columns {
			ct, ok := columnType(c.Type)
			if !ok {
				return nil, nil, fmt.Errorf("%s: table %q column %q: type %q: want timestamp, symbol, string, int, float or bool", path, t.Name, c.Name, c.Type)
			}
			d.Columns = append(d.Columns, messages.ColumnSpec{Name: c.Name, Type: ct})
		}
		if err := engine.NewStore().Create(d); err != nil {
			return nil, nil, fmt.Errorf("%s: %w", path, err)
		}
		defs = append(defs, d)
	}
	return s.LabelSets, defs, nil
}

func cmdLive(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var common Common
	fs, err := newCommonFlagSet(&common, "live", "[flags]", `
Runs live label sets against a NATS server: for each label set an rdb, an idb and an hdb
DAP, fed by the live stream (see sg publish), with ends of interval and of day, and
restart by replaying the stream from what --dir has persisted.

Without --tables it runs the demo's regions and tables, with generated history
(--history) and, with --feed-rate, a feed. With --tables it runs the label sets and
tables of a JSON file:
  {"labelSets": [{"region": "eu"}, {"region": "us"}],
   "tables": [{"name": "trade", "labels": ["region"], "columns": [
       {"name": "time", "type": "timestamp"}, {"name": "region", "type": "symbol"},
       {"name": "sym", "type": "symbol"}, {"name": "price", "type": "float"}]}]}
A table without a "time" column is reference data. Bring history as Parquet files under
<dir>/<label set>/hdb/<table>/date=YYYY-MM-DD/<from>-<to>.parquet (README).
With authentication on, connect with a dap credential, or demo with --feed-rate
(the feed writes the live stream on the same connection).`, stdout, stderr)
	if err != nil {
		return err
	}
	dir := fs.String("dir", "sg-live", "data directory: one subdirectory per label set")
	tables := fs.String("tables", "", "JSON file of label sets and tables (default: the demo)")
	rcID := fs.String("rc", "", "RC that owns the DAPs (\"\" = any)")
	assembly := fs.String("assembly", os.Getenv("SG_ASSEMBLY_NAME"), "assembly of the DAPs (env SG_ASSEMBLY_NAME)")
	eoi := fs.Duration("eoi-every", time.Minute, "end of interval period")
	eod := fs.Duration("eod-every", 24*time.Hour, "end of day period (cut at multiples of it, UTC)")
	lateness := fs.Duration("lateness", live.DefaultLateness, "automatic cuts lag the clock by this")
	retention := fs.Duration("stream-max-age", live.DefaultStreamAge, "retention of the live stream (at least two days)")
	concurrency := fs.Int("concurrency", 4, "portions a DAP runs at once")
	history := fs.Duration("history", 72*time.Hour, "demo: generated history for a fresh directory (0: none)")
	feedRate := fs.Int("feed-rate", 0, "demo: feed rows a second (0: no feed)")
	refEvery := fs.Duration("ref-every", 0, "demo: instrument update period (0: none)")
	metrics := fs.String("metrics-listen", "", "HOST:PORT to serve Prometheus /metrics on (\"\" = off)")
	if done, err := parse(fs, args, stdout); done {
		return err
	}
	log, closeLog, err := newLogger(stderr, common.LogLevel)
	if err != nil {
		return err
	}
	defer closeLog()
	nc, s, stop, err := connect(common, "sg-live", log)
	if err != nil {
		return err
	}
	defer stop()
	reg := prometheus.NewRegistry()
	if err := serveMetrics(ctx, *metrics, reg, log); err != nil {
		return err
	}
	if *tables == "" {
		h := *history
		if h == 0 {
			h = -1
		}
		log.Info().Str("dir", *dir).Msg("sg live: demo label sets")
		return live.RunDemo(ctx, live.DemoConfig{NC: nc, Subjects: s, Log: log, RCID: *rcID, Assembly: *assembly, Dir: *dir,
			History: h, EOIEvery: *eoi, EODEvery: *eod, Lateness: *lateness, FeedRate: *feedRate, RefEvery: *refEvery,
			Concurrency: *concurrency, Registry: reg})
	}
	sets, defs, err := loadLiveSchema(*tables)
	if err != nil {
		return err
	}
	var groups []*live.Group
	for _, ls := range sets {
		g, err := live.NewGroup(live.GroupConfig{NC: nc, Subjects: s, Log: log, Labels: ls, RCID: *rcID, Assembly: *assembly,
			Dir: filepath.Join(*dir, ls.Key()), Tables: defs, EOIEvery: *eoi, EODEvery: *eod, Lateness: *lateness,
			StreamMaxAge: *retention, Concurrency: *concurrency, Registry: reg})
		if err != nil {
			return err
		}
		groups = append(groups, g)
	}
	log.Info().Int("label_sets", len(groups)).Str("dir", *dir).Msg("sg live: starting")
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	errc := make(chan error, len(groups))
	for _, g := range groups {
		wg.Go(func() {
			if err := g.Run(ctx); err != nil {
				errc <- err
				cancel()
			}
		})
	}
	wg.Wait()
	close(errc)
	var all error
	for e := range errc {
		all = errors.Join(all, e)
	}
	return all
}
