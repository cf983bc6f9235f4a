package gw

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"
	"github.com/nats-io/nuid"

	"github.com/sg-project/sg/messages"
	"github.com/sg-project/sg/services/defaults"
	"github.com/sg-project/sg/services/gw/client"
	"github.com/sg-project/sg/services/limits"
	"github.com/sg-project/sg/services/retryafter"
	"github.com/sg-project/sg/services/streams"
	"github.com/sg-project/sg/subjects"
)

// Async jobs (issue 11). A request with opts.async is not answered with its
// result: the GW records a job in a JetStream KV bucket
// (subjects.JobsBucket, entries expire after twice Jobs.Retention), answers
// ACCEPTED at once with the job's id, state, Retry-After and ETA, and runs
// the request itself: it hands the request it decoded and checked at
// submission to its core, as a request of its own client's inbox (the same
// path, limits and answers as a sync request, under the job id as
// Sg-Request-Id), never decoding it again nor re-encoding its arguments. The
// answer,
// whatever it is, is kept whole in an object store
// (subjects.JobResultsStore, expiring after Jobs.Retention). A poll
// (subjects.GWJob, any GW) answers ACCEPTED with a fresh Retry-After while
// the job runs, the stored answer byte for byte once it is done,
// UNKNOWN_JOB for an id it never saw and EXPIRED once the answer is gone.
//
// Retry-After comes from retryafter.ForStage with the figures of the RC that
// holds the request: the GW asks every RC it knows (subjects.RCPosition) and
// the one that coordinates the request reports its place in the queue and
// the drain rate and execution time it measured (subjects.GWPosition).
//
// A GW that restarts runs its unfinished jobs again from the bucket (the
// request is idempotent: a read), decoding each once; their state and answers
// survive it.

// Jobs configures async jobs. Zero fields take the defaults.
type Jobs struct {
	// Retention: how long a finished job's answer is kept (SG_JOB_RETENTION,
	// default 24 h); the job's record stays twice as long, so that a poll
	// after the answer is gone is told EXPIRED rather than UNKNOWN_JOB.
	Retention time.Duration
	Replicas  int  // of the bucket and the object store (default 1)
	Memory    bool // keep jobs in memory: a NATS restart forgets them
	// MaxRunning: jobs this GW runs at once (SG_GW_MAX_JOBS, default
	// Config.MaxInFlightPerCaller: the runner is one caller of the GW);
	// past it a submission is answered RATE_LIMITED.
	MaxRunning int
	// PositionWait: how long a poll waits for an RC's position report
	// (default 250 ms); none by then: the backoff B(E).
	PositionWait time.Duration
	// RetryAfter: the seed's clamp, margin and nominal times (SG_RETRY_*).
	RetryAfter retryafter.Config
	// NC is the connection the jobs' answers come back on, to an inbox of
	// its own (a reassembling client's); nil: the GW's own. With NATS auth
	// it must be a client credential's: a GW answers caller inboxes only,
	// never a service inbox (sg run passes its client connection).
	NC *nats.Conn
}

// Defaults of Jobs.
const (
	DefaultJobRetention    = defaults.JobRetention // SG_JOB_RETENTION
	DefaultJobPositionWait = 250 * time.Millisecond
	// LimitJobs names Jobs.MaxRunning in Sg-Limit.
	LimitJobs = "gw_running_jobs"
	// APIJob is the api name on a poll's answer.
	APIJob = "job"
	// jobUnavailableRetries: a run answered UNAVAILABLE (a GW stopping) is
	// sent again this many times.
	jobUnavailableRetries = 5
	// maxJobRecord bounds a record read from the bucket (a request is at
	// most Config.MaxRequestBytes, JSON-encoded as base64).
	maxJobRecord = 4 << 20
	// maxJobHandlers: submissions and polls served at once beside the micro
	// handlers; past it they are served in the handler (back-pressure).
	maxJobHandlers = 256
)

