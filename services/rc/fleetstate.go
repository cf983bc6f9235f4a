package rc

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sg-project/sg/messages"
	"github.com/sg-project/sg/services/poison"
	"github.com/sg-project/sg/services/streams"
	"github.com/sg-project/sg/subjects"
)

// Durability configures the JetStream streams a service creates. Choices and
// their consequences are in README.md (Deployment, durability and recovery).
type Durability struct {
	// Replicas of each stream: 1 on a single NATS server, 3 on a cluster
	// (an acknowledged write is then on a majority of servers).
	Replicas int
	// Memory keeps the streams in memory instead of files: faster, but a
	// NATS restart empties them.
	Memory bool
}

func (d Durability) storage() jetstream.StorageType {
	if d.Memory {
		return jetstream.MemoryStorage
	}
	return jetstream.FileStorage
}

// ensureDAPStateStream creates (or updates) the stream that keeps, per DAP
// event subject, the last event: the fleet's state without a writer of its
// own (the DAPs' ordinary events are captured).
func (r *RC) ensureDAPStateStream(ctx context.Context, js jetstream.JetStream) (jetstream.Stream, error) {
	d := r.cfg.JetStream
	cfg := jetstream.StreamConfig{
		Name:              r.cfg.Subjects.DAPStateStream(),
		Description:       "sg: the last event of each kind per DAP (registration, status, vintage, heartbeat, loss)",
		Subjects:          r.cfg.Subjects.DAPEventStreamSubjects(),
		MaxMsgsPerSubject: 1,
		Discard:           jetstream.DiscardOld,
		Storage:           d.storage(),
		Replicas:          max(d.Replicas, 1),
		// A DAP gone for a day is forgotten even without a loss notice.
		MaxAge:      24 * time.Hour,
		AllowDirect: true,
	}
	s, err := streams.Ensure(ctx, js, cfg)
	if err != nil {
		return nil, fmt.Errorf("rc %s: DAP state stream %s: %w", r.cfg.ID, cfg.Name, err)
	}
	return s, nil
}

// recoverFleet replays the DAP state stream, oldest first, through the same
// code as live events (with the time each was stored), then drops the DAPs
// whose last heartbeat is too old. It returns the DAPs known afterwards.
//
// A replay that does not finish within RecoverTimeout (a stream flooded with
// records) is cut short, not fatal: the RC comes up with the DAPs read so
// far, and the others register again when it announces itself.
func (r *RC) recoverFleet(ctx context.Context) (int, error) {
	js, err := jetstream.New(r.cfg.NC)
	if err != nil {
		return 0, fmt.Errorf("rc %s: jetstream: %w", r.cfg.ID, err)
	}
	if _, err := r.ensureDAPStateStream(ctx, js); err != nil {
		return 0, err
	}
	rctx, cancel := context.WithTimeout(ctx, r.cfg.RecoverTimeout)
	err = r.replay(rctx, js)
	cancel()
	switch {
	case ctx.Err() != nil:
		return 0, ctx.Err()
	case errors.Is(err, context.DeadlineExceeded):
		r.log.Warn().Dur("recover_timeout", r.cfg.RecoverTimeout).Int("daps", len(r.daps)).
			Msg("DAP state replay cut short; starting with the DAPs read so far")
	case err != nil:
		return 0, err
	}
	r.checkHeartbeats()
	return len(r.daps), nil
}

func (r *RC) replay(ctx context.Context, js jetstream.JetStream) error {
	s := r.cfg.Subjects
	stream := s.DAPStateStream()
	var reg prometheus.Registerer
	if r.cfg.Registry != nil {
		reg = r.cfg.Registry
	}
	poisoned, err := poison.NewCounter(reg)
	if err != nil {
		return fmt.Errorf("rc %s: %w", r.cfg.ID, err)
	}
	err = streams.Scan(ctx, js, stream, streams.Options{LastPerSubject: true}, func(m streams.Record) error {
		// A poison record is skipped, counted and logged here, once per
		// replay: the consumer acks nothing, so nothing is redelivered.
		if dapID, event, err := checkDAPRecord(s, m.Subject, m.Data); err != nil {
			poisoned.Skip(r.log, stream, m.Seq, m.Subject, err)
		} else {
			r.dapEvent(dapID, event, m.Data, m.Time)
		}
		return nil
	})
	if err != nil && ctx.Err() == nil {
		return fmt.Errorf("rc %s: DAP state replay: %w", r.cfg.ID, err)
	}
	return err
}

// checkDAPRecord decodes and validates one record of the DAP state stream
// as the event its subject names, for a DAP of that id; an error makes it a
// poison record. The live path (dapEvent) decodes it again: a replay reads
// each DAP's last few events once, at start.
func checkDAPRecord(s subjects.Subjects, subject string, data []byte) (dapID, event string, err error) {
	dapID, event, ok := s.ParseDAPEvent(subject)
	if !ok {
		return "", "", fmt.Errorf("%w: subject %q is not a DAP event", messages.ErrInvalid, subject)
	}
	var id string
	switch event {
	case subjects.EventRegister:
		var m messages.DAPRegistration
		if m, err = messages.DecodeValid[messages.DAPRegistration](data); err == nil {
			id = m.DAPID
		}
	case subjects.EventStatus:
		var m messages.DAPStatusUpdate
		if m, err = messages.DecodeValid[messages.DAPStatusUpdate](data); err == nil {
			id = m.DAPID
		}
	case subjects.EventVintage:
		var m messages.DAPVintageUpdate
		if m, err = messages.DecodeValid[messages.DAPVintageUpdate](data); err == nil {
			id = m.DAPID
		}
	case subjects.EventHeartbeat:
		var m messages.DAPHeartbeat
		if m, err = messages.DecodeValid[messages.DAPHeartbeat](data); err == nil {
			id = m.DAPID
		}
	case subjects.EventLost:
		var m messages.DAPLost
		if m, err = messages.DecodeValid[messages.DAPLost](data); err == nil {
			id = m.DAPID
		}
	default:
		return "", "", fmt.Errorf("%w: unknown DAP event %q", messages.ErrInvalid, event)
	}
	if err != nil {
		return "", "", err
	}
	if id != dapID {
		return "", "", fmt.Errorf("%w: %s event of DAP %q on the subject of DAP %q", messages.ErrInvalid, event, id, dapID)
	}
	return dapID, event, nil
}
