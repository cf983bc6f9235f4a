package live

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"github.com/sg-project/sg/messages"
	"github.com/sg-project/sg/services/dap"
	"github.com/sg-project/sg/services/dap/engine"
	"github.com/sg-project/sg/services/dap/parquetdb"
	"github.com/sg-project/sg/services/loglimit"
	"github.com/sg-project/sg/services/poison"
	"github.com/sg-project/sg/services/streams"
	"github.com/sg-project/sg/subjects"
)

// Defaults of GroupConfig.
const (
	DefaultLateness   = time.Second
	DefaultCatchUp    = 10 * time.Second
	DefaultStreamAge  = 7 * 24 * time.Hour
	defaultAckWait    = 30 * time.Second
	replayingReason   = "replaying the live stream"
	emptyIDBReason    = "holds no data until the next end of interval"
	idbLoadingReason  = "end of interval: loading the closed interval"
	hdbWritingReason  = "end of day: writing the day to Parquet"
	generationShift   = 32
	maxPendingUpdates = 64
)

// GroupConfig configures the live group of one label set.
type GroupConfig struct {
	NC       *nats.Conn
	Subjects subjects.Subjects // zero value: subjects.Default()
	Log      zerolog.Logger

	Labels messages.LabelSet // the label set; its key is a subject token
	// IDPrefix: DAP ids are <IDPrefix>-rdb, -idb, -hdb, and the rdb's id names the durable
	// consumer; default "dap-<label values>". A replica of a label set needs its own
	// IDPrefix and Dir: a group deletes and recreates its consumer when it starts.
	IDPrefix string
	RCID     string
	Assembly string
	Dir      string // data directory of the label set: manifest, hdb Parquet, reference snapshot

	// Tables: time tables (with a time column) are served by every tier, reference
	// tables (without) by the hdb. Reference holds the first content of reference tables
	// for a fresh group (no manifest yet).
	Tables    []engine.TableDef
	Reference map[string]messages.Table
	// Start is where a fresh group's rdb begins: the hdb serves everything before (its
	// Parquet files, if any, written by the caller), the idb nothing yet.
	Start time.Time

	EOIEvery time.Duration // automatic end of interval period; 0: only EndOfInterval
	EODEvery time.Duration // automatic end of day period; 0: only EndOfDay
	Lateness time.Duration // automatic cuts lag the clock by this; default DefaultLateness
	CatchUp  time.Duration // bound on a roll's catch-up with the stream; default DefaultCatchUp

	StreamMaxAge time.Duration // retention of the live stream if this group creates it; default 7 days
	RowGroupRows int           // Parquet row group size; default parquetdb.DefaultRowGroupRows

	Concurrency int
	Heartbeat   time.Duration
	// WrapSource, if set, wraps every source a DAP runs on (tests use it to hold a portion).
	WrapSource func(tier messages.Tier, s dap.Source) dap.Source
	// Now is the clock of the automatic cuts; default time.Now.
	Now func() time.Time
	// Registry, if set, gets the group's counters (sg_live_*, label "labels") while it runs.
	Registry prometheus.Registerer
}

// Stats are a group's counters.
type Stats struct {
	Messages, Duplicates, Malformed atomic.Uint64 // stream messages applied, seen again, rejected
	Rows, LateRows, Replayed        atomic.Uint64 // rows held, late rows rejected, messages replayed at start
	EOIs, EODs, ReferenceUpdates    atomic.Uint64
	LateInIDB                       atomic.Uint64 // late rows taken by the idb (their day still open)
}

// Group is the live data of one label set: rdb, idb and hdb DAPs, ingest and rolls.
type Group struct {
	cfg   GroupConfig
	log   zerolog.Logger
	key   string
	time  []engine.TableDef // time tables
	refs  []engine.TableDef // reference tables
	stats Stats
	ready chan struct{}
	// poisoned counts the stream messages rejected for good (Malformed too).
	poisoned *poison.Counter
	// lim limits the lines about late rows: any publisher on the live
	// stream can send them (package loglimit; Stats.LateRows counts all).
	lim *loglimit.Limiter

	rolls chan rollReq

	// Owned by Run's loop goroutine.
	rdb, idb, hdb   *dap.DAP
	rdbStore, idbSt *engine.Store
	ref             *engine.Store
	cat             *parquetdb.Catalog
	man             manifest
	lastSeq         uint64
	held            []heldMsg // messages with rows at or after the hdb end, in stream order
	cons            jetstream.Consumer
	stream          jetstream.Stream
	msgs            chan jetstream.Msg
	replayLeft      uint64
	started         atomic.Bool
	hdbStats        atomic.Pointer[parquetdb.Stats]
}

