package gw

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sg-project/sg/messages"
	"github.com/sg-project/sg/services/defaults"
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
	// CreateAfter: how long a request runs before its entry is written
	// (0, the default: with its first drive). Opt-in, a trade of durability
	// for speed: a request answered sooner is answered with no log write at
	// all, and one whose GW dies sooner is never adopted, its caller left to
	// its own timeout (README, durability). The default keeps the design's
	// promise that every accepted request is in the log until answered.
	CreateAfter time.Duration
}

// The request log (JetStream stream subjects.RequestLogStream), as the core
// drives it (services/gw/core):
//
//   - accept: the first drive goes to an RC, and at the same time the entry
//     is written on log.req.<gw>.<request> with "no message on this subject
//     yet" as a condition (no answer is sent before the entry is written);
//     with Durability.CreateAfter set, the write waits that long, and a
//     request answered (or cancelled) sooner is answered with no log write
//     (nothing in the log: no peer can answer it);
//   - re-drive: the entry is rewritten with the new drive number, "the last
//     message on this subject is mine" as the condition, before the drive is
//     submitted;
//   - answer: the `answered` record is written under the same condition,
//     with a per-message TTL (AnsweredTTL), then the answer is sent: only the
//     writer that wins answers, and the record expires by itself (on a stream
//     that takes no TTLs, it is purged after the answer). It is no entry: an
//     empty body (closed to every sweep) and a header naming its writer
//     (messages.HdrLogAnswered), for its read-back;
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
	name   string // the stream's
	// ackPrefix is how an acknowledgement of a write to this stream begins
	// (nats-server's template outside a JetStream domain), before the
	// sequence and '}': decodeAck reads that form without encoding/json.
	ackPrefix []byte

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
		Description:       "sg: every accepted request until it is answered (then kept for a per-message TTL)",
		Subjects:          []string{g.s.RequestLogEntryPattern()},
		MaxMsgsPerSubject: 1,
		Discard:           jetstream.DiscardOld,
		Storage:           storage,
		Replicas:          max(d.Replicas, 1),
		MaxAge:            d.MaxAge,
		AllowDirect:       true,
		AllowMsgTTL:       true, // answered entries expire by a per-message TTL (AnsweredTTL)
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	st, err := streams.Ensure(ctx, js, cfg)
	if err != nil {
		return nil, fmt.Errorf("gw: request log stream %s: %w", cfg.Name, err)
	}
	return g.newRequestLog(js, st), nil
}

func (g *GW) newRequestLog(js jetstream.JetStream, st jetstream.Stream) *requestLog {
	name := g.s.RequestLogStream()
	return &requestLog{js: js, stream: st, g: g, name: name, ackPrefix: fmt.Appendf(nil, "{%q:%q,%q:", "stream", name, "seq"),
		poisoned: map[uint64]struct{}{}}
}

// logTimeout bounds one request log operation.
const logTimeout = 5 * time.Second

// AnsweredTTL is how long the request log keeps an answered entry: it
// expires by itself, with no closing write on the path of the next request.
// It outlives the retry of an `answered` write whose acknowledgement was
// lost: the write times out after logTimeout, is written again logRetry
// later, conflicts with itself (its refusal may take up to logTimeout too)
// and is read back. The read-back must find it and count it as written, or
// the GW would take it for a peer's and leave the request unanswered, as if
// it had died after writing it (README, durability).
const AnsweredTTL = 2*logTimeout + logRetry

// answeredTTL is AnsweredTTL as the Nats-TTL header says it.
var answeredTTL = AnsweredTTL.String()

// jsErrCodeMessageTTLDisabled: the stream does not take per-message TTLs
// (nats-server's JSMessageTTLDisabledErr).
const jsErrCodeMessageTTLDisabled jetstream.ErrorCode = 10166

// closed reports a record that only closes its entry: this GW's `answered`
// record (messages.HdrLogAnswered on an empty body), or an older GW's closing
// record. Skipped by sweeps, neither open nor poison; GWs from before the
// slim `answered` record skip it the same way.
func closed(data []byte) bool { return len(data) == 0 }

