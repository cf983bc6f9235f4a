// Package defaults is the one home of sg's configuration defaults: the GW,
// the RC (shell and core), messages and cmd/sg read them from here (it
// imports nothing of sg's, so that any package may), and Table, which
// README's Configuration table is checked against by a test, lists the ones
// a user sets through the environment.
package defaults

import "time"

// Request handling (seed: KXI_SG_...).
const (
	Timeout        = 60 * time.Second // SG_TIMEOUT: request timeout when a request sets none
	TimeoutMargin  = 30 * time.Second // SG_TIMEOUT_MARGIN: GW wait after a deadline for the RC's timeout
	MaxRetry       = 3                // SG_MAX_RETRY: RC retries per request
	RCTimer        = 10 * time.Second // SG_RC_TIMER: RC timer period
	MultiRCMaxWait = 1                // SG_MULTI_RC_TO_MAX_WAIT: timer periods a primary waits for secondaries
	Affinity       = "hard"           // SG_SCOPE_AFFINITY
	AssemblyKey    = ""               // SG_ASSEMBLY_KEY: no label names the assembly
	AssemblyName   = ""               // SG_ASSEMBLY_NAME: a global RC
)

// NoRetry is the value of a Go Config's MaxRetry that means "no retries":
// there 0 takes MaxRetry, as every zero field takes its default. Users say 0
// (SG_MAX_RETRY=0, --max-retry 0); cmd/sg turns it into NoRetry.
const NoRetry = -1

// Connection and limits.
const (
	NATSURL         = "nats://127.0.0.1:4222"
	Prefix          = "sg"
	LogLevel        = "info"    // SG_LOG_LEVEL: trace, debug, info, warn or error
	MaxRequestBytes = 256 << 10 // SG_MAX_REQUEST_BYTES
	MaxAnswerBytes  = 256 << 20 // largest answer the GW forwards and the Agg composes; a chunked transfer's (messages.DefaultChunkLimit)
	AnnounceEvery   = time.Second
	GWMaxInFlight   = 4096 // requests one GW holds open at once
	// GWHeldAnswers: SG_GW_MAX_HELD_BYTES, the answers' bytes one GW holds
	// for all requests together (chunks it reassembles for callers that take
	// none, and chunks and frames waiting for `answered`), defaults to this
	// many of its largest answers: one largest answer fits whole, with the
	// room a reassembler keeps ahead of chunks that come out of order.
	GWHeldAnswers = 2
	// An RC silent for DeadAnnouncements announcement periods, and at least
	// DeadAfterLeast, is dead to a GW: its requests are driven again.
	DeadAnnouncements    = 10
	DeadAfterLeast       = 3 * time.Second
	RCMaxQueued          = 100_000 // SG_RC_MAX_QUEUED
	RCMaxQueuedPerCaller = 10_000  // SG_RC_MAX_QUEUED_PER_CALLER
	RecoverTimeout       = 10 * time.Second
	// LabelSetRetention (SG_RC_LABEL_SET_RETENTION): how long an RC
	// remembers a label set after its last DAP left, so that requests
	// selecting it wait for it (a restart, a rolling upgrade) instead of
	// being answered without it; past it, a decommissioned label set no
	// longer holds requests to their deadline.
	LabelSetRetention = 10 * time.Minute
	DAPHeartbeat      = 2 * time.Second // DAPs' and Aggs' heartbeat period (what RCs expect); the RC's warm-up
	// RCWakeFloor bounds below the period at which an RC's loop wakes to
	// measure its own stalls (half the shortest heartbeat interval of its
	// DAPs and Aggs): a DAP announcing a 1 ms interval cannot make it spin.
	RCWakeFloor = 10 * time.Millisecond
)

// Log lines caused by input from the network (a malformed or forged
// message, a poison record, a loop stall: package loglimit) are limited per
// kind to LogBurst lines in each LogPeriod; the rest are not written (the
// next one written says how many were not). Their counters count every one.
const (
	LogBurst  = 10
	LogPeriod = 10 * time.Second
)