func (j Jobs) withDefaults(maxPerCaller int) Jobs {
	if j.Retention <= 0 {
		j.Retention = DefaultJobRetention
	}
	if j.Replicas <= 0 {
		j.Replicas = defaults.JSReplicas
	}
	if j.MaxRunning <= 0 {
		j.MaxRunning = maxPerCaller
	}
	if j.PositionWait <= 0 {
		j.PositionWait = DefaultJobPositionWait
	}
	j.RetryAfter = j.RetryAfter.WithDefaults()
	return j
}

// jobRecord is a job in the bucket (JSON: it is small and read by humans
// with `nats kv get`).
type jobRecord struct {
	V      int         `json:"v"`
	ID     string      `json:"id"`
	Owner  string      `json:"owner"` // the GW that runs it
	Caller string      `json:"caller"`
	API    string      `json:"api"`
	Header nats.Header `json:"header,omitempty"` // the request's headers to replay (content type)
	// Body (v1, older GWs) is the request re-encoded with opts.async and the
	// idempotency key cleared; Request (v2) is the request as the caller
	// sent it (opts.async and all: a run ignores both). A v2 record leaves
	// Body empty, so that an older GW resuming it (a rollback) fails the job
	// with its own refusal of an empty request instead of running it as a
	// new async job.
	Body    []byte `json:"body"`
	Request []byte `json:"request,omitempty"`
	// BodySum is what an idempotent resubmission must match: for v1 the
	// SHA-256 of Body (legacySum), for v2 requestSum.
	BodySum  string `json:"bodySum"`
	State    string `json:"state"`
	Created  int64  `json:"created"`            // unix ns
	Finished int64  `json:"finished,omitempty"` // unix ns
	Expires  int64  `json:"expires,omitempty"`  // unix ns: the answer is gone after it
	RC       uint16 `json:"rc,omitempty"`       // the answer's return code
	Idem     string `json:"idem,omitempty"`     // its idempotency key's bucket key
}

func (r *jobRecord) terminal() bool {
	return r.State == messages.JobDone || r.State == messages.JobFailed
}

// jobStore is a GW's view of the job bucket, its running jobs and the
// position reports it waits for.
type jobStore struct {
	g   *GW
	cfg Jobs
	kv  jetstream.KeyValue
	obj jetstream.ObjectStore
	cl  *client.Client

	ctx context.Context // the GW's Run: runners stop with it
	wg  sync.WaitGroup

	// handlers bounds the submissions and polls served beside the micro
	// handler: each may wait PositionWait for an RC, and a micro endpoint
	// calls its handler one request at a time.
	handlers chan struct{}

	mu      sync.Mutex
	running int
	waiters map[string]chan messages.PositionReport
}

func jobKey(id string) string { return "j." + id }

func idemKey(caller, key string) string {
	s := sha256.Sum256([]byte(caller + "\x00" + key))
	return "i." + hex.EncodeToString(s[:20])
}

// openJobs creates or binds the bucket and the object store and runs this
// GW's unfinished jobs again.
func (g *GW) openJobs(ctx context.Context) (*jobStore, error) {
	cfg := g.cfg.Jobs.withDefaults(g.cfg.MaxInFlightPerCaller)
	js, err := jetstream.New(g.nc)
	if err != nil {
		return nil, fmt.Errorf("gw: jobs: %w", err)
	}
	storage := jetstream.FileStorage
	if cfg.Memory {
		storage = jetstream.MemoryStorage
	}
	octx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	kv, err := streams.EnsureKeyValue(octx, js, jetstream.KeyValueConfig{Bucket: g.s.JobsBucket(),
		Description: "sg async jobs", TTL: 2 * cfg.Retention, Storage: storage, Replicas: cfg.Replicas})
	if err != nil {
		return nil, fmt.Errorf("gw: jobs bucket %s: %w", g.s.JobsBucket(), err)
	}
	obj, err := streams.EnsureObjectStore(octx, js, jetstream.ObjectStoreConfig{Bucket: g.s.JobResultsStore(),
		Description: "sg async jobs' answers", TTL: cfg.Retention, Storage: storage, Replicas: cfg.Replicas})
	if err != nil {
		return nil, fmt.Errorf("gw: jobs results %s: %w", g.s.JobResultsStore(), err)
	}
	j := &jobStore{g: g, cfg: cfg, kv: kv, obj: obj, ctx: ctx, waiters: map[string]chan messages.PositionReport{},
		handlers: make(chan struct{}, maxJobHandlers),
		// One attempt: a refusal over a limit is the job's answer (429 and
		// its Retry-After to the submitter), not a pause inside the GW.
		cl: client.NewWithOptions(cmp.Or(cfg.NC, g.nc), g.s, client.Options{MaxInFlight: cfg.MaxRunning, MaxAttempts: 1, MaxAnswerBytes: g.cfg.MaxAnswerBytes})}
	return j, nil
}