// heldMsg: message seq holds rows up to maxTime that are not in Parquet yet.
type heldMsg struct {
	seq     uint64
	maxTime int64
}

type rollKind int

const (
	rollEOI rollKind = iota
	rollEOD
	rollSync // no roll: only catch up with the stream
)

type rollReq struct {
	kind rollKind
	at   int64
	done chan error
}

// NewGroup validates the config.
func NewGroup(cfg GroupConfig) (*Group, error) {
	if cfg.Subjects.Prefix() == "" {
		cfg.Subjects = subjects.Default()
	}
	if cfg.Lateness == 0 {
		cfg.Lateness = DefaultLateness
	}
	if cfg.CatchUp == 0 {
		cfg.CatchUp = DefaultCatchUp
	}
	if cfg.StreamMaxAge == 0 {
		cfg.StreamMaxAge = DefaultStreamAge
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	g := &Group{cfg: cfg, key: cfg.Labels.Key(), ready: make(chan struct{}), rolls: make(chan rollReq), lim: loglimit.Default()}
	if cfg.IDPrefix == "" {
		vals := strings.Split(g.key, ",")
		for i, v := range vals {
			_, vals[i], _ = strings.Cut(v, "=")
		}
		g.cfg.IDPrefix = "dap-" + strings.Join(vals, "-")
	}
	var errs []error
	if cfg.NC == nil {
		errs = append(errs, errors.New("NC is nil"))
	}
	if cfg.Dir == "" {
		errs = append(errs, errors.New("Dir is empty"))
	}
	if len(cfg.Labels) == 0 {
		errs = append(errs, errors.New("Labels is empty"))
	}
	if err := subjects.Validate("label set key", g.key); err != nil {
		errs = append(errs, err)
	}
	// The stream is the only copy of what is not yet in Parquet: it must keep messages
	// for longer than a day, or a restart could find them gone.
	if cfg.EODEvery > 0 && cfg.StreamMaxAge < 2*cfg.EODEvery {
		errs = append(errs, fmt.Errorf("StreamMaxAge %v must be at least twice EODEvery %v", cfg.StreamMaxAge, cfg.EODEvery))
	}
	if cfg.Lateness < 0 || cfg.EOIEvery < 0 || cfg.EODEvery < 0 {
		errs = append(errs, errors.New("Lateness, EOIEvery and EODEvery must not be negative"))
	}
	for _, d := range cfg.Tables {
		if d.IsTimeTable() {
			g.time = append(g.time, d)
		} else {
			g.refs = append(g.refs, d)
		}
	}
	if len(g.time) == 0 {
		errs = append(errs, errors.New("no time table"))
	}
	g.log = cfg.Log.With().Str("labels", g.key).Logger()
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("live: group %q: %w", g.key, err)
	}
	var err error
	if g.poisoned, err = poison.NewCounter(cfg.Registry); err != nil {
		return nil, fmt.Errorf("live: group %q: %w", g.key, err)
	}
	return g, nil
}

// ID of the DAP of a tier.
func (g *Group) ID(tier messages.Tier) string { return g.cfg.IDPrefix + "-" + string(tier) }

// Ready is closed once the group has replayed the stream and its DAPs are available.
func (g *Group) Ready() <-chan struct{} { return g.ready }

// Stats returns the counters.
func (g *Group) Stats() *Stats { return &g.stats }

// HDBStats are the hdb's Parquet read counters (partitions, row groups, columns, bytes);
// nil before Run has opened the catalog.
func (g *Group) HDBStats() *parquetdb.Stats { return g.hdbStats.Load() }

// DAP returns the DAP of a tier. Call it once Ready is closed (Run creates the DAPs).
func (g *Group) DAP(tier messages.Tier) *dap.DAP {
	switch tier {
	case messages.TierRDB:
		return g.rdb
	case messages.TierIDB:
		return g.idb
	}
	return g.hdb
}

