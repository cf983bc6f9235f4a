package dap

import (
	"context"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/sg-project/sg/messages"
)

// maxSeenRCs bounds the memory of announced RCs; past it the map starts again, which
// at worst re-registers once more with every RC.
const maxSeenRCs = 4096

// publish encodes v and publishes it on subject with headers h (may be nil). A failure
// is logged: events are repeated (heartbeats carry the versions), so none is fatal.
func (d *DAP) publish(subject string, v any, h nats.Header) error {
	err := messages.WithEncoded(v, func(data []byte) error {
		return d.cfg.NC.PublishMsg(&nats.Msg{Subject: subject, Header: h, Data: data})
	})
	if err != nil {
		d.log.Error().Err(err).Str("subject", subject).Msg("publish")
	}
	return err
}

// publishRegistration sends the configured registration with the current state. Like
// the updates, it is published under the lock, so an RC never sees a registration
// older than an update that followed it.
func (d *DAP) publishRegistration() {
	d.mu.Lock()
	defer d.mu.Unlock()
	reg := d.registrationLocked()
	d.eventLocked(d.cfg.Subjects.DAPRegister(d.cfg.ID), &reg)
}

// eventLocked publishes a fleet event (registration, status, vintage,
// heartbeat); d.mu must be held, so RCs see events in the order made. Once
// the loss notice is out nothing more is published: an RC takes a later
// registration or heartbeat as the DAP back and dispatches to a DAP that is
// gone. A registration sent for an RC announcement that raced the shutdown
// did that, and the request timed out "executing" on the stopped DAP.
func (d *DAP) eventLocked(subject string, v any) {
	if d.state.stopped {
		return
	}
	_ = d.publish(subject, v, nil)
}

// registrationLocked is the registration with the current state; d.mu must
// be held.
func (d *DAP) registrationLocked() messages.DAPRegistration {
	reg := registration(d.cfg, d.state.available)
	reg.Purview, reg.PurviewVersion, reg.ReferenceVintage = d.state.purview, d.state.pv, d.state.rv
	if ss, ok := d.cfg.Source.(SchemaSource); ok {
		tables := make([]messages.TableInfo, len(reg.Tables))
		for i, t := range reg.Tables {
			if len(t.Columns) == 0 {
				t.Columns, _ = ss.Schema(t.Name)
			}
			tables[i] = t
		}
		reg.Tables = tables
	}
	return reg
}

// onAnnounce re-registers with an RC it has not seen, or that restarted (newer
// StartedAt): an RC started after the DAP, or one that lost its state, learns of it.
func (d *DAP) onAnnounce(m *nats.Msg) {
	a, err := messages.DecodeValid[messages.RCAnnouncement](m.Data)
	if err != nil {
		d.lim.Warn(&d.log, "bad_rc_announcement").Err(err).Str("subject", m.Subject).Msg("bad RC announcement")
		return
	}
	d.mu.Lock()
	last, ok := d.seen[a.RCID]
	fresh := !ok || a.StartedAt > last
	if fresh {
		if !ok && len(d.seen) >= maxSeenRCs {
			clear(d.seen)
		}
		d.seen[a.RCID] = a.StartedAt
	}
	d.mu.Unlock()
	if fresh {
		d.log.Debug().Str("rc", a.RCID).Msg("new RC announced: registering again")
		d.publishRegistration()
	}
}

// heartbeats sends a heartbeat every Heartbeat until ctx ends; the versions in it let an
// RC that missed an update notice.
func (d *DAP) heartbeats(ctx context.Context) {
	t := time.NewTicker(d.cfg.Heartbeat)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		d.mu.Lock()
		if d.state.stopped { // the loss notice is out: no more heartbeats
			d.mu.Unlock()
			return
		}
		d.state.hbSeq++
		hb := messages.DAPHeartbeat{V: messages.DAPVersion, DAPID: d.cfg.ID, Seq: d.state.hbSeq,
			SentAt: time.Now().UnixNano(), Running: d.state.running, PurviewVersion: d.state.pv,
			ReferenceVintage: d.state.rv, IntervalMS: d.cfg.Heartbeat.Milliseconds()}
		reg := d.registrationLocked()
		hb.Registration = &reg
		d.eventLocked(d.cfg.Subjects.DAPHeartbeat(d.cfg.ID), &hb)
		d.mu.Unlock()
	}
}

// statusLocked is the status update of the current state; d.mu must be held.
func (d *DAP) statusLocked() messages.DAPStatusUpdate {
	return messages.DAPStatusUpdate{V: messages.DAPVersion, DAPID: d.cfg.ID, Available: d.state.available,
		Reason: d.state.reason, Purview: d.state.purview, PurviewVersion: d.state.pv, Running: d.state.running}
}

