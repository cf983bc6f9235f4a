// Package httpapi serves sg's APIs over HTTP: a thin adapter in front of the
// GW's NATS endpoints, so that HTTP and NATS callers get the same answers from
// the same code path (admission, limits, exactly one answer, timeouts).
//
//	POST /v1/{api}        the API's arguments as a JSON body (or a whole
//	                      {"header": ..., "payload": ...} envelope); answers the
//	                      JSON envelope {header, payload} with the HTTP status of
//	                      its return code (Status, the README's HTTP table)
//	                      With "Prefer: respond-async": 202, Retry-After and
//	                      Location /v1/jobs/{id} at once (jobs.go); an
//	                      Idempotency-Key header returns the same job again
//	GET  /v1/jobs/{id}    an async job: 202 + Retry-After while it runs, then
//	                      its answer as above; 404 unknown, 410 expired
//	GET  /v1/health       200 when the path GW -> RC -> DAP answers a ping and at
//	                      least one DAP is reached, 503 otherwise
//	GET  /v1/openapi.json the OpenAPI document of the above
//
// Large answers stream to the caller with chunked transfer encoding. getData
// and sql ask for an answer stream (Sg-Accept-Stream, messages/stream.go):
// its frames are written as they come, as the one JSON envelope a whole
// answer would be (messages.JSONStreamWriter).
// Other large answers come from the GW in chunks, in order, and are written
// chunk by chunk as they come (checked by messages.ChunkRelay: the last is
// written only once the whole has its size and checksum). What waits for a
// slow caller is bounded per request (MaxBacklogBytes, below). A transfer that breaks after the status line was written (a
// lost frame or chunk, an error frame, a checksum mismatch, the GW's chunk
// end, messages.IsChunkEnd) aborts the HTTP connection, so the caller sees a
// failed transfer, never a cut document that looks whole; one that breaks
// before is answered with its status. The reason (the status's ai) is logged
// with the request id.
//
// A caller that closes its connection before the answer cancels its request:
// the adapter sends the GW a cancel (subjects.GWCancel) from the same inbox.
//
// The adapter holds one NATS subscription for all its requests (a wildcard
// on its own inbox prefix) and routes answers to waiting handlers by the
// reply subject's last token. The router never waits for a handler: each
// request's messages wait in its own backlog, bounded by MaxBacklogBytes
// (and all of them together by MaxBacklogTotal, past which the answers
// holding the most end), and a caller too slow to read its answer fails its
// own transfer past it (logged with its request id) rather than hold up
// every other answer; one
// that takes nothing for ChunkIdle has its transfer aborted.
package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nuid"
	"github.com/rs/zerolog"

	"github.com/sg-project/sg/messages"
	"github.com/sg-project/sg/services/defaults"
	"github.com/sg-project/sg/subjects"
)

// Defaults of Config.
const (
	DefaultMaxRequestBytes = defaults.MaxRequestBytes               // a request body above it is TOO_LARGE (413)
	DefaultWait            = defaults.Timeout + waitMargin          // for a request that sets no timeout
	DefaultChunkIdle       = defaults.HTTPChunkIdle                 // longest wait between two chunks of one answer
	DefaultHealthTimeout   = 2 * time.Second                        // the health check's ping timeout
	DefaultMaxBacklogBytes = defaults.HTTPMaxBacklogBytes           // one answer's messages received and not yet written to its caller
	DefaultMaxBacklogTotal = defaults.HTTPMaxBacklogTotal           // every answer's, together
	waitMargin             = defaults.TimeoutMargin + 5*time.Second // beyond a request's own timeout: the GW's margin + 5 s
	healthPath             = "/v1/health"                           //
	openAPIPath            = "/v1/openapi.json"                     //
	apiPattern             = "POST /v1/{api}"                       //
	jobsPath               = "/v1/jobs/"                            // GET /v1/jobs/{id}: an async job (jobs.go)
	contentJSON            = "application/json"                     //
	contentProblem         = "application/json"                     // error answers are envelopes too
	hdrRequestID           = "X-Request-Id"                         // the caller's request id, echoed
)