// resume runs again the jobs this GW owned and had not finished (a restart).
func (j *jobStore) resume() {
	lister, err := j.kv.ListKeysFiltered(j.ctx, "j.*")
	if err != nil {
		j.g.log.Warn().Err(err).Msg("jobs: cannot list the bucket; unfinished jobs are not resumed")
		return
	}
	n := 0
	for k := range lister.Keys() {
		rec, _, err := j.get(k[2:])
		if err != nil || rec.Owner != j.g.cfg.ID || rec.terminal() {
			continue
		}
		j.start(rec, nil)
		j.g.met.jobs.WithLabelValues("resumed").Inc()
		n++
	}
	if n > 0 {
		j.g.log.Info().Int("jobs", n).Msg("jobs: unfinished jobs of an earlier incarnation run again")
	}
}

// wait returns when every runner has returned (after ctx ended).
func (j *jobStore) wait() {
	j.wg.Wait()
	j.cl.Close()
}

func (j *jobStore) get(id string) (*jobRecord, uint64, error) {
	e, err := j.kv.Get(j.ctx, jobKey(id))
	if err != nil {
		return nil, 0, err
	}
	if len(e.Value()) > maxJobRecord {
		return nil, 0, errors.New("job record too large")
	}
	var rec jobRecord
	if err := json.Unmarshal(e.Value(), &rec); err != nil {
		return nil, 0, fmt.Errorf("job record %s: %w", id, err)
	}
	return &rec, e.Revision(), nil
}

func (j *jobStore) put(rec *jobRecord) error {
	b, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	_, err = j.kv.Put(j.ctx, jobKey(rec.ID), b)
	return err
}

