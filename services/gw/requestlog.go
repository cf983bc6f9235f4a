package gw

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sg-project/sg/messages"
	"github.com/sg-project/sg/services/gw/core"
	"github.com/sg-project/sg/services/streams"
)

// Durability configures the request log stream. Choices and consequences are
// in README.md (Deployment, durability and recovery).
type Durability struct {
	// Replicas of the stream: 1 on a single NATS server, 3 on a cluster (an
	// acknowledged entry is then on a majority of servers).
	Replicas int
	// Memory keeps the log in memory: a NATS restart forgets open requests.
	Memory bool
	// MaxAge drops entries older than this whatever their state (default 1 h);
	// request timeouts are capped below it.
	MaxAge time.Duration
}

// The request log (JetStream stream subjects.RequestLogStream), as the core
// drives it (services/gw/core):
//
//   - accept: the entry is written on log.req.<gw>.<request> with "no message
//     on this subject yet" as a condition, while the first drive goes to an
//     RC (no answer is sent before the entry is written);
//   - re-drive: the entry is rewritten with the new drive number, "the last
//     message on this subject is mine" as the condition, before the drive is
//     submitted;
//   - answer: state answered is written under the same condition, then the
//     answer is sent and the subject closed by an empty record with a TTL
//     (purge): only the writer that wins answers, and the stream holds only
//     open requests;
//   - adopt (a peer GW, or this GW's next incarnation): the entry is
//     rewritten in place under the same condition, naming the adopter.
//
// The conditions (expected last sequence per subject) make answering and
// adopting mutually exclusive: whoever writes first wins, the other learns it
// from the rejected write (read back: a write of its own whose
// acknowledgement was lost counts as written) and stays silent.
type requestLog struct {
	js     jetstream.JetStream
	stream jetstream.Stream
	g      *GW

	// poisoned: stream sequences of records skipped as poison, so each is
	// counted and logged once however often sweeps pass over it (touched
	// only by the sweeper goroutine).
	poisoned map[uint64]struct{}
}

// maxPoisonRemembered bounds poisoned; past it, it starts afresh (a record
// may then be counted again, never more than once per this many).
const maxPoisonRemembered = 4096

// poison skips a record that does not decode or is not one this GW may act
// on: counted and logged once by its stream sequence, never retried, never
// fatal. The record stays until the stream's MaxAge (a newer GW version may
// read it).
func (l *requestLog) poison(seq uint64, subject string, err error) {
	if _, seen := l.poisoned[seq]; seen {
		return
	}
	if len(l.poisoned) >= maxPoisonRemembered {
		clear(l.poisoned)
	}
	l.poisoned[seq] = struct{}{}
	l.g.met.poison.Skip(l.g.log, PoisonStreamRequestLog, seq, safeLabel(subject), err)
}

// PoisonStreamRequestLog is the stream label of the request log's poison
// records (sg_stream_poison_records_total{stream="request_log"}).
const PoisonStreamRequestLog = "request_log"

// errLogConflict: the conditional write lost: another GW adopted the entry (or
// answered it).
var errLogConflict = errors.New("request log entry changed by another GW")

// logRef is one open entry as its writer knows it.
type logRef struct {
	subject string
	seq     uint64
	entry   messages.LogEntry
}