// EndOfInterval moves the rdb's rows before at to the idb (see the package doc). It
// returns once done, or with the reason it could not be.
func (g *Group) EndOfInterval(ctx context.Context, at time.Time) error {
	return g.roll(ctx, rollEOI, at)
}

// EndOfDay moves the idb's rows before at (after an end of interval to at) to the hdb.
func (g *Group) EndOfDay(ctx context.Context, at time.Time) error {
	return g.roll(ctx, rollEOD, at)
}

// Sync returns once the group holds every update published to its subjects before the
// call: a writer that must read its own writes calls it after publishing.
func (g *Group) Sync(ctx context.Context) error {
	return g.roll(ctx, rollSync, time.Time{})
}

func (g *Group) roll(ctx context.Context, kind rollKind, at time.Time) error {
	r := rollReq{kind: kind, at: at.UnixNano(), done: make(chan error, 1)}
	select {
	case g.rolls <- r:
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case err := <-r.done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (g *Group) hdbDir() string { return filepath.Join(g.cfg.Dir, "hdb") }

// Run starts the DAPs unavailable, replays the stream, makes them available, then ingests
// and rolls until ctx ends.
func (g *Group) Run(ctx context.Context) error {
	if !g.started.CompareAndSwap(false, true) {
		return errors.New("live: Run called twice")
	}
	if err := g.load(); err != nil {
		return err
	}
	unregister, err := g.registerMetrics(g.cfg.Registry)
	if err != nil {
		return err
	}
	defer unregister()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	defer wg.Wait()
	errc := make(chan error, 3)
	for _, d := range []*dap.DAP{g.hdb, g.idb, g.rdb} {
		wg.Go(func() {
			if err := d.Run(ctx); err != nil {
				errc <- err
				cancel()
			}
		})
	}
	err = g.consume(ctx)
	cancel()
	wg.Wait()
	close(errc)
	for e := range errc {
		err = errors.Join(err, e)
	}
	if errors.Is(err, context.Canceled) && ctx.Err() != nil {
		err = nil
	}
	return err
}

// load reads the manifest, catalog and reference snapshot (or sets up a fresh group), and
// creates the DAPs, unavailable while the stream replays.
func (g *Group) load() error {
	if err := os.MkdirAll(g.cfg.Dir, 0o755); err != nil {
		return fmt.Errorf("live: %w", err)
	}
	m, ok, err := loadManifest(g.cfg.Dir)
	if err != nil {
		return err
	}
	if !ok {
		start := g.cfg.Start.UnixNano()
		if g.cfg.Start.IsZero() {
			start = g.cfg.Now().UnixNano()
		}
		m = manifest{Labels: g.key, HDBEnd: start, Cuts: []cut{{Seq: 0, RDBStart: start}}, ReplayFrom: 1}
		for _, d := range g.refs {
			rows := g.cfg.Reference[d.Name]
			if len(rows.Columns) == 0 {
				rows = messages.NewTable(d.Columns)
			}
			if err := saveRef(g.cfg.Dir, d.Name, 0, rows); err != nil {
				return err
			}
		}
	} else if m.Labels != g.key {
		return fmt.Errorf("live: %s holds label set %q, not %q", g.cfg.Dir, m.Labels, g.key)
	}
	m.Generation++
	if err := m.save(g.cfg.Dir); err != nil {
		return err
	}
	g.man = m
	g.lastSeq = m.ReplayFrom - 1
	if g.cat, err = parquetdb.Open(g.hdbDir(), g.time, m.HDBEnd); err != nil {
		return err
	}
	g.hdbStats.Store(g.cat.Stats())
	g.ref = engine.NewStore()
	for _, d := range g.refs {
		if err := g.ref.Create(d); err != nil {
			return err
		}
		snap, ok, err := loadRef(g.cfg.Dir, d.Name)
		if err != nil {
			return err
		}
		if ok {
			rows, err := conform(d, snap.Rows)
			if err == nil {
				err = g.ref.Append(d.Name, rows)
			}
			if err != nil {
				return fmt.Errorf("live: reference snapshot of %s: %w", d.Name, err)
			}
		}
	}
	g.rdbStore, g.idbSt = g.newStore(), g.newStore()

	pv := m.Generation << generationShift
	R := m.rdbStart()
	idbPurview := messages.TimeRange{Start: m.HDBEnd, End: R}
	if !idbPurview.Valid() {
		idbPurview = messages.TimeRange{Start: R - 1, End: R} // advertised unavailable: never dispatched
	}
	var partitioned, withRef []messages.TableInfo
	for _, d := range g.time {
		partitioned = append(partitioned, messages.TableInfo{Name: d.Name, Kind: messages.TablePartitioned})
	}
	withRef = append(withRef, partitioned...)
	for _, d := range g.refs {
		withRef = append(withRef, messages.TableInfo{Name: d.Name, Kind: messages.TableSharded})
	}
	mk := func(tier messages.Tier, purview messages.TimeRange, tables []messages.TableInfo, src dap.Source) (*dap.DAP, error) {
		return dap.New(dap.Config{ID: g.ID(tier), RCID: g.cfg.RCID, Assembly: g.cfg.Assembly, Labels: g.cfg.Labels,
			Tier: tier, Purview: purview, Tables: tables, PurviewVersion: pv, ReferenceVintage: m.Vintage,
			Concurrency: g.cfg.Concurrency, Heartbeat: g.cfg.Heartbeat, NC: g.cfg.NC, Subjects: g.cfg.Subjects,
			Log: g.cfg.Log, Source: g.wrap(tier, src), Unavailable: replayingReason, Registry: g.cfg.Registry})
	}
	if g.hdb, err = mk(messages.TierHDB, messages.TimeRange{Start: messages.TSMin, End: m.HDBEnd}, withRef, hdbSource{g.cat, g.ref}); err != nil {
		return err
	}
	if g.idb, err = mk(messages.TierIDB, idbPurview, partitioned, dap.EngineSource{Store: g.idbSt}); err != nil {
		return err
	}
	if g.rdb, err = mk(messages.TierRDB, messages.TimeRange{Start: R, End: messages.TSMax}, partitioned, dap.EngineSource{Store: g.rdbStore}); err != nil {
		return err
	}
	return nil
}

func (g *Group) newStore() *engine.Store {
	st := engine.NewStore()
	for _, d := range g.time {
		_ = st.Create(d) // validated by the first Create in load
	}
	return st
}

func (g *Group) wrap(tier messages.Tier, s dap.Source) dap.Source {
	if g.cfg.WrapSource != nil {
		return g.cfg.WrapSource(tier, s)
	}
	return s
}

// EnsureStream creates (or updates) the live stream of a deployment.
func EnsureStream(ctx context.Context, js jetstream.JetStream, s subjects.Subjects, maxAge time.Duration) (jetstream.Stream, error) {
	st, err := streams.Ensure(ctx, js, jetstream.StreamConfig{Name: s.LiveStream(), Subjects: []string{s.LivePattern()},
		Storage: jetstream.FileStorage, MaxAge: maxAge, Description: "sg live table updates, per table and label set"})
	if err != nil {
		return nil, fmt.Errorf("live: stream %s: %w", s.LiveStream(), err)
	}
	return st, nil
}

// consume sets up the durable consumer from ReplayFrom, replays, then runs the loop.
func (g *Group) consume(ctx context.Context) error {
	js, err := jetstream.New(g.cfg.NC)
	if err != nil {
		return fmt.Errorf("live: %w", err)
	}
	st, err := EnsureStream(ctx, js, g.cfg.Subjects, g.cfg.StreamMaxAge)
	if err != nil {
		return err
	}
	g.stream = st
	durable := g.ID(messages.TierRDB)
	// The durable's ack floor says what the rdb held, not what is persisted: a restarted
	// rdb holds nothing, so it starts again from the manifest's ReplayFrom.
	if err := js.DeleteConsumer(ctx, g.cfg.Subjects.LiveStream(), durable); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
		return fmt.Errorf("live: delete consumer %s: %w", durable, err)
	}
	g.cons, err = st.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{Durable: durable,
		FilterSubject: g.cfg.Subjects.LiveLabelSetPattern(g.key), AckPolicy: jetstream.AckExplicitPolicy,
		DeliverPolicy: jetstream.DeliverByStartSequencePolicy, OptStartSeq: g.man.ReplayFrom,
		MaxAckPending: 1, AckWait: defaultAckWait, Description: "rdb of " + g.key})
	if err != nil {
		return fmt.Errorf("live: consumer %s: %w", durable, err)
	}
	info, err := g.cons.Info(ctx)
	if err != nil {
		return fmt.Errorf("live: consumer %s: %w", durable, err)
	}
	g.replayLeft = info.NumPending
	g.msgs = make(chan jetstream.Msg)
	cc, err := g.cons.Consume(func(m jetstream.Msg) {
		select {
		case g.msgs <- m:
		case <-ctx.Done():
		}
	}, jetstream.PullMaxMessages(maxPendingUpdates))
	if err != nil {
		return fmt.Errorf("live: consume: %w", err)
	}
	defer cc.Stop()
	g.log.Info().Uint64("replay_from", g.man.ReplayFrom).Uint64("replay_messages", g.replayLeft).
		Time("hdb_end", time.Unix(0, g.man.HDBEnd)).Time("rdb_start", time.Unix(0, g.man.rdbStart())).Msg("live group replaying the stream")
	if g.replayLeft == 0 {
		g.replayed()
	}
	return g.loop(ctx)
}