// submitJob accepts an async request, decoded and checked by handle: it
// records the job (or finds the one of the same idempotency key), starts it
// on that decode and answers ACCEPTED.
func (g *GW) submitJob(ri *reqInfo, msg *nats.Msg, req checkedRequest) {
	j := g.jobs
	key := req.header.Opts.IdempotencyKey
	rec := &jobRecord{V: jobRecordVersion, ID: nuid.Next(), Owner: g.cfg.ID, Caller: ri.caller, API: ri.api, Request: msg.Data,
		BodySum: requestSum(req), State: messages.JobWaiting, Created: time.Now().UnixNano(),
		Header: nats.Header{messages.HdrContentType: []string{string(req.content)}}}
	j.mu.Lock()
	full := j.running >= j.cfg.MaxRunning
	j.mu.Unlock()
	if full {
		// Over the limit: when one of the running jobs can be expected to
		// end, by the same formula (nominal times: the GW measures nothing).
		ra := limits.RetryAfter(1, retryafter.NominalRate(j.cfg.MaxRunning, j.cfg.RetryAfter.NominalExec), j.cfg.RetryAfter.Params)
		g.met.jobs.WithLabelValues("refused").Inc()
		g.met.limited.WithLabelValues(LimitJobs).Inc()
		h := nats.Header{}
		messages.SetString(h, messages.HdrLimit, LimitJobs)
		messages.SetInt(h, messages.HdrRetryAfter, int64(ra))
		g.respondStatusWith(ri, messages.Errorf(messages.CodeRateLimited, messages.CodeErr,
			"Request refused: this gateway runs %d async jobs, its limit %s=%d (SG_GW_MAX_JOBS)", j.cfg.MaxRunning, LimitJobs, j.cfg.MaxRunning), h)
		return
	}
	if key != "" {
		rec.Idem = idemKey(ri.caller, key)
	}
	if err := j.putNew(rec); err != nil {
		g.respondStatus(ri, messages.Errorf(messages.CodeUnavailable, messages.CodeErr, "Job store: %v", err))
		return
	}
	// The record first, then the key: a key always names a record (a
	// concurrent submission with the same key finds the winner's).
	if key != "" {
		ik := idemKey(ri.caller, key)
		if _, err := j.kv.Create(j.ctx, ik, []byte(rec.ID)); err != nil {
			// The key is taken (or the store failed): this record is nobody's.
			_ = j.kv.Delete(j.ctx, jobKey(rec.ID))
			if !errors.Is(err, jetstream.ErrKeyExists) {
				g.respondStatus(ri, messages.Errorf(messages.CodeUnavailable, messages.CodeErr, "Job store: %v", err))
				return
			}
			e, gerr := j.kv.Get(j.ctx, ik)
			if gerr != nil {
				g.respondStatus(ri, messages.Errorf(messages.CodeUnavailable, messages.CodeErr, "Job store: %v", gerr))
				return
			}
			old, _, gerr := j.get(string(e.Value()))
			if gerr != nil {
				g.respondStatus(ri, messages.Errorf(messages.CodeUnavailable, messages.CodeErr, "Job store: %v", gerr))
				return
			}
			if !old.sameRequest(rec.BodySum, msg) {
				g.respondStatus(ri, bad("Idempotency key %q was used for a different request (job %s)", safeLabel(key), old.ID))
				return
			}
			ri.log.Info().Str("job_id", old.ID).Msg("idempotent resubmission: the same job")
			g.met.jobs.WithLabelValues("resubmitted").Inc()
			// ACCEPTED with the job, finished or not: a submission's answer
			// is the job; its result is the poll's.
			g.answerStatus(ri, old, j.status(old))
			return
		}
	}
	ri.log.Info().Str("job_id", rec.ID).Msg("async job accepted")
	g.met.jobs.WithLabelValues("accepted").Inc()
	j.start(rec, &req)
	js := j.status(rec) // waits up to PositionWait for the RC
	// Refused at once over a limit (the RC's queue limits): the submitter
	// gets the refusal, 429 and its Retry-After, as a sync caller would.
	// A job that finished otherwise is answered ACCEPTED all the same
	// (state done or failed, Retry-After 0): the answer is the poll's.
	if now, _, err := j.get(rec.ID); err == nil && now.terminal() {
		if messages.Code(now.RC) == messages.CodeRateLimited {
			g.answerResult(ri, now)
			return
		}
		rec, js = now, j.status(now)
	}
	g.answerStatus(ri, rec, js)
}

// jobRecordVersion: v2 keeps the caller's request as sent (Request).
const jobRecordVersion = 2

// request is the job's request: as sent (v2), or as an older GW re-encoded it.
func (r *jobRecord) request() []byte {
	if r.V >= 2 {
		return r.Request
	}
	return r.Body
}

// sameRequest reports whether a resubmission (sum: its requestSum; msg: as
// it came) is the request this job was recorded for. A job an older GW
// recorded (v1) is matched by its own sum, computed for this comparison
// only: the request re-encoded as that GW stored it (legacySum), so that a
// rolling upgrade does not refuse a caller's idempotent resubmission.
func (r *jobRecord) sameRequest(sum string, msg *nats.Msg) bool {
	if r.V >= 2 {
		return r.BodySum == sum
	}
	legacy, err := legacySum(msg)
	return err == nil && r.BodySum == legacy
}

// legacySum is a v1 record's BodySum of the request msg carries: the SHA-256
// of the request re-encoded with opts.async and the idempotency key cleared.
func legacySum(msg *nats.Msg) (string, error) {
	req, err := messages.DecodeRequest(msg.Header, msg.Data)
	if err != nil {
		return "", err
	}
	req.Header.Opts.Async, req.Header.Opts.IdempotencyKey = false, ""
	body, err := req.Encode()
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(body)
	return hex.EncodeToString(sum[:]), nil
}

