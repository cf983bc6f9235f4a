package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/sg-project/sg/services/defaults"
	"github.com/sg-project/sg/services/gw"
	"github.com/sg-project/sg/services/rc"
)

// Durability settings of the JetStream streams the GW (request log) and the
// RC (DAP state) create, and of the bundled NATS server. README.md
// (Deployment, durability and recovery) says what each choice guarantees.
var (
	envJetStream     = envVar{"SG_JETSTREAM", ""}           // on | off: request log and DAP state stream
	envJSReplicas    = envVar{"SG_JS_REPLICAS", ""}         // stream replicas (3 on a NATS cluster)
	envJSStorage     = envVar{"SG_JS_STORAGE", ""}          // file | memory
	envRequestLogTTL = envVar{"SG_REQUEST_LOG_MAX_AGE", ""} // request log retention; a request's timeout plus the margin must be below it
	// How long a request runs before its log entry is written (0: with its first drive).
	envRequestLogCreateAfter = envVar{"SG_REQUEST_LOG_CREATE_AFTER", ""}
	envNATSSyncPeriod        = envVar{"SG_NATS_SYNC_INTERVAL", ""} // sg nats / sg run: fsync period of JetStream files

	// The GW's answer store (README, Large answers).
	envAnswerStoreBucket   = envVar{"SG_ANSWER_STORE_BUCKET", ""}    // object store bucket ("" = <PREFIX>_ANSWERS)
	envAnswerStoreTTL      = envVar{"SG_ANSWER_STORE_TTL", ""}       // how long a stored answer can be fetched
	envAnswerStoreMaxBytes = envVar{"SG_ANSWER_STORE_MAX_BYTES", ""} // the bucket's size cap
)

// natsSyncInterval is what startNATSServer uses; `sg nats --sync-interval`
// and SG_NATS_SYNC_INTERVAL change it (defaults.NATSSyncInterval: what a
// power loss can lose).
var natsSyncInterval = defaults.NATSSyncInterval

// DurabilityConfig is shared by `sg gw` and `sg rc`.
type DurabilityConfig struct {
	JetStream     bool          // SG_JETSTREAM
	Replicas      int           // SG_JS_REPLICAS
	Storage       string        // SG_JS_STORAGE: file or memory
	RequestLogTTL time.Duration // SG_REQUEST_LOG_MAX_AGE (GW)
	// RequestLogCreateAfter: SG_REQUEST_LOG_CREATE_AFTER (GW); by default
	// 0: each request's entry written with its first drive.
	RequestLogCreateAfter time.Duration

	AnswerStoreBucket   string        // SG_ANSWER_STORE_BUCKET (GW), default defaults.AnswerStoreBucket
	AnswerStoreTTL      time.Duration // SG_ANSWER_STORE_TTL (GW), default defaults.AnswerStoreTTL
	AnswerStoreMaxBytes int           // SG_ANSWER_STORE_MAX_BYTES (GW), default defaults.AnswerStoreMaxBytes
}

func loadDurability(look lookupFunc) (DurabilityConfig, error) {
	c := DurabilityConfig{JetStream: defaults.JetStream, Replicas: defaults.JSReplicas, Storage: defaults.JSStorage,
		RequestLogTTL: defaults.RequestLogMaxAge, RequestLogCreateAfter: defaults.RequestLogCreateAfter,
		AnswerStoreBucket: defaults.AnswerStoreBucket, AnswerStoreTTL: defaults.AnswerStoreTTL, AnswerStoreMaxBytes: defaults.AnswerStoreMaxBytes}
	switch v := strings.ToLower(envString(look, envJetStream, "")); v {
	case "": // unset: defaults.JetStream
	case "on", "true", "1", "yes":
		c.JetStream = true
	case "off", "false", "0", "no":
		c.JetStream = false
	default:
		return c, fmt.Errorf("SG_JETSTREAM=%q: want on or off", v)
	}
	var err error
	if c.Replicas, err = envInt(look, envJSReplicas, defaults.JSReplicas, 1); err != nil {
		return c, err
	}
	if c.Replicas > 5 {
		return c, fmt.Errorf("SG_JS_REPLICAS=%d: JetStream allows at most 5", c.Replicas)
	}
	c.Storage = strings.ToLower(envString(look, envJSStorage, defaults.JSStorage))
	if c.Storage != "file" && c.Storage != "memory" {
		return c, fmt.Errorf("SG_JS_STORAGE=%q: want file or memory", c.Storage)
	}
	if c.RequestLogTTL, err = envDuration(look, envRequestLogTTL, defaults.RequestLogMaxAge); err != nil {
		return c, err
	}
	if c.RequestLogCreateAfter, err = envDurationFrom(look, envRequestLogCreateAfter, defaults.RequestLogCreateAfter, true); err != nil {
		return c, err
	}
	c.AnswerStoreBucket = envString(look, envAnswerStoreBucket, defaults.AnswerStoreBucket)
	if c.AnswerStoreTTL, err = envDuration(look, envAnswerStoreTTL, defaults.AnswerStoreTTL); err != nil {
		return c, err
	}
	if c.AnswerStoreMaxBytes, err = envInt(look, envAnswerStoreMaxBytes, defaults.AnswerStoreMaxBytes, 1); err != nil {
		return c, err
	}
	return c, nil
}

func (c DurabilityConfig) check() error {
	if c.Replicas < 1 || c.Replicas > 5 {
		return fmt.Errorf("replicas %d: want 1..5", c.Replicas)
	}
	if c.Storage != "file" && c.Storage != "memory" {
		return fmt.Errorf("storage %q: want file or memory", c.Storage)
	}
	return nil
}

func (c DurabilityConfig) gw() *gw.Durability {
	if !c.JetStream {
		return nil
	}
	return &gw.Durability{Replicas: c.Replicas, Memory: c.Storage == "memory", MaxAge: c.RequestLogTTL, CreateAfter: c.RequestLogCreateAfter}
}

// answerStore is the GW's answer store; nil without JetStream (a caller that
// does not reassemble chunks is then told the other ways only).
func (c DurabilityConfig) answerStore() *gw.AnswerStore {
	if !c.JetStream {
		return nil
	}
	return &gw.AnswerStore{Bucket: c.AnswerStoreBucket, TTL: c.AnswerStoreTTL, MaxBytes: int64(c.AnswerStoreMaxBytes),
		Replicas: c.Replicas, Memory: c.Storage == "memory"}
}

func (c DurabilityConfig) rc() *rc.Durability {
	if !c.JetStream {
		return nil
	}
	return &rc.Durability{Replicas: c.Replicas, Memory: c.Storage == "memory"}
}

func addDurabilityFlags(fs interface {
	BoolVar(*bool, string, bool, string)
	IntVar(*int, string, int, string)
	StringVar(*string, string, string, string)
}, c *DurabilityConfig) {
	fs.BoolVar(&c.JetStream, "jetstream", c.JetStream, "use JetStream for recovery: GW request log, RC DAP state (env SG_JETSTREAM)")
	fs.IntVar(&c.Replicas, "js-replicas", c.Replicas, "replicas of sg's streams: 1 on one NATS server, 3 on a cluster (env SG_JS_REPLICAS)")
	fs.StringVar(&c.Storage, "js-storage", c.Storage, "file or memory (env SG_JS_STORAGE)")
}