// LogBuffer bounds the log lines that wait for the process's log output
// (package logwriter): past it, lines below error level are not kept (the
// next batch says how many were not) rather than the services waiting on a
// stalled output.
const LogBuffer = 1 << 20

// AggDoneDelay is how long an Agg holds a done notice (the RC may forget the
// request: it was answered) for others to the same RC, so that under load
// one message carries many (messages.AggDone). The answer has gone out
// before: only the RC's bookkeeping waits.
const AggDoneDelay = 2 * time.Millisecond

// AggStreamWindow is the size in bytes of one frame of an answer streamed to
// a caller that reads streams (Sg-Accept-Stream), at most the max payload:
// what the Agg, the GW and the caller hold of the answer at once.
const AggStreamWindow = 512 << 10

// AggAnswerChunk is the size in bytes of one message of a chunked answer
// from the Agg, headers included, before the GW puts in its own (at most
// messages.RelayRoom): with those and the protocol line, a chunk fits the
// NATS server's largest read buffer (64 KiB), so the server parses it where
// it read it. A message larger than the read buffer it arrives in is first
// copied into a buffer made (and zeroed) for it, at each of the answer's two
// crossings (Agg -> GW -> caller), and is garbage after: work, allocation and
// collection for every byte of the answer. Smaller chunks would cost more
// messages (headers, a delivery, the GW's relay step each) for the same bytes.
const AggAnswerChunk = 62 << 10

// DAPPartialWindow is the size in bytes of one window of a DAP's partial
// result (messages.PartialResult.Window), at most the max payload: a larger
// partial is sent as several, under the Agg's credit, so that neither the DAP
// nor the Agg holds it encoded whole.
const DAPPartialWindow = 512 << 10

// The answer store: the JetStream object store where the GW writes an answer
// above the max payload for a caller that does not reassemble chunks, so
// that any NATS client can fetch it (README, Large answers).
const (
	AnswerStoreBucket   = ""               // SG_ANSWER_STORE_BUCKET: "" is <PREFIX>_ANSWERS (subjects.AnswerStore)
	AnswerStoreTTL      = 10 * time.Minute // SG_ANSWER_STORE_TTL: how long a stored answer can be fetched
	AnswerStoreMaxBytes = 1 << 30          // SG_ANSWER_STORE_MAX_BYTES: the bucket's size cap; a full bucket stores no more
)

// The HTTP API's bounds on slow callers (README, Over HTTP).
const (
	HTTPChunkIdle       = 30 * time.Second // SG_HTTP_CHUNK_IDLE: wait for an answer's next message, and for its caller to take a piece
	HTTPMaxBacklogBytes = 64 << 20         // SG_HTTP_MAX_BACKLOG_BYTES: one answer's messages held for a slow caller
	HTTPMaxBacklogTotal = 256 << 20        // SG_HTTP_MAX_BACKLOG_TOTAL: every answer's together
)

// Durability: the JetStream streams of the GW (request log) and the RC (DAP
// state), and the bundled NATS server (README, Deployment, durability and
// recovery).
const (
	JetStream             = true        // SG_JETSTREAM
	JSStorage             = "file"      // SG_JS_STORAGE: file | memory
	JSReplicas            = 1           // SG_JS_REPLICAS: 3 on a NATS cluster
	RequestLogMaxAge      = time.Hour   // SG_REQUEST_LOG_MAX_AGE: a request's timeout plus the margin must be below it
	RequestLogCreateAfter = 0           // SG_REQUEST_LOG_CREATE_AFTER: each entry written with its request's first drive
	RequestLogRetry       = time.Second // after a failed request log write, when the GW writes again
	// NATSSyncInterval (SG_NATS_SYNC_INTERVAL): the bundled server's
	// JetStream fsync period, at most what a power loss can lose of
	// acknowledged data (the nats-server default is 2 minutes).
	NATSSyncInterval = time.Second
)