// requestSum is what an idempotent resubmission must match: the request as
// checked, but for what makes it async (opts.async, the key), with its
// arguments as sent.
func requestSum(req checkedRequest) string {
	h := req.header
	h.Opts.Async, h.Opts.IdempotencyKey = false, ""
	hb, err := json.Marshal(h)
	if err != nil {
		hb = nil // a header of strings and numbers always encodes
	}
	s := sha256.New()
	for _, b := range [][]byte{[]byte(req.content), hb, req.args.Bytes()} {
		s.Write(b)
		s.Write([]byte{0})
	}
	return hex.EncodeToString(s.Sum(nil))
}

func (j *jobStore) putNew(rec *jobRecord) error {
	b, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	_, err = j.kv.Create(j.ctx, jobKey(rec.ID), b)
	return err
}

// start runs a job in a goroutine owned by the store (waited for by wait),
// on req, its request as submission checked it; nil: a job of an earlier
// incarnation, whose request run decodes from the record. The job runs on
// its own copy of the record: the submitter goes on reading rec (status)
// while run writes the job's outcome into its copy.
func (j *jobStore) start(rec *jobRecord, req *checkedRequest) {
	own := *rec
	j.mu.Lock()
	j.running++
	j.mu.Unlock()
	j.g.met.jobsRunning.Inc()
	j.wg.Go(func() {
		defer func() {
			j.mu.Lock()
			j.running--
			j.mu.Unlock()
			j.g.met.jobsRunning.Dec()
		}()
		j.run(&own, req)
	})
}

// run hands the job's request to the core and keeps its answer. A stop
// (ctx ended) leaves the job unfinished for the next incarnation.
func (j *jobStore) run(rec *jobRecord, req *checkedRequest) {
	log := j.g.log.With().Str("job_id", rec.ID).Str("api", rec.API).Logger()
	var h nats.Header
	var data []byte
	st := messages.StatusOK
	if req == nil {
		var r checkedRequest
		if r, st = j.g.checkJob(rec); !st.IsOK() {
			// Refused now (a setting changed since it was accepted): the
			// refusal is the job's answer.
			log.Warn().Str("rc", st.RC.String()).Str("ai", st.AI).Msg("job's request refused on resume")
			h, data = j.errorAnswer(rec, st)
		}
		req = &r
	}
	if st.IsOK() {
		// The job runs the caller's request as a sync one: no job of its own.
		run := *req
		run.header.Opts.Async, run.header.Opts.IdempotencyKey = false, ""
		if h, data = j.runRequest(rec, run); h == nil {
			return // stopped
		}
	}
	st, _ = messages.ReadStatus(h)
	if _, err := j.obj.Put(j.ctx, jetstream.ObjectMeta{Name: rec.ID, Headers: h}, bytes.NewReader(data)); err != nil {
		log.Error().Err(err).Msg("job's answer could not be stored; the job runs again on restart")
		return
	}
	now := time.Now()
	rec.State, rec.RC, rec.Finished, rec.Expires = messages.JobDone, uint16(st.RC), now.UnixNano(), now.Add(j.cfg.Retention).UnixNano()
	if !st.IsOK() {
		rec.State = messages.JobFailed
	}
	j.g.met.jobs.WithLabelValues(rec.State).Inc() // before the record: a poll that sees it sees the count
	if err := j.put(rec); err != nil {
		log.Error().Err(err).Msg("job's state could not be stored")
		return
	}
	if st.RC == messages.CodeRateLimited && rec.Idem != "" {
		// Refused over a limit: coming back with the same key must try
		// again, not find the refusal.
		if err := j.kv.Delete(j.ctx, rec.Idem); err != nil {
			log.Warn().Err(err).Msg("idempotency key of a refused job not released")
		}
	}
	log.Info().Str("state", rec.State).Str("rc", st.RC.String()).Int("bytes", len(data)).Msg("async job finished")
}

