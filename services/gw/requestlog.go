package gw

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sg-project/sg/messages"
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

// The request log (JetStream stream subjects.RequestLogStream):
//
//   - accept: the entry is written on log.req.<gw>.<request> with "no message
//     on this subject yet" as a condition, before the request goes to an RC;
//   - answer: state answered is written with "the last message on this
//     subject is mine" as the condition, then the subject is purged: only the
//     writer that wins answers, and the stream holds only open requests;
//   - adopt (a peer GW, or this GW's next incarnation): state adopted is
//     written on the old subject with the same condition, the entry is
//     written again under the adopter, and the old subject is purged.
//
// The conditions (expected last sequence per subject) make answering and
// adopting mutually exclusive: whoever writes first wins, the other learns it
// from the rejected write and stays silent.
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
	l.g.met.poison.WithLabelValues(PoisonStreamRequestLog).Inc()
	l.g.log.Warn().Err(err).Uint64("stream_seq", seq).Str("subject", safeLabel(subject)).
		Msg("skipping a request log record that does not decode or is invalid")
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
		Description:       "sg: every accepted request until it is answered (purged on answer)",
		Subjects:          []string{g.s.RequestLogEntryPattern()},
		MaxMsgsPerSubject: 1,
		Discard:           jetstream.DiscardOld,
		Storage:           storage,
		Replicas:          max(d.Replicas, 1),
		MaxAge:            d.MaxAge,
		AllowDirect:       true,
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	st, err := js.CreateOrUpdateStream(ctx, cfg)
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

// create logs a newly accepted request.
func (l *requestLog) create(e messages.LogEntry) (*logRef, error) {
	subject := l.g.s.RequestLogEntry(l.g.cfg.ID, e.RequestID)
	seq, err := l.write(subject, &e, 0)
	if err != nil {
		return nil, err
	}
	return &logRef{subject: subject, seq: seq, entry: e}, nil
}

// update rewrites an open entry (a new drive) under the same condition.
func (l *requestLog) update(ref *logRef) error {
	seq, err := l.write(ref.subject, &ref.entry, ref.seq)
	if err != nil {
		return err
	}
	ref.seq = seq
	return nil
}

// close marks the entry answered, if it is still ours; the caller answers,
// then purges the subject (the purge is off the answer's path). It returns
// errLogConflict when another GW has taken the request over: the caller must
// not answer then. Any other error is the log's: the caller answers anyway (a
// caller waiting is worse than the small chance of a second answer from an
// adopter).
func (l *requestLog) close(ref *logRef) error {
	e := ref.entry
	e.State, e.By = messages.LogAnswered, l.g.cfg.ID
	_, err := l.write(ref.subject, &e, ref.seq)
	return err
}

func (l *requestLog) purge(subject string) {
	ctx, cancel := context.WithTimeout(context.Background(), logTimeout)
	defer cancel()
	if err := l.stream.Purge(ctx, jetstream.WithPurgeSubject(subject)); err != nil {
		l.g.met.logErrors.WithLabelValues("purge").Inc()
		l.g.log.Warn().Err(err).Str("subject", subject).Msg("request log purge failed; the entry expires with the stream's MaxAge")
	}
}

// scan reads the open entries under filter (one GW's, or all), bounded by ctx.
func (l *requestLog) scan(ctx context.Context, filter string, fn func(ref logRef)) error {
	info, err := l.stream.Info(ctx, jetstream.WithSubjectFilter(filter))
	if err != nil {
		return fmt.Errorf("request log info: %w", err)
	}
	remaining := len(info.State.Subjects)
	if remaining == 0 {
		return nil
	}
	cons, err := l.stream.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{FilterSubjects: []string{filter}})
	if err != nil {
		return fmt.Errorf("request log consumer: %w", err)
	}
	for remaining > 0 {
		batch, err := cons.Fetch(min(remaining, 512), jetstream.FetchMaxWait(time.Second))
		if err != nil {
			return fmt.Errorf("request log fetch: %w", err)
		}
		got, last := 0, false
		for m := range batch.Messages() {
			got++
			md, err := m.Metadata()
			if err != nil {
				continue
			}
			last = md.NumPending == 0
			e, err := messages.DecodeValid[messages.LogEntry](m.Data())
			if err == nil {
				err = l.g.checkAdoptable(&e)
			}
			if err != nil {
				l.poison(md.Sequence.Stream, m.Subject(), err)
				continue
			}
			fn(logRef{subject: m.Subject(), seq: md.Sequence.Stream, entry: e})
		}
		if err := batch.Error(); err != nil && !errors.Is(err, jetstream.ErrNoMessages) {
			return fmt.Errorf("request log fetch: %w", err)
		}
		if last || got == 0 {
			return ctx.Err()
		}
		remaining -= got
	}
	return nil
}

// adopt takes an open entry over: marks the old subject adopted (if it did not
// change since it was read), writes the entry under this GW and purges the
// old subject. errLogConflict: another GW was faster, or the owner answered.
func (l *requestLog) adopt(old logRef) (*logRef, error) {
	mark := old.entry
	mark.State, mark.By = messages.LogAdopted, l.g.cfg.ID
	markSeq, err := l.write(old.subject, &mark, old.seq)
	if err != nil {
		return nil, err
	}
	e := old.entry
	e.GWID, e.GWStarted, e.By = l.g.cfg.ID, l.g.startedAt, ""
	subject := l.g.s.RequestLogEntry(l.g.cfg.ID, e.RequestID)
	if subject == old.subject {
		// This GW's previous incarnation: same subject, after the mark.
		seq, err := l.write(subject, &e, markSeq)
		if err != nil {
			return nil, err
		}
		return &logRef{subject: subject, seq: seq, entry: e}, nil
	}
	seq, err := l.write(subject, &e, 0)
	if err != nil {
		return nil, err
	}
	l.purge(old.subject)
	return &logRef{subject: subject, seq: seq, entry: e}, nil
}