// Limits of the DAP and the Agg.
const (
	DAPMaxQueue     = 1024    // SG_DAP_MAX_QUEUE: portions waiting for a slot
	AggMaxHeldBytes = 1 << 30 // SG_AGG_MAX_BYTES: partial results an Agg holds for all requests
	// SG_AGG_MAX_REQUEST_BYTES defaults to the largest answer, MaxAnswerBytes.
)

// Async jobs and Retry-After (the seed's parameters table).
const (
	JobRetention      = 24 * time.Hour         // SG_JOB_RETENTION: a finished job's answer; its record twice as long
	GWMaxJobs         = 256                    // SG_GW_MAX_JOBS: async jobs one GW runs at once (sg gw; a gw.Jobs left zero takes its per-caller bound)
	RetryMin          = time.Second            // SG_RETRY_MIN: min_seconds, the floor
	RetryMax          = 300 * time.Second      // SG_RETRY_MAX: max_seconds, the ceiling
	RetrySafetyMargin = 0.2                    // SG_RETRY_SAFETY_MARGIN: safety_margin, multiplier on the ETA
	RetryNominalExec  = 2 * time.Second        // SG_RETRY_NOMINAL_EXEC: a portion's execution (P) until one is measured
	RetryNominalAgg   = 100 * time.Millisecond // SG_RETRY_NOMINAL_AGG: the Agg's merge and the way back (T)
)

// Setting is one environment setting as README's Configuration table shows
// it, and as `sg --help` lists it.
type Setting struct {
	Env     string // SG_ name
	KXI     string // the seed's name, "" if none
	Default string // as README's "default" column writes it
	Help    string // sg --help's line, without the default
}