// runRequest runs the job's request through the core until it is answered
// other than UNAVAILABLE (a GW stopping), at most jobUnavailableRetries
// times more, and returns the answer; a nil header: ctx ended.
func (j *jobStore) runRequest(rec *jobRecord, req checkedRequest) (nats.Header, []byte) {
	// One run's bound: its timeout plus the margin, when the GW answers it
	// at the latest, and some slack.
	wait := req.timeout + j.g.cfg.TimeoutMargin + 10*time.Second
	for attempt := 0; ; attempt++ {
		ctx, cancel := context.WithTimeout(j.ctx, wait)
		h, data, err := j.cl.Await(ctx, rec.API, rec.ID, func(reply string) error {
			j.g.runJob(rec.ID, req, reply)
			return nil
		})
		cancel()
		if j.ctx.Err() != nil {
			return nil, nil
		}
		if err != nil {
			st := messages.Errorf(messages.CodeUnavailable, messages.CodeErr, "The job's request could not be run: %v", err)
			h, data = j.errorAnswer(rec, st)
		}
		if st, _ := messages.ReadStatus(h); st.RC != messages.CodeUnavailable || attempt >= jobUnavailableRetries {
			return h, data
		}
		select {
		case <-j.ctx.Done():
			return nil, nil
		case <-time.After(time.Second):
		}
	}
}

// runJob hands a job's request (id: the job's) to the core as one received
// now from reply, the runner's inbox: the core admits it, counts it against
// the runner as its caller and answers it there, as handle's.
func (g *GW) runJob(id string, req checkedRequest, reply string) {
	ri := &reqInfo{api: req.header.API, id: nuid.Next(), clientID: id, caller: callerOf(reply), reply: reply,
		content: req.content, logCorr: req.header.Opts.LogCorr, received: time.Now()}
	ri.log = g.reqLogger(ri)
	g.arrive(ri, g.submission(ri, req))
}

// checkJob decodes and checks the request of a job of an earlier
// incarnation, once, as handle checks a caller's.
func (g *GW) checkJob(rec *jobRecord) (checkedRequest, messages.Status) {
	msg := &nats.Msg{Subject: g.s.GWAPI(rec.API), Header: rec.Header, Data: rec.request()}
	return g.check(g.newReqInfoNoLog(rec.API, msg, time.Now()), msg)
}

// errorAnswer is the envelope of an error the runner met itself.
func (j *jobStore) errorAnswer(rec *jobRecord, st messages.Status) (nats.Header, []byte) {
	c := messages.Content(rec.Header.Get(messages.HdrContentType))
	resp := messages.Response{Header: messages.ResponseHeader{V: messages.RequestVersion, RequestID: rec.ID, API: rec.API, Status: st}, Content: c}
	b, _ := resp.Encode()
	h := nats.Header{}
	st.Write(h)
	messages.SetString(h, messages.HdrRequestID, rec.ID)
	messages.SetString(h, messages.HdrContentType, string(c))
	return h, b
}

// onPosition hands an RC's position report to the poll waiting for it.
func (j *jobStore) onPosition(m *nats.Msg) {
	rep, err := messages.DecodeValid[messages.PositionReport](m.Data)
	if err != nil {
		j.g.met.malformed.WithLabelValues("position_report").Inc()
		j.g.lim.Warn(&j.g.log, "malformed_position_report").Err(err).Msg("position report that does not decode: skipped")
		return
	}
	j.mu.Lock()
	ch := j.waiters[rep.ClientRequestID]
	j.mu.Unlock()
	if ch != nil {
		select {
		case ch <- rep:
		default:
		}
	}
}

// position asks every known RC where the job's request stands and waits
// Jobs.PositionWait for the one that holds it.
func (j *jobStore) position(id string) (messages.PositionReport, bool) {
	ch := make(chan messages.PositionReport, 1)
	j.mu.Lock()
	if _, busy := j.waiters[id]; busy {
		j.mu.Unlock()
		return messages.PositionReport{}, false // a concurrent poll asks already
	}
	j.waiters[id] = ch
	j.mu.Unlock()
	defer func() {
		j.mu.Lock()
		delete(j.waiters, id)
		j.mu.Unlock()
	}()
	q, err := messages.Encode(messages.PositionQuery{V: messages.JobVersion, GWID: j.g.cfg.ID, ClientRequestID: id})
	if err != nil {
		return messages.PositionReport{}, false
	}
	rcs := j.g.RCs()
	for _, rc := range rcs {
		_ = j.g.nc.Publish(j.g.s.RCPosition(rc.ID), q)
	}
	if len(rcs) == 0 {
		return messages.PositionReport{}, false
	}
	t := time.NewTimer(j.cfg.PositionWait)
	defer t.Stop()
	select {
	case rep := <-ch:
		return rep, true
	case <-t.C:
	case <-j.ctx.Done():
	}
	return messages.PositionReport{}, false
}