// SetAvailable marks the DAP available or not (e.g. busy replaying its log) and tells
// the RCs. An unavailable DAP answers RETRY to the portions it still receives, so the
// RC places them elsewhere.
func (d *DAP) SetAvailable(ok bool, reason string) {
	if ok {
		reason = ""
	}
	d.mu.Lock()
	defer d.mu.Unlock() // publish under the lock: RCs see the updates in the order made
	d.state.available, d.state.reason = ok, reason
	st := d.statusLocked()
	d.eventLocked(d.cfg.Subjects.DAPStatus(d.cfg.ID), &st)
}

// SetPurview changes the temporal purview and its version (seed: "after each
// end-of-interval or end-of-day event, the DAP sends an increment value") and tells the
// RCs. An empty range is refused (logged), as the RC could not place anything on it.
func (d *DAP) SetPurview(rng messages.TimeRange, purviewVersion uint64) {
	if !rng.Valid() {
		d.log.Error().Stringer("purview", rng).Msg("SetPurview: empty purview refused")
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.state.purview, d.state.pv = rng, purviewVersion
	st := d.statusLocked()
	d.eventLocked(d.cfg.Subjects.DAPStatus(d.cfg.ID), &st)
}

// SetVintage changes the reference vintage (seed: "on each reference data update, the
// DAP sends its latest stream position") and tells the RCs.
func (d *DAP) SetVintage(v uint64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.state.rv = v
	u := messages.DAPVintageUpdate{V: messages.DAPVersion, DAPID: d.cfg.ID, ReferenceVintage: v}
	d.eventLocked(d.cfg.Subjects.DAPVintage(d.cfg.ID), &u)
}

func (d *DAP) publishLost(reason string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.state.stopped = true
	l := messages.DAPLost{V: messages.DAPVersion, DAPID: d.cfg.ID, Reason: reason, DetectedBy: d.cfg.ID, At: time.Now().UnixNano()}
	_ = d.publish(d.cfg.Subjects.DAPLost(d.cfg.ID), &l, nil)
}

// Change is one atomic change of what a DAP serves: any of availability, purview,
// purview version, reference vintage and source. Nil fields are left as they are.
type Change struct {
	Available *bool
	Reason    string // why unavailable (with Available false)
	Purview   *messages.TimeRange
	// BumpPurviewVersion adds one to the purview version (seed: "after each
	// end-of-interval or end-of-day event, the DAP sends an increment value"), so that
	// every portion dispatched against the old purview is answered RETRY.
	BumpPurviewVersion bool
	Vintage            *uint64
	Source             Source
}

// Apply makes a change atomically: a portion admitted before it runs entirely on the old
// source with the old versions, one admitted after entirely on the new. The status event
// (availability, purview, version) and then the vintage event are published under the
// lock, so RCs see changes in the order they were made. It returns the DAP's state after.
func (d *DAP) Apply(c Change) State {
	d.mu.Lock()
	defer d.mu.Unlock()
	status := false
	if c.Available != nil && (*c.Available != d.state.available || (!*c.Available && c.Reason != d.state.reason)) {
		d.state.available, d.state.reason = *c.Available, c.Reason
		if *c.Available {
			d.state.reason = ""
		}
		status = true
	}
	if c.Purview != nil && *c.Purview != d.state.purview {
		if c.Purview.Valid() {
			d.state.purview = *c.Purview
			status = true
		} else {
			d.log.Error().Stringer("purview", *c.Purview).Msg("Apply: empty purview refused")
		}
	}
	if c.BumpPurviewVersion {
		d.state.pv++
		status = true
	}
	if c.Source != nil {
		d.state.source = c.Source
	}
	if status {
		st := d.statusLocked()
		d.eventLocked(d.cfg.Subjects.DAPStatus(d.cfg.ID), &st)
	}
	if c.Vintage != nil && *c.Vintage != d.state.rv {
		d.state.rv = *c.Vintage
		u := messages.DAPVintageUpdate{V: messages.DAPVersion, DAPID: d.cfg.ID, ReferenceVintage: d.state.rv}
		d.eventLocked(d.cfg.Subjects.DAPVintage(d.cfg.ID), &u)
	}
	return d.stateLocked()
}

// State is what a DAP currently advertises.
type State struct {
	Available        bool
	Reason           string
	Purview          messages.TimeRange
	PurviewVersion   uint64
	ReferenceVintage uint64
}

// State returns what the DAP currently advertises.
func (d *DAP) State() State {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.stateLocked()
}

func (d *DAP) stateLocked() State {
	return State{Available: d.state.available, Reason: d.state.reason, Purview: d.state.purview,
		PurviewVersion: d.state.pv, ReferenceVintage: d.state.rv}
}