// Config configures the adapter. The zero value of a field means its default.
type Config struct {
	Subjects        subjects.Subjects
	MaxRequestBytes int64         // request body limit (the GW has its own, too)
	MaxAnswerBytes  int64         // answer limit (defaults.MaxAnswerBytes)
	Wait            time.Duration // how long to wait for an answer when the request sets no timeout
	ChunkIdle       time.Duration // how long to wait between two chunks of one answer, and for the caller to take one
	// MaxBacklogBytes bounds what one answer may hold in the adapter while
	// its caller is slower to read than the answer comes: past it that one
	// transfer ends with an error (waiter.push), and no other answer waits.
	MaxBacklogBytes int64
	// MaxBacklogTotal bounds what every answer together may hold: past it,
	// the answers that hold the most end with an error, one by one, until the
	// message that came fits (the slowest callers pay, not the one whose
	// message came last).
	MaxBacklogTotal int64
	HealthTimeout   time.Duration
	// GatewayReady, when set, is the readiness of a GW in the same process
	// (`sg gw`, `sg run`): /v1/health is 503 with its reason at once while
	// it is not ready, rather than after a ping held until the timeout.
	GatewayReady func() (ready bool, reason string)
	Log          zerolog.Logger
}

func (c Config) withDefaults() Config {
	if c.Subjects == (subjects.Subjects{}) {
		c.Subjects = subjects.Default()
	}
	if c.MaxRequestBytes <= 0 {
		c.MaxRequestBytes = DefaultMaxRequestBytes
	}
	if c.MaxAnswerBytes <= 0 {
		c.MaxAnswerBytes = defaults.MaxAnswerBytes
	}
	if c.Wait <= 0 {
		c.Wait = DefaultWait
	}
	if c.ChunkIdle <= 0 {
		c.ChunkIdle = DefaultChunkIdle
	}
	if c.HealthTimeout <= 0 {
		c.HealthTimeout = DefaultHealthTimeout
	}
	if c.MaxBacklogBytes <= 0 {
		c.MaxBacklogBytes = DefaultMaxBacklogBytes
	}
	if c.MaxBacklogTotal <= 0 {
		c.MaxBacklogTotal = DefaultMaxBacklogTotal
	}
	return c
}

// Server is the HTTP adapter. Close it to drop its subscription.
type Server struct {
	nc    *nats.Conn
	cfg   Config
	inbox string // this adapter's inbox prefix; replies are inbox.<n>
	sub   *nats.Subscription
	next  atomic.Uint64

	held    atomic.Int64 // bytes in every waiter's backlog
	mu      sync.Mutex
	waiters map[string]*waiter
}

// New subscribes to the adapter's inbox on nc and returns the adapter.
func New(nc *nats.Conn, cfg Config) (*Server, error) {
	s := &Server{nc: nc, cfg: cfg.withDefaults(), waiters: map[string]*waiter{}}
	s.inbox = nc.NewInbox()
	sub, err := nc.Subscribe(s.inbox+".*", s.route)
	if err != nil {
		return nil, fmt.Errorf("httpapi: subscribe %s.*: %w", s.inbox, err)
	}
	// Answers arrive in bursts of chunks; the router hands them on at once,
	// so the default pending limits are only a backstop.
	s.sub = sub
	if err := nc.Flush(); err != nil {
		_ = sub.Unsubscribe()
		return nil, fmt.Errorf("httpapi: flush: %w", err)
	}
	return s, nil
}

// Close drops the subscription; requests under way end with an error.
func (s *Server) Close() error { return s.sub.Unsubscribe() }

// route hands a message on the inbox to the handler waiting for it; a message
// for nobody (a late chunk, a cancel's answer) is dropped. It never waits:
// it is the one callback for every request's answers, and a caller slow to
// read its answer must cost only its own request (waiter.push).
func (s *Server) route(m *nats.Msg) {
	s.mu.Lock()
	w := s.waiters[m.Subject]
	s.mu.Unlock()
	if w == nil {
		return
	}
	n := backlogSize(m)
	if s.held.Load()+n > s.cfg.MaxBacklogTotal {
		s.shed(n)
	}
	if err := w.push(m, n, s.cfg.MaxBacklogBytes); err != nil {
		s.done(m.Subject) // the rest of its answer is dropped
	}
}

