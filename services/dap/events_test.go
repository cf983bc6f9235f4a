package dap

import (
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/sg-project/sg/messages"
	"github.com/sg-project/sg/subjects"
)

func announce(t *testing.T, rcID string, startedAt int64) []byte {
	t.Helper()
	b, err := messages.Encode(&messages.RCAnnouncement{V: messages.RCVersion, RCID: rcID, StartedAt: startedAt})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestRegistersAtStartAndOnNewRC(t *testing.T) {
	nc := startNATS(t, 0)
	cfg := testConfig(nc, EngineSource{})
	cfg.Assembly, cfg.Addr = "emea", "host-1:5000"
	reg := subscribe(t, nc, cfg.Subjects.DAPRegister(cfg.ID))
	runDAP(t, cfg)

	got := nextAs[messages.DAPRegistration](t, reg)
	if got.DAPID != cfg.ID || got.RCID != "rc1" || got.Assembly != "emea" || got.Addr != "host-1:5000" ||
		got.Labels.Key() != "region=eu" || got.Tier != messages.TierHDB || got.Purview != messages.Unbounded ||
		len(got.Tables) != 1 || got.PurviewVersion != 1 || got.ReferenceVintage != 1 || !got.Available || got.Concurrency != 2 {
		t.Fatalf("registration %+v", got)
	}
	// An RC started after the DAP announces itself: the DAP registers again.
	if err := nc.Publish(cfg.Subjects.RCAnnounce("rc-late"), announce(t, "rc-late", 1)); err != nil {
		t.Fatal(err)
	}
	if again := nextAs[messages.DAPRegistration](t, reg); again.DAPID != cfg.ID {
		t.Fatalf("re-registration %+v", again)
	}
}

// The dedupe of announcements, driven synchronously so that the order of the DAP's own
// events proves the absence of a registration: a status published after a call comes
// after anything that call published.
func TestRegistersOncePerRCStart(t *testing.T) {
	nc := startNATS(t, 0)
	cfg := testConfig(nc, EngineSource{})
	d, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	events := subscribe(t, nc, cfg.Subjects.DAPEventsPattern())
	kind := func() string {
		_, ev, _ := cfg.Subjects.ParseDAPEvent(next(t, events).Subject)
		return ev
	}
	steps := []struct {
		rc      string
		started int64
		want    string
	}{
		{"rc1", 10, subjects.EventRegister}, // new
		{"rc1", 10, subjects.EventStatus},   // seen: nothing but the marker
		{"rc1", 9, subjects.EventStatus},    // older start: a stale announcement
		{"rc1", 11, subjects.EventRegister}, // restarted
		{"rc2", 1, subjects.EventRegister},  // another RC
	}
	for i, s := range steps {
		d.onAnnounce(&nats.Msg{Subject: cfg.Subjects.RCAnnounce(s.rc), Data: announce(t, s.rc, s.started)})
		d.SetAvailable(true, "") // the marker
		if got := kind(); got != s.want {
			t.Fatalf("step %d (%s started %d): event %s, want %s", i, s.rc, s.started, got, s.want)
		}
		if s.want == subjects.EventRegister {
			if got := kind(); got != subjects.EventStatus {
				t.Fatalf("step %d: then %s, want the marker", i, got)
			}
		}
	}
	// A malformed announcement is ignored.
	d.onAnnounce(&nats.Msg{Subject: cfg.Subjects.RCAnnounce("x"), Data: []byte{0xc1, 0xff}})
	d.SetAvailable(true, "")
	if got := kind(); got != subjects.EventStatus {
		t.Fatalf("after a malformed announcement: %s", got)
	}
}

func TestSettersPublishEvents(t *testing.T) {
	nc := startNATS(t, 0)
	cfg := testConfig(nc, EngineSource{})
	d := started(t, cfg)
	status := subscribe(t, nc, cfg.Subjects.DAPStatus(cfg.ID))
	vintage := subscribe(t, nc, cfg.Subjects.DAPVintage(cfg.ID))

	d.SetAvailable(false, "replaying log")
	if st := nextAs[messages.DAPStatusUpdate](t, status); st.Available || st.Reason != "replaying log" || st.PurviewVersion != 1 {
		t.Fatalf("status %+v", st)
	}
	rng := messages.TimeRange{Start: 100, End: 200}
	d.SetPurview(rng, 7)
	if st := nextAs[messages.DAPStatusUpdate](t, status); st.Purview != rng || st.PurviewVersion != 7 || st.Available {
		t.Fatalf("status %+v", st)
	}
	d.SetAvailable(true, "ignored when available")
	if st := nextAs[messages.DAPStatusUpdate](t, status); !st.Available || st.Reason != "" {
		t.Fatalf("status %+v", st)
	}
	d.SetVintage(42)
	if v := nextAs[messages.DAPVintageUpdate](t, vintage); v.ReferenceVintage != 42 || v.DAPID != cfg.ID {
		t.Fatalf("vintage %+v", v)
	}
	// The heartbeat and a new registration carry the new values.
	reg := subscribe(t, nc, cfg.Subjects.DAPRegister(cfg.ID))
	d.publishRegistration()
	if r := nextAs[messages.DAPRegistration](t, reg); r.PurviewVersion != 7 || r.ReferenceVintage != 42 || r.Purview != rng {
		t.Fatalf("registration %+v", r)
	}
}

func TestHeartbeatAndShutdown(t *testing.T) {
	nc := startNATS(t, 0)
	cfg := testConfig(nc, EngineSource{})
	cfg.Heartbeat = 20 * time.Millisecond
	hb := subscribe(t, nc, cfg.Subjects.DAPHeartbeat(cfg.ID))
	lost := subscribe(t, nc, cfg.Subjects.DAPLost(cfg.ID))
	events := subscribe(t, nc, cfg.Subjects.DAPEventsPattern())
	d, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := contextWithCancel()
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	for want := uint64(1); want <= 2; want++ {
		if h := nextAs[messages.DAPHeartbeat](t, hb); h.Seq != want || h.IntervalMS != 20 || h.PurviewVersion != 1 {
			t.Fatalf("heartbeat %+v", h)
		}
	}
	cancel()
	if l := nextAs[messages.DAPLost](t, lost); l.Reason != "shutdown" || l.DAPID != cfg.ID {
		t.Fatalf("lost %+v", l)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(wait):
		t.Fatal("Run did not return")
	}
	if err := d.Run(ctx); err == nil || !strings.Contains(err.Error(), "twice") {
		t.Fatalf("second Run: %v", err)
	}

	// After the loss notice the DAP publishes no fleet event: an RC would
	// take a registration or heartbeat as the DAP back. An announcement of a
	// new RC that races the shutdown, and setters, change nothing on the
	// bus. Driven synchronously on the DAP's own connection, then a marker:
	// anything those calls published comes before it.
	d.onAnnounce(&nats.Msg{Subject: cfg.Subjects.RCAnnounce("rc-new"), Data: announce(t, "rc-new", 1)})
	d.SetAvailable(false, "late")
	d.SetVintage(7)
	marker := cfg.Subjects.DAPRegister("marker")
	if err := nc.Publish(marker, nil); err != nil {
		t.Fatal(err)
	}
	for {
		m := next(t, events)
		if m.Subject == cfg.Subjects.DAPLost(cfg.ID) {
			break
		}
	}
	if m := next(t, events); m.Subject != marker {
		t.Fatalf("after the loss notice the DAP published on %s", m.Subject)
	}
}

func TestNewValidates(t *testing.T) {
	nc := startNATS(t, 0)
	good := testConfig(nc, EngineSource{})
	for name, mutate := range map[string]func(*Config){
		"id":          func(c *Config) { c.ID = "a.b" },
		"nc":          func(c *Config) { c.NC = nil },
		"source":      func(c *Config) { c.Source = nil },
		"tier":        func(c *Config) { c.Tier = "xdb" },
		"purview":     func(c *Config) { c.Purview = messages.TimeRange{Start: 5, End: 5} },
		"concurrency": func(c *Config) { c.Concurrency = -1 },
		"table kind":  func(c *Config) { c.Tables = []messages.TableInfo{{Name: "t", Kind: "odd"}} },
		"heartbeat":   func(c *Config) { c.Heartbeat = messages.MaxHeartbeat + time.Millisecond }, // RCs would refuse its heartbeats
	} {
		c := good
		mutate(&c)
		if _, err := New(c); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if _, err := New(good); err != nil {
		t.Fatal(err)
	}
}