func (g *GW) openRequestLog(ctx context.Context) (*requestLog, error) {
	d := g.cfg.RequestLog
	js, err := jetstream.New(g.nc)
	if err != nil {
		return nil, fmt.Errorf("gw: jetstream: %w", err)
	}
	storage := jetstream.FileStorage
	if d.Memory {
		storage = jetstream.MemoryStorage
	}
	cfg := jetstream.StreamConfig{
		Name:              g.s.RequestLogStream(),
		Description:       "sg: every accepted request until it is answered (then closed by a record with a TTL)",
		Subjects:          []string{g.s.RequestLogEntryPattern()},
		MaxMsgsPerSubject: 1,
		Discard:           jetstream.DiscardOld,
		Storage:           storage,
		Replicas:          max(d.Replicas, 1),
		MaxAge:            d.MaxAge,
		AllowDirect:       true,
		AllowMsgTTL:       true, // answered entries are closed by a record with a TTL (purge)
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	st, err := streams.Ensure(ctx, js, cfg)
	if err != nil {
		return nil, fmt.Errorf("gw: request log stream %s: %w", cfg.Name, err)
	}
	return &requestLog{js: js, stream: st, g: g, poisoned: map[uint64]struct{}{}}, nil
}

// logTimeout bounds one request log operation.
const logTimeout = 5 * time.Second

func (l *requestLog) write(subject string, e *messages.LogEntry, expectSeq uint64) (uint64, error) {
	data, err := messages.Encode(e)
	if err != nil {
		return 0, fmt.Errorf("encode log entry: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), logTimeout)
	defer cancel()
	ack, err := l.js.Publish(ctx, subject, data, jetstream.WithExpectLastSequencePerSubject(expectSeq))
	if err != nil {
		var apiErr *jetstream.APIError
		if errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence {
			return 0, errLogConflict
		}
		return 0, fmt.Errorf("request log write %s: %w", subject, err)
	}
	return ack.Sequence, nil
}

// closeTTL is how long a closed entry's last record stays: the least
// per-message TTL JetStream takes.
const closeTTL = time.Second

// purge removes an answered entry: a last, empty record on its subject,
// conditional on the `answered` record at seq being the last (otherwise the
// subject is no longer this GW's to close), with a per-message TTL. The
// server drops it with its TTL sweep: a purge by subject cost the server
// ~240 µs of CPU per request on file storage, next to ~40 µs for this write
// (measured on this project's 2-core machine), on the path of the next
// request. A stream without per-message TTLs (made by an older sg that
// could not update it) is purged as before.
func (l *requestLog) purge(subject string, seq uint64) {
	ctx, cancel := context.WithTimeout(context.Background(), logTimeout)
	defer cancel()
	_, err := l.js.Publish(ctx, subject, nil, jetstream.WithExpectLastSequencePerSubject(seq), jetstream.WithMsgTTL(closeTTL))
	var apiErr *jetstream.APIError
	switch {
	case err == nil:
		return
	case errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence:
		return // written over since: whoever wrote it closes it
	case errors.As(err, &apiErr) && apiErr.ErrorCode == jsErrCodeMessageTTLDisabled:
		err = l.stream.Purge(ctx, jetstream.WithPurgeSubject(subject))
	}
	if err != nil {
		l.g.met.logErrors.WithLabelValues("purge").Inc()
		l.g.log.Warn().Err(err).Str("subject", subject).Msg("request log purge failed; the entry expires with the stream's MaxAge")
	}
}

// jsErrCodeMessageTTLDisabled: the stream does not take per-message TTLs
// (nats-server's JSMessageTTLDisabledErr).
const jsErrCodeMessageTTLDisabled jetstream.ErrorCode = 10166

// closed reports a record that only closes its entry (see purge): skipped by
// sweeps, neither open nor poison.
func closed(data []byte) bool { return len(data) == 0 }

// scan reads the open entries under filter (one GW's, or all), bounded by
// ctx: a stopping GW does not wait for a sweep.
func (l *requestLog) scan(ctx context.Context, filter string, fn func(ref logRef)) error {
	err := streams.Scan(ctx, l.js, l.g.s.RequestLogStream(), streams.Options{Filter: filter}, func(r streams.Record) error {
		if closed(r.Data) {
			return nil
		}
		e, err := messages.DecodeValid[messages.LogEntry](r.Data)
		if err == nil {
			err = l.g.checkAdoptable(&e)
		}
		if err != nil {
			l.poison(r.Seq, r.Subject, err)
			return nil
		}
		fn(logRef{subject: r.Subject, seq: r.Seq, entry: e})
		return nil
	})
	if err != nil {
		return fmt.Errorf("request log: %w", err)
	}
	return nil
}

// logWorkers write the request log beside the loop: JetStream
// acknowledgements take a round trip each, and requests must not wait for
// each other's.
const logWorkers = 8

// logRetry: after a failed log write, the core writes again this much later.
const logRetry = time.Second

// logJob is a write (with its condition) or a purge, for a worker.
type logJob struct {
	write    core.WriteLog
	purge    string
	purgeSeq uint64
}

// worker carries out log jobs and hands each result to the loop.
func (l *requestLog) worker(ctx context.Context, jobs <-chan logJob) {
	for {
		var j logJob
		select {
		case <-ctx.Done():
			return
		case j = <-jobs:
		}
		in := input{jobDone: true}
		if j.purge != "" {
			l.purge(j.purge, j.purgeSeq)
		} else {
			in.ev = l.do(j.write)
		}
		l.g.input(in)
	}
}

// do writes one entry under its condition. On a conflict it reads the
// subject back: a write of ours whose acknowledgement was lost shows there.
func (l *requestLog) do(w core.WriteLog) core.Event {
	seq, err := l.write(w.Subject, &w.Entry, w.ExpectSeq)
	switch {
	case err == nil:
		return core.LogWritten{At: now(), ID: w.ID, Seq: seq}
	case errors.Is(err, errLogConflict):
		cur, seq, rerr := l.last(w.Subject)
		if rerr != nil {
			l.g.met.logErrors.WithLabelValues("read").Inc()
			return core.LogFailed{At: now(), ID: w.ID, Err: fmt.Errorf("%w; reading it back: %w", err, rerr)}
		}
		return core.LogConflict{At: now(), ID: w.ID, Current: cur, Seq: seq}
	default:
		l.g.met.logErrors.WithLabelValues(w.Op).Inc()
		l.g.log.Warn().Err(err).Str("request_id", w.ID).Str("op", w.Op).Msg("request log write failed")
		return core.LogFailed{At: now(), ID: w.ID, Err: err}
	}
}

// last reads the entry a subject holds now (nil: none).
func (l *requestLog) last(subject string) (*messages.LogEntry, uint64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), logTimeout)
	defer cancel()
	m, err := l.stream.GetLastMsgForSubject(ctx, subject)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, fmt.Errorf("request log read %s: %w", subject, err)
	}
	e, err := messages.DecodeValid[messages.LogEntry](m.Data)
	if err != nil {
		// Not ours, whatever it is.
		return nil, m.Sequence, nil
	}
	return &e, m.Sequence, nil
}
