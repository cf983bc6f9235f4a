package gw

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"github.com/sg-project/sg/services/defaults"
	"github.com/sg-project/sg/services/gw/core"
	"github.com/sg-project/sg/subjects"
)

// Scope affinity (seed: KXI_SCOPE_AFFINITY).
const (
	// AffinityHard: a scoped request with no RC of its assembly fails with
	// "No resources connected".
	AffinityHard = core.AffinityHard
	// AffinitySoft: such a request goes to a global RC instead.
	AffinitySoft = core.AffinitySoft
)

// Texts of the GW's own answers that clients may match on.
const (
	// TextNoResources is the seed's text when no RC can take a request.
	TextNoResources = core.TextNoResources
	// TextTimeout is the seed's text of a timeout issued by the GW.
	TextTimeout = core.TextTimeout
)

// Defaults of Config fields left zero.
const (
	DefaultTimeout        = defaults.Timeout       // SG_TIMEOUT
	DefaultTimeoutMargin  = defaults.TimeoutMargin // SG_TIMEOUT_MARGIN
	DefaultMaxAnswerBytes = defaults.MaxAnswerBytes
	DefaultMaxInFlight    = defaults.GWMaxInFlight
	// EnvMaxHeldBytes names Config.MaxHeldBytes in the
	// environment (README: Configuration).
	EnvMaxHeldBytes = "SG_GW_MAX_HELD_BYTES"
	// DefaultMaxInFlightPerCaller: one caller (a client connection's inbox)
	// may hold this many of the GW's requests open at once.
	DefaultMaxInFlightPerCaller = 256
	// DefaultMaxRequestBytes (SG_MAX_REQUEST_BYTES): well under NATS's
	// default max payload (1 MiB); a request names what to fetch, it is small.
	DefaultMaxRequestBytes = defaults.MaxRequestBytes
	DefaultStartupWait     = 2 * time.Second
	DefaultAnnounceEvery   = defaults.AnnounceEvery // the RC's default announcement period
	DefaultShutdownGrace   = 5 * time.Second
	// announceMisses: an RC not heard from for this many announce periods is dropped.
	announceMisses = 3
)

// DefaultReplyPrefixes are the inbox prefixes of NATS clients: nats.go's
// "_INBOX." and the "_INBOX_" form of connections with a custom prefix.
var DefaultReplyPrefixes = []string{"_INBOX.", "_INBOX_"}

// Config of a GW. Zero values take the defaults noted per field.
type Config struct {
	ID       string     // GW id, a subject token (required)
	NC       *nats.Conn // connection; the caller owns it and closes it after Run
	Subjects subjects.Subjects
	Log      zerolog.Logger

	Timeout       time.Duration // request timeout when opts.timeout is 0 (default 60 s, SG_TIMEOUT)
	TimeoutMargin time.Duration // wait after the deadline for the RC's own timeout (default 30 s, SG_TIMEOUT_MARGIN)
	Affinity      string        // "hard" (default) or "soft" (SG_SCOPE_AFFINITY)
	// AssemblyKey (SG_ASSEMBLY_KEY, seed KXI_ASSEMBLY_KEY) is the RC label
	// that names its assembly; "" (default): an RC's assembly is the name
	// it announces (SG_ASSEMBLY_NAME).
	AssemblyKey     string
	MaxRequestBytes int   // largest request body accepted, else TOO_LARGE (default 256 KiB, SG_MAX_REQUEST_BYTES)
	MaxAnswerBytes  int64 // largest answer forwarded (default 256 MiB)
	// MaxHeldBytes bounds the answers' bytes this GW holds, all requests
	// together: the chunks it reassembles (answers above the max payload to
	// callers that take no chunks) and those waiting for `answered`; past
	// it the answer ends (core.Config.MaxHeldBytes; default twice the
	// largest answer, 512 MiB, SG_GW_MAX_HELD_BYTES).
	MaxHeldBytes int64

	// Registry receives the GW's metrics; nil: a private registry.
	Registry *prometheus.Registry

	MaxInFlight int // requests handled at once; past it the GW answers RATE_LIMITED (default 4096)
	// MaxInFlightPerCaller: requests one caller may have open at this GW;
	// past it the caller gets RATE_LIMITED (default 256). The caller is the
	// reply subject without its last token: a client connection's inbox.
	MaxInFlightPerCaller int
	// AllowedReplyPrefixes: the GW answers only to reply subjects under one
	// of these (default DefaultReplyPrefixes), and never to an sg or $
	// subject whatever they say; other requests are dropped, logged and
	// counted (sg_gw_requests_refused_reply_total).
	AllowedReplyPrefixes []string
	// StartupWait: how long after start a request waits for an RC of its
	// scope (default 2 s). Until the GW is ready (it knows an RC whose fleet
	// view is warm) a request waits for one up to its deadline instead.
	// Negative: neither wait; "No resources connected" at once.
	StartupWait   time.Duration
	AnnounceEvery time.Duration // expected RC announcement period (default 1 s, the RC's); 3 missed periods drop an RC
	ShutdownGrace time.Duration // on stop, how long in-flight requests may still finish (default 5 s)
	Version       string        // micro service version (default "0.1.0")

	// RequestLog, when set, logs every accepted request in JetStream before
	// it goes to an RC and closes the entry when it is answered; the open
	// requests of a GW that stops or dies are adopted by a peer GW (or its
	// next incarnation). Nil: no log; requests in flight die with the GW.
	RequestLog *Durability
	// DeadAfter: an RC silent this long is dead and the requests it holds are
	// driven again; a GW silent this long has its open requests adopted
	// (default 10 announcement periods, at least 3 s). After three silent
	// periods an RC only stops getting new requests: a busy process that
	// misses a few announcements must not have its work duplicated. A
	// restart (new start time) or a stop is acted on at once.
	DeadAfter time.Duration
	// Jobs, when set, serves async requests (opts.async) from a job store
	// in JetStream (jobs.go); nil: opts.async is answered NOT_SUPPORTED.
	Jobs *Jobs
	// AnswerStore, when set, is where an answer above the max payload is
	// written for a caller that does not reassemble chunks; its TOO_LARGE
	// error names the bucket and key (answerstore.go). Nil: the error names
	// only the other ways to get the answer.
	AnswerStore *AnswerStore
	// SweepEvery: how often the whole request log is examined for orphans
	// beyond the ones found through GW heartbeats (default 30 s).
	SweepEvery time.Duration
}