// status is the job's JobStatus now: the seed's formula on the RC's figures.
func (j *jobStore) status(rec *jobRecord) messages.JobStatus {
	now := time.Now()
	js := messages.JobStatus{V: messages.JobVersion, JobID: rec.ID, State: rec.State,
		Elapsed: int(now.Sub(time.Unix(0, rec.Created)) / time.Second)}
	if rec.terminal() {
		return js
	}
	f := retryafter.Facts{Stage: messages.JobWaiting, Elapsed: now.Sub(time.Unix(0, rec.Created))}
	if rep, ok := j.position(rec.ID); ok {
		f.DrainRate, f.Exec = rep.DrainRate, time.Duration(rep.ExecMS)*time.Millisecond
		switch rep.Status {
		case messages.StatusAllocating:
			f.Stage, f.Ahead = messages.JobQueued, rep.Ahead+rep.Queued
			js.Position = f.Ahead
		case messages.StatusExecuting:
			f.Stage = messages.JobExecuting
		case messages.StatusAggregating:
			f.Stage = messages.JobAggregating
		}
	}
	js.State = f.Stage // the stage Retry-After is reckoned for is the state told
	ra, eta := retryafter.ForStage(f, j.cfg.RetryAfter)
	js.RetryAfter = ra
	js.ETA = int((eta + time.Second - 1) / time.Second)
	return js
}

// answerJob answers ACCEPTED with the job's status (submit and poll alike).
func (g *GW) answerJob(ri *reqInfo, rec *jobRecord) {
	if rec.terminal() {
		g.answerResult(ri, rec)
		return
	}
	g.answerStatus(ri, rec, g.jobs.status(rec))
}

// answerStatus answers ACCEPTED with js.
func (g *GW) answerStatus(ri *reqInfo, rec *jobRecord, js messages.JobStatus) {
	payload, err := encodeIn(ri.content, js)
	if err != nil {
		g.respondStatus(ri, messages.Errorf(messages.CodeInternal, messages.CodeErr, "encode job status: %v", err))
		return
	}
	st := messages.Status{RC: messages.CodeAccepted, AC: messages.CodeOK, AI: "Async request accepted: job " + rec.ID + " is " + js.State}
	resp := messages.Response{Header: messages.ResponseHeader{V: messages.RequestVersion, RequestID: ri.clientID, API: ri.api,
		LogCorr: ri.logCorr, RetryAfterMS: int64(js.RetryAfter) * 1000, Status: st}, Payload: payload, Content: ri.content}
	body, err := resp.Encode()
	if err != nil {
		g.respondStatus(ri, messages.Errorf(messages.CodeInternal, messages.CodeErr, "encode job status: %v", err))
		return
	}
	h := nats.Header{}
	st.Write(h)
	messages.SetString(h, messages.HdrRequestID, ri.clientID)
	messages.SetString(h, messages.HdrAPI, ri.api)
	messages.SetString(h, messages.HdrJobID, rec.ID)
	messages.SetInt(h, messages.HdrRetryAfter, int64(js.RetryAfter))
	messages.SetString(h, messages.HdrContentType, string(ri.content))
	ri.log.Debug().Str("job_id", rec.ID).Str("state", js.State).Int("retry_after", js.RetryAfter).Int("eta", js.ETA).
		Int("position", js.Position).Msg("job status")
	g.send(ri, h, body, st)
}

func encodeIn(c messages.Content, v any) ([]byte, error) {
	if c == messages.ContentJSON {
		return json.Marshal(v)
	}
	return messages.Encode(v)
}