// shed ends the answers that hold the most, one by one, until n more bytes
// fit within MaxBacklogTotal or none holds anything. Only route calls it,
// so no other message is added meanwhile.
func (s *Server) shed(n int64) {
	for s.held.Load()+n > s.cfg.MaxBacklogTotal {
		s.mu.Lock()
		var (
			most  *waiter
			reply string
			size  int64
		)
		for r, w := range s.waiters {
			if b := w.size(); b > size {
				most, reply, size = w, r, b
			}
		}
		if most != nil {
			delete(s.waiters, reply) // the rest of its answer is dropped
		}
		s.mu.Unlock()
		if most == nil {
			return
		}
		// Logged before the handler is woken: what it and its caller see
		// next comes after the line that says why.
		most.log.Error().Int64("bytes", size).Msg("HTTP caller too slow for its answer while the adapter's backlog was full; ending that transfer")
		most.fail(fmt.Errorf("the caller did not read its answer fast enough: its %d bytes waiting were the most when the adapter's answers held more than %d bytes", size, s.cfg.MaxBacklogTotal))
	}
}

func (s *Server) wait(reply string, log zerolog.Logger) *waiter {
	w := &waiter{ready: make(chan struct{}, 1), log: log, held: &s.held}
	s.mu.Lock()
	s.waiters[reply] = w
	s.mu.Unlock()
	return w
}

// done forgets the waiter of reply: what it still held is dropped, and a
// message that comes for it later is not kept.
func (s *Server) done(reply string) {
	s.mu.Lock()
	w := s.waiters[reply]
	delete(s.waiters, reply)
	s.mu.Unlock()
	if w != nil {
		w.fail(errGone)
	}
}

// errGone: the handler of an answer is done with it.
var errGone = errors.New("the answer's handler is gone")

// waiter holds the messages of one request's answer from the router until
// its handler takes them, bounded in bytes.
type waiter struct {
	log   zerolog.Logger // the request's
	ready chan struct{}  // a message or the overflow came since the handler last looked
	held  *atomic.Int64  // every waiter's bytes together (Server.held)
	mu    sync.Mutex
	queue []*nats.Msg
	bytes int64
	err   error // the backlog overflowed: the answer cannot be whole
}

// backlogSize is what m counts in a backlog.
func backlogSize(m *nats.Msg) int64 { return int64(len(m.Data)) + backlogOverhead }

// size is the bytes waiting.
func (w *waiter) size() int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.bytes
}

// fail drops the queue and ends the answer with err (the first error stays).
func (w *waiter) fail(err error) {
	w.mu.Lock()
	if w.err == nil {
		w.err = err
	}
	w.held.Add(-w.bytes)
	w.queue, w.bytes = nil, 0
	w.mu.Unlock()
	select {
	case w.ready <- struct{}{}:
	default:
	}
}

// backlogOverhead is what a message counts beyond its data: its headers and
// bookkeeping, so that many small messages are bounded too.
const backlogOverhead = 512

// push queues m (n bytes, backlogSize) for the handler; an error when the
// backlog would pass limit: the queue is dropped and the handler ends its
// transfer with the error, which push logs (once, before it wakes the
// handler).
func (w *waiter) push(m *nats.Msg, n, limit int64) error {
	w.mu.Lock()
	if err := w.err; err != nil {
		w.mu.Unlock()
		return err // the handler was woken when it was set
	}
	if w.bytes+n > limit && len(w.queue) > 0 {
		w.mu.Unlock()
		err := fmt.Errorf("the caller did not read its answer fast enough: more than %d bytes of it waited", limit)
		// Logged before the handler is woken: what it and its caller see
		// next comes after the line that says why.
		w.log.Error().Err(err).Msg("HTTP caller too slow for its answer; ending that transfer")
		w.fail(err)
		return err
	}
	w.queue = append(w.queue, m)
	w.bytes += n
	w.held.Add(n)
	w.mu.Unlock()
	select {
	case w.ready <- struct{}{}:
	default:
	}
	return nil
}