func (c Config) withDefaults() (Config, error) {
	if c.NC == nil {
		return c, errors.New("gw: Config.NC is nil")
	}
	if err := subjects.Validate("GW id", c.ID); err != nil {
		return c, fmt.Errorf("gw: %w", err)
	}
	if c.Subjects.Prefix() == "" {
		c.Subjects = subjects.Default()
	}
	if c.Timeout <= 0 {
		c.Timeout = DefaultTimeout
	}
	if c.TimeoutMargin < 0 {
		return c, fmt.Errorf("gw: TimeoutMargin %s is negative", c.TimeoutMargin)
	}
	if c.TimeoutMargin == 0 {
		c.TimeoutMargin = DefaultTimeoutMargin
	}
	switch c.Affinity {
	case "":
		c.Affinity = AffinityHard
	case AffinityHard, AffinitySoft:
	default:
		return c, fmt.Errorf("gw: affinity %q: want %q or %q", c.Affinity, AffinityHard, AffinitySoft)
	}
	if c.MaxRequestBytes <= 0 {
		c.MaxRequestBytes = DefaultMaxRequestBytes
	}
	if c.MaxInFlightPerCaller <= 0 {
		c.MaxInFlightPerCaller = DefaultMaxInFlightPerCaller
	}
	if len(c.AllowedReplyPrefixes) == 0 {
		c.AllowedReplyPrefixes = DefaultReplyPrefixes
	}
	for _, p := range c.AllowedReplyPrefixes {
		if p == "" || strings.HasPrefix(p, "$") || strings.HasPrefix(p, c.Subjects.Prefix()+".") {
			return c, fmt.Errorf("gw: allowed reply prefix %q: must be non-empty and not an sg or $ subject", p)
		}
	}
	if c.MaxAnswerBytes <= 0 {
		c.MaxAnswerBytes = DefaultMaxAnswerBytes
	}
	if c.MaxInFlight <= 0 {
		c.MaxInFlight = DefaultMaxInFlight
	}
	if c.MaxHeldBytes <= 0 {
		c.MaxHeldBytes = defaults.GWHeldAnswers * c.MaxAnswerBytes
	}
	if c.StartupWait == 0 {
		c.StartupWait = DefaultStartupWait
	}
	if c.AnnounceEvery <= 0 {
		c.AnnounceEvery = DefaultAnnounceEvery
	}
	if c.ShutdownGrace <= 0 {
		c.ShutdownGrace = DefaultShutdownGrace
	}
	if c.DeadAfter <= 0 {
		c.DeadAfter = max(defaults.DeadAnnouncements*c.AnnounceEvery, defaults.DeadAfterLeast)
	}
	if c.SweepEvery <= 0 {
		c.SweepEvery = 30 * time.Second
	}
	if c.RequestLog != nil {
		d := *c.RequestLog
		if d.MaxAge <= 0 {
			d.MaxAge = defaults.RequestLogMaxAge
		}
		if d.CreateAfter < 0 {
			return c, fmt.Errorf("gw: request log CreateAfter %v: want 0 (with the first drive) or more", d.CreateAfter)
		}
		c.RequestLog = &d
	}
	if c.Version == "" {
		c.Version = "0.1.0"
	}
	return c, nil
}