// answerResult answers a finished job's poll with its stored answer, or
// EXPIRED when it is gone.
func (g *GW) answerResult(ri *reqInfo, rec *jobRecord) {
	j := g.jobs
	if rec.Expires != 0 && time.Now().UnixNano() >= rec.Expires {
		g.respondStatus(ri, messages.Errorf(messages.CodeExpired, messages.CodeErr, "Job %s finished at %s; its answer was kept for %s and is gone",
			rec.ID, time.Unix(0, rec.Finished).UTC().Format(time.RFC3339), j.cfg.Retention))
		return
	}
	res, err := j.obj.Get(j.ctx, rec.ID)
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		g.respondStatus(ri, messages.Errorf(messages.CodeExpired, messages.CodeErr, "Job %s: its answer is gone", rec.ID))
		return
	}
	if err != nil {
		g.respondStatus(ri, messages.Errorf(messages.CodeUnavailable, messages.CodeErr, "Job store: %v", err))
		return
	}
	defer res.Close()
	info, err := res.Info()
	if err != nil || int64(info.Size) > g.cfg.MaxAnswerBytes {
		g.respondStatus(ri, messages.Errorf(messages.CodeUnavailable, messages.CodeErr, "Job %s: answer unreadable", rec.ID))
		return
	}
	data, err := io.ReadAll(io.LimitReader(res, g.cfg.MaxAnswerBytes))
	if err != nil {
		g.respondStatus(ri, messages.Errorf(messages.CodeUnavailable, messages.CodeErr, "Job store: %v", err))
		return
	}
	h := nats.Header{}
	for k, v := range info.Headers {
		h[k] = v
	}
	messages.SetString(h, messages.HdrJobID, rec.ID)
	st, err := messages.ReadStatus(h)
	if err != nil {
		st = messages.Status{RC: messages.CodeErr, AC: messages.CodeErr}
	}
	g.send(ri, h, data, st)
}

// jobEndpoint serves subjects.GWJob: a poll, the job id in Sg-Job-Id.
type jobEndpoint struct{ g *GW }

func (e jobEndpoint) Handle(r micro.Request) { e.g.handleJobPoll(r) }

func (g *GW) handleJobPoll(r micro.Request) {
	msg := &nats.Msg{Subject: r.Subject(), Reply: r.Reply(), Header: nats.Header(r.Headers()), Data: r.Data()}
	if err := g.checkReply(msg.Reply); err != nil {
		g.met.refusedReply.Inc()
		g.lim.Warn(&g.log, "refused_reply_job_poll").Err(err).Msg("dropping job poll: its reply subject is not a client inbox")
		return
	}
	ri := g.newReqInfo(APIJob, msg, time.Now())
	id := msg.Header.Get(messages.HdrJobID)
	if id == "" || subjects.Validate("job id", id) != nil || len(msg.Data) > 0 {
		g.respondStatus(ri, bad("A job poll names the job in %s (a valid job id) and has no body", messages.HdrJobID))
		return
	}
	ri.log = ri.log.With().Str("job_id", id).Logger()
	g.jobs.serve(func() { g.poll(ri, id) })
}

func (g *GW) poll(ri *reqInfo, id string) {
	rec, _, err := g.jobs.get(id)
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		g.respondStatus(ri, messages.Errorf(messages.CodeUnknownJob, messages.CodeErr, "No job %s (never submitted, or gone after twice its retention)", id))
	case err != nil:
		g.respondStatus(ri, messages.Errorf(messages.CodeUnavailable, messages.CodeErr, "Job store: %v", err))
	default:
		g.answerJob(ri, rec)
	}
}

// serve runs fn beside the micro handler (which must not block: the job's
// own request comes in on the same endpoint), in a goroutine the store owns
// and waits for; with maxJobHandlers busy, in the caller.
func (j *jobStore) serve(fn func()) {
	select {
	case j.handlers <- struct{}{}:
		j.wg.Go(func() {
			defer func() { <-j.handlers }()
			fn()
		})
	default:
		fn()
	}
}

// onPosition is the GWPosition subscription's callback.
func (g *GW) onPosition(m *nats.Msg) {
	if g.jobs != nil {
		g.jobs.onPosition(m)
	}
}
