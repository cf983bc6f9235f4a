package main

// Configuration: one struct per service, defaults next to the fields. Each
// value comes from, in order of precedence: a flag, an SG_ environment
// variable, the seed's KXI_ variable, the default. SG_ durations are Go
// durations ("60s", "1m30s") or plain milliseconds; KXI_ durations are
// milliseconds, as in the seed.

import (
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/sg-project/sg/services/defaults"
	"github.com/sg-project/sg/services/gw"
	"github.com/sg-project/sg/services/limits"
	"github.com/sg-project/sg/services/retryafter"
)

// lookupFunc reads an environment variable (os.LookupEnv in main).
type lookupFunc func(string) (string, bool)

// envVar names one setting in the environment.
type envVar struct {
	SG  string // e.g. SG_TIMEOUT
	KXI string // the seed's name, e.g. KXI_SG_TIMEOUT; "" if none
}

// The environment variables, with the seed's meanings.
var (
	envTimeout         = envVar{"SG_TIMEOUT", "KXI_SG_TIMEOUT"}                           // default request timeout (60 s)
	envMaxRetry        = envVar{"SG_MAX_RETRY", "KXI_SG_MAX_RETRY"}                       // RC: retries per request (3)
	envTimeoutMargin   = envVar{"SG_TIMEOUT_MARGIN", "KXI_SG_TIMEOUT_MARGIN"}             // GW: wait after the deadline for the RC's timeout (30 s)
	envRCTimer         = envVar{"SG_RC_TIMER", "KXI_SG_RC_TIMER"}                         // RC timer period (10 s)
	envMultiRCMaxWait  = envVar{"SG_MULTI_RC_TO_MAX_WAIT", "KXI_SG_MULTI_RC_TO_MAX_WAIT"} // RC timer periods to wait for secondaries (1)
	envAffinity        = envVar{"SG_SCOPE_AFFINITY", "KXI_SCOPE_AFFINITY"}                // GW: hard | soft (hard)
	envAssembly        = envVar{"SG_ASSEMBLY_NAME", "KXI_ASSEMBLY_NAME"}                  // RC/DAP: assembly ("" = global)
	envAssemblyKey     = envVar{"SG_ASSEMBLY_KEY", "KXI_ASSEMBLY_KEY"}                    // GW, RC: the label that names the assembly ("")
	envRCLabels        = envVar{"SG_RC_LABELS", ""}                                       // RC: its labels, k=v,k2=v2
	envNATSURL         = envVar{"SG_NATS_URL", ""}                                        // NATS URL (nats://127.0.0.1:4222)
	envPrefix          = envVar{"SG_PREFIX", ""}                                          // subject prefix (sg)
	envLogLevel        = envVar{"SG_LOG_LEVEL", ""}                                       // log level (info)
	envMaxRequestBytes = envVar{"SG_MAX_REQUEST_BYTES", ""}                               // GW: largest request accepted (256 KiB)
)

// The environment variables of authentication and TLS (README: Security).
var (
	envCreds       = envVar{"SG_NATS_CREDS", ""}        // credential file: nkey seed (sg auth) or .creds
	envInboxPrefix = envVar{"SG_NATS_INBOX_PREFIX", ""} // inbox prefix (default: the credential's)
	envTLSCA       = envVar{"SG_NATS_TLS_CA", ""}       // CA file that signs the server's certificate
	envTLSCert     = envVar{"SG_NATS_TLS_CERT", ""}     // client certificate file (mutual TLS)
	envTLSKey      = envVar{"SG_NATS_TLS_KEY", ""}      // its key file
	envAuthDir     = envVar{"SG_AUTH_DIR", ""}          // sg nats, sg run: credential directory (auth on)
)

// Defaults: the values live in services/defaults; these names keep this
// file readable.
const (
	defaultNATSURL        = defaults.NATSURL
	defaultTimeout        = defaults.Timeout
	defaultTimeoutMargin  = defaults.TimeoutMargin
	defaultMaxRetry       = defaults.MaxRetry
	defaultRCTimer        = defaults.RCTimer
	defaultMultiRCMaxWait = defaults.MultiRCMaxWait
	defaultAffinity       = defaults.Affinity
	defaultMaxAnswerBytes = defaults.MaxAnswerBytes
)

func (v envVar) get(look lookupFunc) (name, val string, ok bool) {
	if s, ok := look(v.SG); ok && strings.TrimSpace(s) != "" {
		return v.SG, strings.TrimSpace(s), true
	}
	if v.KXI != "" {
		if s, ok := look(v.KXI); ok && strings.TrimSpace(s) != "" {
			return v.KXI, strings.TrimSpace(s), true
		}
	}
	return "", "", false
}