// Table lists every environment setting, in README's order, with its
// default as README writes it; a test checks README's Configuration table
// against it, row for row, and the texts against the constants above.
var Table = []Setting{
	{"SG_NATS_URL", "", "`nats://127.0.0.1:4222`", "NATS URL"},
	{"SG_TIMEOUT", "KXI_SG_TIMEOUT", "60 s", "default request timeout"},
	{"SG_TIMEOUT_MARGIN", "KXI_SG_TIMEOUT_MARGIN", "30 s", "GW: wait after a deadline for the RC's timeout"},
	{"SG_MAX_RETRY", "KXI_SG_MAX_RETRY", "3", "RC: retries per request, 0 = none"},
	{"SG_RC_TIMER", "KXI_SG_RC_TIMER", "10 s", "RC: timer period"},
	{"SG_MULTI_RC_TO_MAX_WAIT", "KXI_SG_MULTI_RC_TO_MAX_WAIT", "1", "RC: timer periods to wait for secondaries"},
	{"SG_SCOPE_AFFINITY", "KXI_SCOPE_AFFINITY", "`hard`", "GW: hard | soft"},
	{"SG_ASSEMBLY_KEY", "KXI_ASSEMBLY_KEY", `""`, "GW, RC: the label whose value names the assembly"},
	{"SG_ASSEMBLY_NAME", "KXI_ASSEMBLY_NAME", `""`, `RC, DAP: the assembly, "" = global`},
	{"SG_RC_LABELS", "", "none", "RC: its labels, k=v,..., the assembly key's among them"},
	{"SG_MAX_REQUEST_BYTES", "", "262144 (256 KiB)", "GW: largest request accepted, else TOO_LARGE"},
	{"SG_GW_MAX_HELD_BYTES", "", "2 largest answers (512 MiB)", "GW: answers' bytes held (reassembled, or waiting for answered), all requests together"},
	{"SG_HTTP_CHUNK_IDLE", "", "`30s`", "HTTP API: longest wait for an answer's next message or its caller"},
	{"SG_HTTP_MAX_BACKLOG_BYTES", "", "64 MiB", "HTTP API: held for slow callers, per answer"},
	{"SG_HTTP_MAX_BACKLOG_TOTAL", "", "256 MiB", "HTTP API: held for slow callers, all answers"},
	{"SG_PREFIX", "", "`sg`", "subject prefix"},
	{"SG_LOG_LEVEL", "", "`info`", "log level: trace, debug, info, warn or error"},
	{"SG_JETSTREAM", "", "`on`", "GW, RC: request log and DAP state stream, on | off"},
	{"SG_JS_STORAGE", "", "`file`", "their storage, file | memory"},
	{"SG_JS_REPLICAS", "", "`1`", "their replicas"},
	{"SG_REQUEST_LOG_MAX_AGE", "", "`1h`", "request log retention; the GW refuses a request whose timeout plus SG_TIMEOUT_MARGIN is not below it"},
	{"SG_REQUEST_LOG_CREATE_AFTER", "", "`0`", "GW: how long a request runs before it is logged (0: with its first drive); opt-in: one answered sooner is never logged, and lost if its GW dies"},
	{"SG_NATS_SYNC_INTERVAL", "", "`1s`", "sg nats, sg run: fsync period of JetStream files"},
	{"SG_NATS_CREDS", "", "none", "credential file: nkey seed from sg auth, or .creds"},
	{"SG_NATS_INBOX_PREFIX", "", "the credential's", "inbox prefix (_INBOX without a credential)"},
	{"SG_NATS_TLS_CA", "", "none", "TLS: CA of the server"},
	{"SG_NATS_TLS_CERT", "", "none", "TLS: client certificate"},
	{"SG_NATS_TLS_KEY", "", "none", "TLS: its key"},
	{"SG_AUTH_DIR", "", "none", "sg nats, sg run: credential directory, auth on"},
	{"SG_RC_MAX_QUEUED", "", "100000", "RC: portions queued in all"},
	{"SG_RC_MAX_QUEUED_PER_CALLER", "", "10000", "RC: portions queued per caller"},
	{"SG_RC_LABEL_SET_RETENTION", "", "`10m`", "RC: requests wait for a label set this long after its DAPs left, 0 = not at all"},
	{"SG_DAP_MAX_QUEUE", "", "1024", "DAP: portions waiting for a slot"},
	{"SG_AGG_MAX_REQUEST_BYTES", "", "the largest answer (256 MiB)", "Agg: partial results held per request"},
	{"SG_ANSWER_STORE_BUCKET", "", "`<PREFIX>_ANSWERS` (`SG_ANSWERS`)", "GW: object store of answers above the max payload"},
	{"SG_ANSWER_STORE_TTL", "", "`10m`", "GW: how long they can be fetched there"},
	{"SG_ANSWER_STORE_MAX_BYTES", "", "1073741824 (1 GiB)", "GW: the bucket's size cap"},
	{"SG_JOB_RETENTION", "", "`24h`", "GW: how long a finished async job's answer is kept"},
	{"SG_GW_MAX_JOBS", "", "256", "GW: async jobs one GW runs at once"},
	{"SG_GW_JOBS_CREDS", "", "`client.nk` beside `SG_NATS_CREDS`", "GW: client credential its async jobs run on"},
	{"SG_RETRY_MIN", "", "`1s`", "Retry-After floor"},
	{"SG_RETRY_MAX", "", "`300s`", "Retry-After ceiling"},
	{"SG_RETRY_SAFETY_MARGIN", "", "0.2", "Retry-After: multiplier on the ETA, 0.0-1.0"},
	{"SG_RETRY_NOMINAL_EXEC", "", "`2s`", "Retry-After: execution P until measured"},
	{"SG_RETRY_NOMINAL_AGG", "", "`100ms`", "Retry-After: merge T until measured"},
	{"SG_AGG_MAX_BYTES", "", "1 GiB", "Agg: partial results held for all requests"},
}
