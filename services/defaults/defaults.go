// Package defaults is the one home of sg's configuration defaults: the GW,
// the RC (shell and core) and cmd/sg read them from here, and Table, which
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
	NATSURL              = "nats://127.0.0.1:4222"
	Prefix               = "sg"
	MaxRequestBytes      = 256 << 10 // SG_MAX_REQUEST_BYTES
	MaxAnswerBytes       = 256 << 20 // largest answer the GW forwards and the Agg composes
	AnnounceEvery        = time.Second
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
)

// AggDoneDelay is how long an Agg holds a done notice (the RC may forget the
// request: it was answered) for others to the same RC, so that under load
// one message carries many (messages.AggDone). The answer has gone out
// before: only the RC's bookkeeping waits.
const AggDoneDelay = 2 * time.Millisecond

// AggStreamWindow is the size in bytes of one frame of an answer streamed to
// a caller that reads streams (Sg-Accept-Stream), at most the max payload:
// what the Agg, the GW and the caller hold of the answer at once.
const AggStreamWindow = 512 << 10

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

// Setting is one environment setting as README's Configuration table shows it.
type Setting struct {
	Env     string // SG_ name
	KXI     string // the seed's name, "" if none
	Default string // as README's "default" column writes it
}

// Table lists the settings whose defaults live here, as README writes them.
var Table = []Setting{
	{"SG_NATS_URL", "", "`" + NATSURL + "`"},
	{"SG_TIMEOUT", "KXI_SG_TIMEOUT", "60 s"},
	{"SG_TIMEOUT_MARGIN", "KXI_SG_TIMEOUT_MARGIN", "30 s"},
	{"SG_MAX_RETRY", "KXI_SG_MAX_RETRY", "3"},
	{"SG_RC_TIMER", "KXI_SG_RC_TIMER", "10 s"},
	{"SG_MULTI_RC_TO_MAX_WAIT", "KXI_SG_MULTI_RC_TO_MAX_WAIT", "1"},
	{"SG_SCOPE_AFFINITY", "KXI_SCOPE_AFFINITY", "`" + Affinity + "`"},
	{"SG_ASSEMBLY_KEY", "KXI_ASSEMBLY_KEY", `""`},
	{"SG_ASSEMBLY_NAME", "KXI_ASSEMBLY_NAME", `""`},
	{"SG_MAX_REQUEST_BYTES", "", "262144 (256 KiB)"},
	{"SG_PREFIX", "", "`" + Prefix + "`"},
	{"SG_RC_MAX_QUEUED", "", "100000"},
	{"SG_RC_MAX_QUEUED_PER_CALLER", "", "10000"},
	{"SG_RC_LABEL_SET_RETENTION", "", "`10m`"},
	{"SG_ANSWER_STORE_BUCKET", "", "`<PREFIX>_ANSWERS` (`SG_ANSWERS`)"},
	{"SG_ANSWER_STORE_TTL", "", "`10m`"},
	{"SG_ANSWER_STORE_MAX_BYTES", "", "1073741824 (1 GiB)"},
}