// next returns the answer's next message: an error when its backlog
// overflowed, when idle fires (nil: never) or when ctx ends first.
func (w *waiter) next(ctx context.Context, idle <-chan time.Time) (*nats.Msg, error) {
	for {
		w.mu.Lock()
		if w.err != nil {
			err := w.err
			w.mu.Unlock()
			return nil, err
		}
		if len(w.queue) > 0 {
			m := w.queue[0]
			w.queue[0] = nil
			w.queue = w.queue[1:]
			n := backlogSize(m)
			w.bytes -= n
			w.held.Add(-n)
			w.mu.Unlock()
			return m, nil
		}
		w.mu.Unlock()
		select {
		case <-w.ready:
		case <-idle:
			return nil, errStalled
		case <-ctx.Done():
			return nil, fmt.Errorf("the answer did not finish: %w", context.Cause(ctx))
		}
	}
}

// errStalled: no message of an answer under way came for ChunkIdle.
var errStalled = errors.New("the answer stalled")

// Handler returns the HTTP routes.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc(apiPattern, s.serveAPI)
	mux.HandleFunc("GET "+healthPath, s.serveHealth)
	mux.HandleFunc("GET "+jobsPath+"{id}", s.serveJob)
	mux.HandleFunc("GET "+openAPIPath, serveOpenAPI)
	return mux
}

// serveAPI runs one API request: body in, envelope out.
func (s *Server) serveAPI(w http.ResponseWriter, r *http.Request) {
	api := r.PathValue("api")
	reqID := r.Header.Get(hdrRequestID)
	if reqID == "" || subjects.Validate("request id", reqID) != nil {
		reqID = nuid.Next()
	}
	log := s.cfg.Log.With().Str("request_id", reqID).Str("api", api).Logger()
	if !slices.Contains(subjects.APIs, api) {
		writeStatus(w, reqID, api, messages.Errorf(messages.CodeUnknownAPI, messages.CodeErr,
			"Unknown API %q: want one of %v", truncate(api, 64), subjects.APIs))
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.cfg.MaxRequestBytes))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			writeStatus(w, reqID, api, messages.Errorf(messages.CodeTooLarge, messages.CodeErr,
				"Request body is larger than the limit of %d bytes", s.cfg.MaxRequestBytes))
			return
		}
		writeStatus(w, reqID, api, messages.Errorf(messages.CodeBadRequest, messages.CodeErr, "Request body could not be read: %v", err))
		return
	}
	env, wait, st := envelope(api, body, r, s.cfg.Wait)
	if st.IsOK() {
		env, st = asyncEnvelope(env, r)
	}
	if !st.IsOK() {
		writeStatus(w, reqID, api, st)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), wait)
	defer cancel()
	s.call(ctx, w, r, log, api, reqID, env, wait)
}

// envelope builds the JSON request envelope from the body: a body with a
// top-level "header" is an envelope already (its header names the API and
// options); anything else is the API's arguments. Query parameters timeout
// (ms) and logCorr set the options of a bare-arguments body.
func envelope(api string, body []byte, r *http.Request, defaultWait time.Duration) ([]byte, time.Duration, messages.Status) {
	body = bytes.TrimSpace(body)
	if len(body) > 0 && !json.Valid(body) {
		return nil, 0, messages.Errorf(messages.CodeBadRequest, messages.CodeErr, "Request body is not valid JSON")
	}
	var probe struct {
		Header *struct {
			API  string        `json:"api"`
			Opts messages.Opts `json:"opts"`
		} `json:"header"`
	}
	if len(body) > 0 && body[0] == '{' && json.Unmarshal(body, &probe) == nil && probe.Header != nil {
		if probe.Header.API != "" && probe.Header.API != api {
			return nil, 0, messages.Errorf(messages.CodeBadRequest, messages.CodeErr,
				"Envelope header api %q does not match the path's %q", truncate(probe.Header.API, 64), api)
		}
		return body, waitFor(probe.Header.Opts.TimeoutMS, defaultWait), messages.Status{}
	}
	opts := messages.Opts{LogCorr: r.URL.Query().Get("logCorr")}
	if t := r.URL.Query().Get("timeout"); t != "" {
		ms, err := strconv.ParseInt(t, 10, 64)
		if err != nil || ms <= 0 {
			return nil, 0, messages.Errorf(messages.CodeBadRequest, messages.CodeErr,
				"Query parameter timeout=%q: want a positive number of milliseconds", truncate(t, 32))
		}
		opts.TimeoutMS = ms
	}
	var payload []byte
	if len(body) > 0 && !bytes.Equal(body, []byte("null")) {
		payload = body
	}
	b, err := messages.Request{Header: messages.RequestHeader{API: api, Opts: opts}, Payload: payload, Content: messages.ContentJSON}.Encode()
	if err != nil {
		return nil, 0, messages.Errorf(messages.CodeBadRequest, messages.CodeErr, "Request could not be encoded: %v", err)
	}
	return b, waitFor(opts.TimeoutMS, defaultWait), messages.Status{}
}