func envString(look lookupFunc, v envVar, def string) string {
	if _, s, ok := v.get(look); ok {
		return s
	}
	return def
}

// envDuration reads a positive duration: a Go duration or milliseconds.
func envDuration(look lookupFunc, v envVar, def time.Duration) (time.Duration, error) {
	return envDurationFrom(look, v, def, false)
}

// envDurationFrom is envDuration, and takes 0 too when zero is a value
// (defaults.ParseDuration: the one parser of duration settings).
func envDurationFrom(look lookupFunc, v envVar, def time.Duration, zero bool) (time.Duration, error) {
	name, s, ok := v.get(look)
	if !ok {
		return def, nil
	}
	return defaults.ParseDuration(name, s, zero)
}

func envInt(look lookupFunc, v envVar, def, least int) (int, error) {
	name, s, ok := v.get(look)
	if !ok {
		return def, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < least {
		return 0, fmt.Errorf("%s=%q: want an integer >= %d", name, s, least)
	}
	return n, nil
}

func checkAffinity(s string) error {
	if s != gw.AffinityHard && s != gw.AffinitySoft {
		return fmt.Errorf("scope affinity %q: want %q or %q", s, gw.AffinityHard, gw.AffinitySoft)
	}
	return nil
}

// Common is what every service that connects to NATS needs.
type Common struct {
	NATSURL  string // SG_NATS_URL, default nats://127.0.0.1:4222
	Prefix   string // SG_PREFIX, default "sg"
	LogLevel string // SG_LOG_LEVEL, default info
	// Creds is the credential file (SG_NATS_CREDS): an nkey seed file made
	// by sg auth, or a NATS .creds file; "" connects without credentials.
	// The path is printed, never the content.
	Creds string
	// InboxPrefix (SG_NATS_INBOX_PREFIX) overrides the inbox prefix written
	// in the credential; a client credential may receive only on its own.
	InboxPrefix string
	TLSCA       string // SG_NATS_TLS_CA: verify the server with this CA (TLS on)
	TLSCert     string // SG_NATS_TLS_CERT: client certificate, for servers that verify clients
	TLSKey      string // SG_NATS_TLS_KEY: its private key
}

func loadCommon(look lookupFunc) (Common, error) {
	c := Common{
		NATSURL:     envString(look, envNATSURL, defaultNATSURL),
		Prefix:      envString(look, envPrefix, defaults.Prefix),
		LogLevel:    defaults.LogLevel,
		Creds:       envString(look, envCreds, ""),
		InboxPrefix: envString(look, envInboxPrefix, ""),
		TLSCA:       envString(look, envTLSCA, ""),
		TLSCert:     envString(look, envTLSCert, ""),
		TLSKey:      envString(look, envTLSKey, ""),
	}
	if name, s, ok := envLogLevel.get(look); ok {
		if _, err := parseLogLevel(s); err != nil {
			return c, fmt.Errorf("%s=%q: %w", name, s, err)
		}
		c.LogLevel = s
	}
	return c, nil
}

// GWConfig configures `sg gw`.
type GWConfig struct {
	Common
	ID             string        // default gw-<host-ish nuid>
	Timeout        time.Duration // SG_TIMEOUT, default 60 s
	TimeoutMargin  time.Duration // SG_TIMEOUT_MARGIN, default 30 s
	Affinity       string        // SG_SCOPE_AFFINITY, default hard
	MaxAnswerBytes int64         // default 256 MiB
	MetricsListen  string        // host:port for /metrics; "" = none
	Durability     DurabilityConfig
	// MaxRequestBytes: SG_MAX_REQUEST_BYTES, default gw.DefaultMaxRequestBytes.
	MaxRequestBytes int
	AssemblyKey     string // SG_ASSEMBLY_KEY: the RC label that names its assembly
	// MaxHeldBytes: SG_GW_MAX_HELD_BYTES; 0 (unset): twice the largest
	// answer (gw.Config).
	MaxHeldBytes int64
}

func loadGWConfig(look lookupFunc) (GWConfig, error) {
	c := GWConfig{ID: "gw-1", MaxAnswerBytes: defaultMaxAnswerBytes,
		AssemblyKey: envString(look, envAssemblyKey, defaults.AssemblyKey)}
	var err error
	if c.Common, err = loadCommon(look); err != nil {
		return c, err
	}
	if c.Durability, err = loadDurability(look); err != nil {
		return c, err
	}
	if c.Timeout, err = envDuration(look, envTimeout, defaultTimeout); err != nil {
		return c, err
	}
	if c.TimeoutMargin, err = envDuration(look, envTimeoutMargin, defaultTimeoutMargin); err != nil {
		return c, err
	}
	if c.MaxRequestBytes, err = envInt(look, envMaxRequestBytes, gw.DefaultMaxRequestBytes, 1); err != nil {
		return c, err
	}
	if c.MaxHeldBytes, err = limits.Int(look, gw.EnvMaxHeldBytes, 0); err != nil {
		return c, err
	}
	c.Affinity = strings.ToLower(envString(look, envAffinity, defaultAffinity))
	if err := checkAffinity(c.Affinity); err != nil {
		name, _, _ := envAffinity.get(look)
		return c, fmt.Errorf("%s: %w", name, err)
	}
	return c, nil
}

// RCConfig configures `sg rc`.
type RCConfig struct {
	Common
	ID             string
	Addr           string        // shown in timeout messages; default ID
	Assembly       string        // SG_ASSEMBLY_NAME, default "" (a global RC)
	AssemblyKey    string        // SG_ASSEMBLY_KEY: with it, the assembly is the value of this label
	Labels         string        // SG_RC_LABELS: k=v,k2=v2
	MaxRetry       int           // SG_MAX_RETRY, default 3
	Timer          time.Duration // SG_RC_TIMER, default 10 s
	MultiRCMaxWait int           // SG_MULTI_RC_TO_MAX_WAIT, default 1
	AggIDs         []string      // default agg-1
	MetricsListen  string
	Durability     DurabilityConfig
	// RetryAfter of the RC's refusals; nil: SG_RETRY_* (sg run passes its flags).
	RetryAfter *retryafter.Config `json:"-"`
}

func loadRCConfig(look lookupFunc) (RCConfig, error) {
	c := RCConfig{ID: "rc-1", AggIDs: []string{"agg-1"},
		Assembly: envString(look, envAssembly, defaults.AssemblyName), AssemblyKey: envString(look, envAssemblyKey, defaults.AssemblyKey),
		Labels: envString(look, envRCLabels, "")}
	var err error
	if c.Common, err = loadCommon(look); err != nil {
		return c, err
	}
	if c.Durability, err = loadDurability(look); err != nil {
		return c, err
	}
	if c.MaxRetry, err = envInt(look, envMaxRetry, defaultMaxRetry, 0); err != nil {
		return c, err
	}
	if c.Timer, err = envDuration(look, envRCTimer, defaultRCTimer); err != nil {
		return c, err
	}
	if c.MultiRCMaxWait, err = envInt(look, envMultiRCMaxWait, defaultMultiRCMaxWait, 1); err != nil {
		return c, err
	}
	return c, nil
}

// AggConfig configures `sg agg`.
type AggConfig struct {
	Common
	ID             string // default agg-1
	MaxAnswerBytes int64  // default 256 MiB
}

func loadAggConfig(look lookupFunc) (AggConfig, error) {
	common, err := loadCommon(look)
	return AggConfig{Common: common, ID: "agg-1", MaxAnswerBytes: defaultMaxAnswerBytes}, err
}

// DAPConfig configures `sg dap`.
type DAPConfig struct {
	Common
	Demo        bool   // run the whole demo fleet
	ID          string // default dap-1
	RCID        string // owning RC; "" = any
	Assembly    string // SG_ASSEMBLY_NAME
	Labels      string // k=v,k2=v2 (default region=eu)
	Tier        string // rdb | idb | hdb (default hdb)
	Purview     string // start,end RFC 3339; "" = unbounded
	Data        string // start,end of the generated data (default: the 3 days ending now)
	Tables      string // comma list (default trade,quote,instrument)
	Seed        uint64
	Replicas    int // demo: DAPs per region and tier (default 1)
	Concurrency int // default 4
}

func loadDAPConfig(look lookupFunc) (DAPConfig, error) {
	common, err := loadCommon(look)
	return DAPConfig{Common: common, ID: "dap-1", Assembly: envString(look, envAssembly, ""),
		Labels: "region=eu", Tier: "hdb", Tables: "trade,quote,instrument", Replicas: 1, Concurrency: 4}, err
}

// maskURL hides a password in a NATS URL before it is printed.
func maskURL(s string) string {
	var out []string
	for _, part := range strings.Split(s, ",") {
		u, err := url.Parse(part)
		if err != nil || u.User == nil {
			out = append(out, part)
			continue
		}
		if _, has := u.User.Password(); has {
			u.User = url.UserPassword(u.User.Username(), "xxxxx")
		} else {
			u.User = url.User("xxxxx") // a token
		}
		out = append(out, u.String())
	}
	return strings.Join(out, ",")
}