// scan reads the open entries under filter (one GW's, or all), bounded by
// ctx: a stopping GW does not wait for a sweep. An entry that does not
// decode, is not on its own subject (checkFiled) or must not be acted on
// (checkAdoptable) is poison: skipped and counted, never fatal.
func (l *requestLog) scan(ctx context.Context, filter string, fn func(ref logRef)) error {
	err := streams.Scan(ctx, l.js, l.g.s.RequestLogStream(), streams.Options{Filter: filter}, func(r streams.Record) error {
		if closed(r.Data) {
			return nil
		}
		e, err := messages.DecodeValid[messages.LogEntry](r.Data)
		if err == nil {
			err = l.checkFiled(r.Subject, &e)
		}
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

// checkFiled refuses an entry that is not on its own subject. An entry stays
// on the subject of the GW that accepted its request (its submission's GW),
// named by its request id, whoever owns it now: a forged or misfiled one
// would have a GW adopt a request under another's subject, whose entry its
// conditional writes and purge would then take.
func (l *requestLog) checkFiled(subject string, e *messages.LogEntry) error {
	if want := l.g.s.RequestLogEntry(e.Submission.GWID, e.RequestID); subject != want {
		return fmt.Errorf("request log entry %s of GW %s is filed under %s, not %s", e.RequestID, e.Submission.GWID, safeLabel(subject), want)
	}
	return nil
}

// logWorkers do what the loop does not: read an entry back after a
// conflict, purge an answered entry of a stream without per-message TTLs. Each takes a round
// trip, and requests must not wait for each other's.
const logWorkers = 8

// logRetry: after a failed log write, the core writes again this much later.
const logRetry = defaults.RequestLogRetry

// logJob is a read back after a conflicting write, or a purge of a subject
// (a stream without per-message TTLs), for a worker.
type logJob struct {
	readBack core.WriteLog
	purge    string
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
			l.purgeSubject(j.purge)
		} else {
			in.ev = l.readBack(j.readBack)
		}
		l.g.input(in)
	}
}

// purgeSubject removes an answered entry from a stream that does not take
// per-message TTLs (made by an older sg that could not update it).
func (l *requestLog) purgeSubject(subject string) {
	ctx, cancel := context.WithTimeout(context.Background(), logTimeout)
	defer cancel()
	if err := l.stream.Purge(ctx, jetstream.WithPurgeSubject(subject)); err != nil {
		l.g.met.logErrors.WithLabelValues("purge").Inc()
		l.g.log.Warn().Err(err).Str("subject", subject).Msg("request log purge failed; the entry expires with the stream's MaxAge")
	}
}

// readBack settles a write that conflicted: a write of ours whose
// acknowledgement was lost shows on its subject.
func (l *requestLog) readBack(w core.WriteLog) core.Event {
	cur, seq, err := l.last(w.Subject, w.ID)
	if err != nil {
		l.g.met.logErrors.WithLabelValues("read").Inc()
		return core.LogFailed{At: now(), ID: w.ID, Err: fmt.Errorf("%w; reading it back: %w", errLogConflict, err)}
	}
	return core.LogConflict{At: now(), ID: w.ID, Current: cur, Seq: seq}
}

// The request log's writes go out from the loop itself: each is published
// with a reply subject of this GW's own (prefix + a token per write), and
// its acknowledgement comes back on a channel the loop reads. A JetStream
// publish is a request-reply: through a worker, the `answered` write before
// each answer cost the critical path the worker's wake-up, the reply's
// handoff to it and its handoff back to the loop.
//
// At most maxLogWrites are under way and the channel holds twice that, so
// only acknowledgements of writes that already timed out (or forged ones)
// can overflow it. A lost acknowledgement is one the core already handles:
// the write times out, fails, is written again and, conflicting with
// itself, is read back as ours.
type logWrites struct {
	l       *requestLog
	prefix  string              // this GW's acknowledgement subjects: prefix + token
	acks    chan *nats.Msg      // the acknowledgements, read by the loop
	pending map[string]*logSend // a pointer: a value this large the map would copy out of line anyway
	order   []string            // tokens in publish order: deadlines ascend (one timeout for all)
	timeout time.Duration
	// tokens counts the writes published: a write's token is its number,
	// under this GW's own random inbox (prefix), so a reply subject names
	// one write, ever. Reusing the subjects of acknowledged writes would
	// save the server's subject caches 2-4 µs of CPU per request
	// (BenchmarkLogWrites), but an acknowledgement that came twice, or late,
	// would then settle another write: an `answered` write taken for
	// written that was not, and a second answer.
	tokens uint64
	// msg, header and headerAnswered (an `answered` write's: its writer,
	// and its TTL unless noTTL) are the message send publishes, made once.
	msg                    nats.Msg
	header, headerAnswered nats.Header
	// answeredBy is the last HdrLogAnswered value sent, answeredFor the
	// writer it names: the same for nearly every write (this GW, its
	// incarnation, drive 0), made once.
	answeredBy  string
	answeredFor answeredWriter
	// noTTL: the stream refused a per-message TTL (made by an older sg and
	// not updated): `answered` goes without one and is closed after the
	// answer (core.Purge) instead.
	noTTL bool
}

// answeredWriter is what an `answered` record names (HdrLogAnswered).
type answeredWriter struct {
	by      string
	started int64
	drive   uint32
}

// maxLogWrites bounds the log writes under way at once (more wait in the
// loop's queue).
const maxLogWrites = 1024

// maxAckBytes bounds an acknowledgement read: JetStream's are ~100 bytes.
const maxAckBytes = 4096

// logSend is a write (with its condition) as the loop publishes it.
type logSend struct {
	write    core.WriteLog
	deadline int64 // set when published
}

func newLogWrites(l *requestLog, prefix string) *logWrites {
	return &logWrites{l: l, prefix: prefix, acks: make(chan *nats.Msg, 2*maxLogWrites),
		pending: map[string]*logSend{}, timeout: logTimeout,
		header: nats.Header{jetstream.ExpectedLastSubjSeqHeader: {""}},
		headerAnswered: nats.Header{jetstream.ExpectedLastSubjSeqHeader: {""}, jetstream.MsgTTLHeader: {answeredTTL},
			messages.HdrLogAnswered: {""}}}
}

// busy is the number of writes under way.
func (w *logWrites) busy() int { return len(w.pending) }

// full reports that no more writes may go out until some are settled.
func (w *logWrites) full() bool { return len(w.pending) >= maxLogWrites }

// send publishes s. A write that cannot be published fails at once (the
// core writes it again).
//
// An `answered` write carries a per-message TTL (AnsweredTTL): the server
// drops the record with its TTL sweep, and no second write closes it (that
// closing write, an older GW's empty record, and its acknowledgement cost the
// server and the loop ~10 µs of CPU between the answer's publish and its
// delivery: the same flush and the same reads carried them, and the
// stream's goroutine ran first). A purge by subject cost the server ~240 µs
// of CPU per request on file storage; it is left for a stream that refuses
// the TTL (noTTL).
func (w *logWrites) send(nc *nats.Conn, s logSend, at int64) core.Event {
	// One message and its headers for every write: PublishMsg copies
	// them out before it returns.
	m := &w.msg
	*m = nats.Msg{Subject: s.write.Subject, Header: w.header}
	answered := s.write.Entry.State == messages.LogAnswered
	if answered {
		m.Header = w.headerAnswered
		e := &s.write.Entry
		if f := (answeredWriter{e.By, e.GWStarted, e.Drive}); w.answeredBy == "" || f != w.answeredFor {
			w.answeredBy, w.answeredFor = string(messages.AppendLogAnswered(nil, e)), f
		}
		m.Header[messages.HdrLogAnswered][0] = w.answeredBy
	}
	m.Header[jetstream.ExpectedLastSubjSeqHeader][0] = strconv.FormatUint(s.write.ExpectSeq, 10)
	w.tokens++
	token := strconv.FormatUint(w.tokens, 36)
	m.Reply = w.prefix + token
	if d := w.l.g.divertAck; d != nil {
		m.Reply = d(s.write, m.Reply)
	}
	published := false
	var err error
	if answered {
		// The slim record: ~450 bytes of entry less for the stream's
		// goroutine to store, on the path of every answer.
		published = true
		err = nc.PublishMsg(m)
	} else {
		err = messages.WithEncoded(&s.write.Entry, func(data []byte) error {
			published = true
			m.Data = data
			return nc.PublishMsg(m)
		})
	}
	switch {
	case err != nil && !published:
		return w.failed(s.write, fmt.Errorf("encode log entry: %w", err))
	case err != nil:
		return w.failed(s.write, fmt.Errorf("request log write %s: %w", s.write.Subject, err))
	}
	s.deadline = at + int64(w.timeout)
	w.pending[token] = &s
	w.order = append(w.order, token)
	return nil
}

// acked settles the write an acknowledgement answers: an event for the
// core, or a read-back for a worker (a conflict), or a write to send again
// (without a TTL, on a stream that refused it), or none (an acknowledgement
// of nothing under way).
func (w *logWrites) acked(m *nats.Msg) (core.Event, *logJob, *logSend) {
	if !strings.HasPrefix(m.Subject, w.prefix) {
		return nil, nil, nil
	}
	token := m.Subject[len(w.prefix):]
	s, ok := w.pending[token]
	if !ok {
		return nil, nil, nil // timed out already, or not ours
	}
	delete(w.pending, token)
	w.trim()
	seq, err := w.l.decodeAck(m)
	var apiErr *jetstream.APIError
	conflict := errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence
	ttlRefused := errors.As(err, &apiErr) && apiErr.ErrorCode == jsErrCodeMessageTTLDisabled
	switch {
	case err == nil:
		return core.LogWritten{At: now(), ID: s.write.ID, Seq: seq}, nil, nil
	case conflict:
		return nil, &logJob{readBack: s.write}, nil
	case ttlRefused:
		// Nothing was written: the same write again, without the TTL (and
		// so every later one), and the entry purged after the answer. A
		// write that went out with the TTL before the first refusal came is
		// refused too, and sent again the same way.
		if !w.noTTL {
			w.noTTL = true
			delete(w.headerAnswered, jetstream.MsgTTLHeader)
			w.l.g.log.Warn().Str("stream", w.l.g.s.RequestLogStream()).
				Msg("the request log stream takes no per-message TTLs: answered entries are purged instead (slower)")
		}
		return nil, nil, &logSend{write: s.write}
	default:
		return w.failed(s.write, fmt.Errorf("request log write %s: %w", s.write.Subject, err)), nil, nil
	}
}

// expires reports that an answered entry needs no purge: its `answered`
// record went out with a TTL.
func (w *logWrites) expires() bool { return !w.noTTL }

// expire fails the writes whose acknowledgement did not come in time.
func (w *logWrites) expire(at int64, fn func(core.Event)) {
	for len(w.order) > 0 {
		s, ok := w.pending[w.order[0]]
		if ok && s.deadline > at {
			return
		}
		if ok {
			delete(w.pending, w.order[0])
			fn(w.failed(s.write, fmt.Errorf("request log write %s: no acknowledgement in %s", s.write.Subject, w.timeout)))
		}
		w.order = w.order[1:]
	}
}

// trim drops the settled writes at the front of order.
func (w *logWrites) trim() {
	for len(w.order) > 0 {
		if _, ok := w.pending[w.order[0]]; ok {
			return
		}
		w.order = w.order[1:]
	}
}

func (w *logWrites) failed(wr core.WriteLog, err error) core.Event {
	w.l.g.met.logErrors.WithLabelValues(wr.Op).Inc()
	w.l.g.log.Warn().Err(err).Str("request_id", wr.ID).Str("op", wr.Op).Msg("request log write failed")
	return core.LogFailed{At: now(), ID: wr.ID, Err: err}
}

// decodeAck reads a JetStream publish acknowledgement: the record's stream
// sequence, or why it was not written (a *jetstream.APIError when the
// server said).
func (l *requestLog) decodeAck(m *nats.Msg) (uint64, error) {
	if len(m.Data) == 0 && m.Header.Get("Status") == "503" {
		return 0, jetstream.ErrNoStreamResponse
	}
	if len(m.Data) > maxAckBytes {
		return 0, fmt.Errorf("%w: %d bytes", jetstream.ErrInvalidJSAck, len(m.Data))
	}
	// Every write's acknowledgement, twice per request: encoding/json cost
	// the loop ~5 µs of CPU each.
	if digits, ok := bytes.CutPrefix(m.Data, l.ackPrefix); ok {
		if digits, ok = bytes.CutSuffix(digits, []byte("}")); ok {
			if seq, err := strconv.ParseUint(string(digits), 10, 64); err == nil && seq > 0 {
				return seq, nil
			}
		}
	}
	var a struct {
		Error  *jetstream.APIError `json:"error"`
		Stream string              `json:"stream"`
		Seq    uint64              `json:"seq"`
	}
	if err := json.Unmarshal(m.Data, &a); err != nil {
		return 0, fmt.Errorf("%w: %w", jetstream.ErrInvalidJSAck, err)
	}
	if a.Error != nil {
		return 0, a.Error
	}
	if a.Stream != l.name || a.Seq == 0 {
		return 0, fmt.Errorf("%w: stream %q, sequence %d", jetstream.ErrInvalidJSAck, a.Stream, a.Seq)
	}
	return a.Seq, nil
}

// last reads the entry a subject, request requestID's, holds now (nil: none,
// or one this GW cannot read or that is not filed under it). An `answered` record reads as the entry it
// stands for (messages.ParseLogAnswered).
func (l *requestLog) last(subject, requestID string) (*messages.LogEntry, uint64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), logTimeout)
	defer cancel()
	m, err := l.stream.GetLastMsgForSubject(ctx, subject)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, fmt.Errorf("request log read %s: %w", subject, err)
	}
	if closed(m.Data) {
		e, err := messages.ParseLogAnswered(requestID, m.Header.Get(messages.HdrLogAnswered))
		if err != nil {
			// An older GW's closing record, or not ours.
			return nil, m.Sequence, nil
		}
		return &e, m.Sequence, nil
	}
	e, err := messages.DecodeValid[messages.LogEntry](m.Data)
	if err != nil {
		// Not ours, whatever it is.
		return nil, m.Sequence, nil
	}
	if err := l.checkFiled(subject, &e); err != nil {
		// Not ours either, whatever it names (this GW files every entry it
		// writes under its own subject): poison here as in a sweep, or a
		// forged copy of this GW's own entry would count as its write.
		// Counted and logged at each read, not remembered in poisoned (the
		// sweeper's alone): a read-back reads once per conflict.
		l.g.met.poison.Skip(l.g.log.With().Str("request_id", requestID).Logger(), PoisonStreamRequestLog, m.Sequence, safeLabel(subject), err)
		return nil, m.Sequence, nil
	}
	return &e, m.Sequence, nil
}