// waitFor bounds the wait for an answer: the request's own timeout plus the
// GW's margin, which is when the GW answers a timeout itself at the latest.
func waitFor(timeoutMS int64, defaultWait time.Duration) time.Duration {
	if timeoutMS <= 0 {
		return defaultWait
	}
	return time.Duration(timeoutMS)*time.Millisecond + waitMargin
}

// call sends env to the GW and streams its answer to w.
func (s *Server) call(ctx context.Context, w http.ResponseWriter, r *http.Request, log zerolog.Logger, api, reqID string, env []byte, wait time.Duration) {
	s.callSubject(ctx, w, r, log, s.cfg.Subjects.GWAPI(api), nil, api, reqID, env, wait)
}

// callSubject is call to any GW subject, with extra headers (a job poll).
func (s *Server) callSubject(ctx context.Context, w http.ResponseWriter, r *http.Request, log zerolog.Logger, subject string, extra nats.Header, api, reqID string, env []byte, wait time.Duration) {
	reply := s.inbox + "." + strconv.FormatUint(s.next.Add(1), 36)
	ch := s.wait(reply, log)
	defer s.done(reply)
	h := nats.Header{}
	for k, v := range extra {
		h[k] = v
	}
	messages.SetString(h, messages.HdrContentType, string(messages.ContentJSON))
	messages.SetString(h, messages.HdrRequestID, reqID)
	messages.SetString(h, messages.HdrAcceptChunks, "1") // the handler streams the chunks
	if api == subjects.APIGetData || api == subjects.APISQL {
		// Rows come window by window (messages/stream.go) and are written as
		// one document (streamFrames): nothing on the way holds them whole.
		messages.SetString(h, messages.HdrAcceptStream, "1")
	}
	if err := s.nc.PublishMsg(&nats.Msg{Subject: subject, Reply: reply, Header: h, Data: env}); err != nil {
		writeStatus(w, reqID, api, messages.Errorf(messages.CodeUnavailable, messages.CodeErr, "The gateway could not be reached: %v", err))
		return
	}
	first, err := ch.next(ctx, nil)
	switch {
	case err == nil:
	case r.Context().Err() != nil:
		// The caller went away: tell the GW, from the same inbox, so it can
		// free what the request holds.
		s.cancel(reqID, log)
		return
	case ctx.Err() != nil:
		writeStatus(w, reqID, api, messages.Errorf(messages.CodeTimeout, messages.CodeErr,
			"No answer from the gateway within %s", wait))
		return
	default:
		writeStatus(w, reqID, api, messages.Errorf(messages.CodeErr, messages.CodeErr, "Answer could not be received: %v", err))
		return
	}
	if messages.IsStreamFrame(first.Header) {
		s.streamFrames(ctx, w, log, reqID, first, ch)
		return
	}
	if !chunked(first.Header) {
		writeAnswer(w, reqID, first.Header, int64(len(first.Data)))
		_, _ = w.Write(first.Data)
		return
	}
	s.stream(ctx, w, log, api, reqID, first, ch)
}