// idbEmpty: the idb's interval [H, R) is empty (after an end of day, or fresh), so it
// serves nothing until the next end of interval. An idb whose interval has no rows is not
// empty: it answers for its interval, with no rows.
func (g *Group) idbEmpty() bool { return g.man.HDBEnd == g.man.rdbStart() }

// replayed makes the DAPs available after the replay: hdb and rdb, and the idb if it
// holds rows (else it waits for the next end of interval).
func (g *Group) replayed() {
	yes, no := true, false
	g.hdb.Apply(dap.Change{Available: &yes})
	if g.idbEmpty() {
		g.idb.Apply(dap.Change{Available: &no, Reason: emptyIDBReason})
	} else {
		g.idb.Apply(dap.Change{Available: &yes})
	}
	g.rdb.Apply(dap.Change{Available: &yes})
	g.log.Info().Uint64("messages", g.stats.Replayed.Load()).Uint64("last_seq", g.lastSeq).Msg("live group replayed; available")
	close(g.ready)
}

func (g *Group) loop(ctx context.Context) error {
	var eoi, eod <-chan time.Time
	if g.cfg.EOIEvery > 0 {
		t := time.NewTicker(g.cfg.EOIEvery)
		defer t.Stop()
		eoi = t.C
	}
	if g.cfg.EODEvery > 0 {
		t := time.NewTicker(g.cfg.EODEvery)
		defer t.Stop()
		eod = t.C
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case m := <-g.msgs:
			g.handle(ctx, m)
		case r := <-g.rolls:
			r.done <- g.doRoll(ctx, r.kind, r.at)
		case <-eoi:
			if err := g.doRoll(ctx, rollEOI, g.autoCut(g.cfg.EOIEvery)); err != nil {
				g.log.Error().Err(err).Msg("end of interval failed; the next one retries")
			}
		case <-eod:
			if err := g.doRoll(ctx, rollEOD, g.autoCut(g.cfg.EODEvery)); err != nil {
				g.log.Error().Err(err).Msg("end of day failed; the next one retries")
			}
		}
	}
}

// autoCut is the last multiple of period at least Lateness behind the clock.
func (g *Group) autoCut(period time.Duration) int64 {
	return g.cfg.Now().Add(-g.cfg.Lateness).Truncate(period).UnixNano()
}

func (g *Group) isReady() bool {
	select {
	case <-g.ready:
		return true
	default:
		return false
	}
}

// catchUp applies every message of the label set that the stream held when it was
// called, so a roll never cuts before a row that was already published. The target is the
// stream's last sequence on the label set's subjects: a consumer's pending count can lag
// a publish that the stream has already acknowledged.
func (g *Group) catchUp(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, g.cfg.CatchUp)
	defer cancel()
	last, err := g.stream.GetLastMsgForSubject(ctx, g.cfg.Subjects.LiveLabelSetPattern(g.key))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("live: catch up: last message of %s: %w", g.key, err)
	}
	for g.lastSeq < last.Sequence {
		select {
		case m := <-g.msgs:
			g.handle(ctx, m)
		case <-ctx.Done():
			return fmt.Errorf("live: catching up with the stream (at %d of %d): %w", g.lastSeq, last.Sequence, ctx.Err())
		}
	}
	return nil
}