// chunked reports whether h is of a chunked transfer: a chunk, or the end of
// one that broke (messages.IsChunkEnd).
func chunked(h nats.Header) bool {
	return h.Get(messages.HdrChunkIndex) != "" || h.Get(messages.HdrChunkCount) != "" || messages.IsChunkEnd(h)
}

// cancel tells the GW the caller gave up on reqID; its answer is not awaited.
func (s *Server) cancel(reqID string, log zerolog.Logger) {
	h := nats.Header{}
	messages.SetString(h, messages.HdrRequestID, reqID)
	reply := s.inbox + ".c" + strconv.FormatUint(s.next.Add(1), 36)
	if err := s.nc.PublishMsg(&nats.Msg{Subject: s.cfg.Subjects.GWCancel(), Reply: reply, Header: h}); err != nil {
		log.Warn().Err(err).Msg("cancel for a request whose HTTP caller went away could not be sent")
		return
	}
	log.Info().Msg("HTTP caller went away: request cancelled")
}

// stream writes a chunked answer as its chunks come, in order (the GW passes
// them on so), checked by a messages.ChunkRelay: one transfer, the sizes, the
// limit, and the checksum before the last chunk is written. The status line
// goes out with the first chunk the relay passes. A transfer that cannot
// complete (too large, a bad chunk, a stall, a chunk end: messages.IsChunkEnd,
// whose status says why) is answered with its status while nothing was
// written, and aborts the connection once the status line is out.
func (s *Server) stream(ctx context.Context, w http.ResponseWriter, log zerolog.Logger, api, reqID string, first *nats.Msg, ch *waiter) {
	cr := messages.NewChunkRelay(s.cfg.MaxAnswerBytes)
	began := false
	bound := s.boundWrites(w)
	defer bound.lift()
	// fail ends the answer: with st while nothing was written, else by
	// aborting the HTTP connection.
	fail := func(st messages.Status, ev *zerolog.Event, msg string) {
		ev = ev.Int("chunks", cr.Next()).Int("count", cr.Count())
		if !began {
			ev.Msg(msg + "; answering its status")
			writeStatus(w, reqID, api, st)
			return
		}
		ev.Msg(msg + "; aborting the HTTP transfer")
		panic(http.ErrAbortHandler)
	}
	idle := time.NewTimer(s.cfg.ChunkIdle)
	defer idle.Stop()
	for m := first; ; {
		if messages.IsChunkEnd(m.Header) {
			st, _ := messages.ReadStatus(m.Header) // IsChunkEnd read it
			fail(st, log.Error().Stringer("rc", st.RC).Str("ai", st.AI).Str("stream", m.Header.Get(messages.HdrChunkStream)),
				"chunked answer ended broken")
			return
		}
		pass, last, err := cr.Add(m.Header, m.Data)
		if err != nil {
			code := messages.CodeErr
			if errors.Is(err, messages.ErrTooLarge) {
				code = messages.CodeTooLarge
			}
			fail(messages.Errorf(code, messages.CodeErr, "Answer could not be received: %v", err), log.Error().Err(err), "chunked answer broke")
			return
		}
		if pass {
			if !began {
				writeAnswer(w, reqID, m.Header, -1) // no length: chunked transfer encoding
				began = true
			}
			if _, err := bound.Write(m.Data); err != nil {
				fail(messages.Status{}, log.Warn().Err(err), "chunked answer could not be written")
			}
			if err := bound.flush(); err != nil {
				fail(messages.Status{}, log.Warn().Err(err), "chunked answer could not be written")
			}
			if last {
				return
			}
		}
		if m, err = s.await(ctx, ch, idle); err != nil {
			fail(messages.Errorf(messages.CodeTimeout, messages.CodeErr, "Answer not finished after %d of %d chunks: %v", cr.Next(), cr.Count(), err),
				awaitLog(ctx, log).Err(err), "chunked answer not finished")
			return
		}
	}
}

// awaitLog is the level of await's error: a warning when ctx ended (the
// caller went away, say), else an error.
func awaitLog(ctx context.Context, log zerolog.Logger) *zerolog.Event {
	if ctx.Err() != nil {
		return log.Warn()
	}
	return log.Error()
}

// await returns the next message of an answer under way from ch: an error
// when none comes within ChunkIdle (idle is the answer's timer), when its
// backlog overflowed, or when ctx ends first.
func (s *Server) await(ctx context.Context, ch *waiter, idle *time.Timer) (*nats.Msg, error) {
	idle.Reset(s.cfg.ChunkIdle)
	m, err := ch.next(ctx, idle.C)
	if errors.Is(err, errStalled) {
		err = fmt.Errorf("%w: nothing came for %s", err, s.cfg.ChunkIdle)
	}
	return m, err
}

// streamFrames writes an answer stream (messages/stream.go) as the one JSON
// envelope a whole answer would be, frame by frame as they arrive
// (messages.JSONStreamWriter), with chunked transfer encoding: the adapter
// holds one frame at a time, whatever the answer's size. The status line
// goes out with frame 0's first bytes, once the writer has checked it: a
// frame 0 that fails (not an envelope, an error frame) is answered with a
// status. A stream that breaks once the status line is out (a lost frame, an
// error frame, a bad frame, a stall) aborts the HTTP connection, so the
// caller sees a failed transfer, never a cut document that looks whole.
func (s *Server) streamFrames(ctx context.Context, w http.ResponseWriter, log zerolog.Logger, reqID string, first *nats.Msg, ch *waiter) {
	api := first.Header.Get(messages.HdrAPI)
	f, err := messages.ReadStreamFrame(first.Header)
	if err == nil && f.Seq != 0 {
		err = fmt.Errorf("%w: the stream began with frame %d", messages.ErrChunk, f.Seq)
	}
	if err != nil {
		writeStatus(w, reqID, api, messages.Errorf(messages.CodeErr, messages.CodeErr, "Answer stream could not be read: %v", err))
		return
	}
	id := f.ID
	bound := s.boundWrites(w)
	defer bound.lift()
	lw := &headerOnWrite{w: bound, begin: func() { writeAnswer(w, reqID, first.Header, -1) }} // no length: chunked transfer encoding
	out := messages.NewJSONStreamWriter(lw)
	// fail ends the answer: with st while nothing was written, else by
	// aborting the HTTP connection.
	fail := func(st messages.Status, ev *zerolog.Event, msg string) {
		ev = ev.Int("frames", f.Seq).Int64("bytes", out.Written())
		if !lw.began {
			ev.Msg(msg + "; answering its status")
			writeStatus(w, reqID, api, st)
			return
		}
		ev.Msg(msg + "; aborting the HTTP transfer")
		panic(http.ErrAbortHandler)
	}
	broken := func(err error) messages.Status {
		return messages.Errorf(messages.CodeErr, messages.CodeErr, "Answer stream could not be read: %v", err)
	}
	idle := time.NewTimer(s.cfg.ChunkIdle)
	defer idle.Stop()
	for m := first; ; {
		if st, err := messages.ReadStatus(m.Header); err == nil && !st.IsOK() {
			fail(st, log.Error().Str("ai", st.AI), "answer stream ended with an error")
			return
		}
		if err := out.Frame(f.Seq, m.Data); err != nil {
			fail(broken(err), log.Error().Err(err), "answer stream broke")
			return
		}
		if err := bound.flush(); err != nil {
			fail(broken(err), log.Warn().Err(err), "answer stream could not be written")
			return
		}
		if f.End {
			if err := out.End(); err != nil {
				fail(broken(err), log.Error().Err(err), "answer stream could not be closed")
				return
			}
			log.Info().Int("frames", f.Seq+1).Int64("bytes", out.Written()).Msg("answer stream written")
			return
		}
		if m, err = s.await(ctx, ch, idle); err != nil {
			fail(messages.Errorf(messages.CodeTimeout, messages.CodeErr, "Answer stream not finished: %v", err),
				awaitLog(ctx, log).Err(err), "answer stream not finished")
			return
		}
		if !messages.IsStreamFrame(m.Header) {
			fail(broken(errors.New("a whole answer in the middle of an answer stream")), log.Error(), "a whole answer in the middle of an answer stream")
			return
		}
		if f, err = messages.ReadStreamFrame(m.Header); err != nil || f.ID != id {
			fail(broken(fmt.Errorf("a frame of another answer stream (%v)", err)), log.Error().AnErr("frame", err).Str("stream", f.ID), "a frame of another answer stream")
			return
		}
	}
}

// writeBound writes an answer under way, bounded by progress: each piece of
// at most writePiece bytes (and each flush) must be taken by the caller
// within ChunkIdle, so a caller that takes nothing for that long fails its own
// transfer and its handler is not held forever, while one that reads slowly
// but steadily is never cut off, whatever a chunk's size. lift clears the
// deadline once the answer is done, for the next request on a kept-alive
// connection. A ResponseWriter without deadlines (httptest's recorder) goes
// unbounded.
type writeBound struct {
	w    http.ResponseWriter
	rc   *http.ResponseController
	idle time.Duration
}

// writePiece is the most written under one deadline.
const writePiece = 32 << 10

func (s *Server) boundWrites(w http.ResponseWriter) writeBound {
	return writeBound{w: w, rc: http.NewResponseController(w), idle: s.cfg.ChunkIdle}
}

func (b writeBound) arm()  { _ = b.rc.SetWriteDeadline(time.Now().Add(b.idle)) }
func (b writeBound) lift() { _ = b.rc.SetWriteDeadline(time.Time{}) }

func (b writeBound) Write(p []byte) (int, error) {
	n := 0
	for len(p) > 0 {
		k := min(len(p), writePiece)
		b.arm()
		m, err := b.w.Write(p[:k])
		n += m
		if err != nil {
			return n, err
		}
		p = p[k:]
	}
	return n, nil
}

// flush sends what the ResponseWriter buffered, bounded as a write is.
func (b writeBound) flush() error {
	b.arm()
	if err := b.rc.Flush(); err != nil && !errors.Is(err, http.ErrNotSupported) {
		return err
	}
	return nil
}

// headerOnWrite writes the status line (begin) with the first bytes of the
// body, so that what fails before any is answered with a status instead.
type headerOnWrite struct {
	w     io.Writer
	begin func()
	began bool
}

func (h *headerOnWrite) Write(p []byte) (int, error) {
	if !h.began {
		h.began = true
		h.begin()
	}
	return h.w.Write(p)
}

// writeAnswer writes the status line and headers of an answer whose NATS
// headers are h.
func writeAnswer(w http.ResponseWriter, reqID string, h nats.Header, size int64) {
	st, err := messages.ReadStatus(h)
	if err != nil {
		st = messages.Status{RC: messages.CodeErr, AC: messages.CodeErr}
	}
	hh := w.Header()
	hh.Set("Content-Type", contentJSON)
	hh.Set(hdrRequestID, reqID)
	if ra := h.Get(messages.HdrRetryAfter); ra != "" {
		if n, err := strconv.ParseUint(ra, 10, 32); err == nil {
			hh.Set("Retry-After", strconv.FormatUint(n, 10))
		}
	}
	if id := h.Get(messages.HdrJobID); id != "" && subjects.Validate("job id", id) == nil && st.RC == messages.CodeAccepted {
		hh.Set("Location", jobsPath+id)
		hh.Set("Preference-Applied", "respond-async") // RFC 7240
	}
	if size >= 0 {
		hh.Set("Content-Length", strconv.FormatInt(size, 10))
	}
	w.WriteHeader(Status(st.RC))
}

// writeStatus answers an error found by the adapter itself, as the GW would:
// a JSON envelope with the status and no payload.
func writeStatus(w http.ResponseWriter, reqID, api string, st messages.Status) {
	resp := messages.Response{Header: messages.ResponseHeader{V: messages.RequestVersion, RequestID: reqID, API: api, Status: st},
		Content: messages.ContentJSON}
	body, _ := resp.Encode() // a header alone always encodes
	w.Header().Set("Content-Type", contentProblem)
	w.Header().Set(hdrRequestID, reqID)
	w.WriteHeader(Status(st.RC))
	_, _ = w.Write(body)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
