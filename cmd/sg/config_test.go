package main

import (
	"flag"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/sg-project/sg/messages"
	"github.com/sg-project/sg/services/defaults"
)

func env(kv ...string) lookupFunc {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func TestDefaults(t *testing.T) {
	g, err := loadGWConfig(env())
	if err != nil {
		t.Fatal(err)
	}
	if g.Timeout != 60*time.Second || g.TimeoutMargin != 30*time.Second || g.Affinity != "hard" ||
		g.NATSURL != "nats://127.0.0.1:4222" || g.Prefix != "sg" || g.MaxAnswerBytes != 256<<20 {
		t.Fatalf("GW defaults %+v", g)
	}
	r, err := loadRCConfig(env())
	if err != nil {
		t.Fatal(err)
	}
	if r.MaxRetry != 3 || r.Timer != 10*time.Second || r.MultiRCMaxWait != 1 || r.Assembly != "" {
		t.Fatalf("RC defaults %+v", r)
	}
}

func TestSGAndKXINames(t *testing.T) {
	g, err := loadGWConfig(env("KXI_SG_TIMEOUT", "5000", "KXI_SG_TIMEOUT_MARGIN", "250", "KXI_SCOPE_AFFINITY", "soft"))
	if err != nil {
		t.Fatal(err)
	}
	if g.Timeout != 5*time.Second || g.TimeoutMargin != 250*time.Millisecond || g.Affinity != "soft" {
		t.Fatalf("KXI names: %+v", g)
	}
	// SG_ wins over KXI_; SG_ takes Go durations or milliseconds.
	g, err = loadGWConfig(env("SG_TIMEOUT", "1m30s", "KXI_SG_TIMEOUT", "5000", "SG_TIMEOUT_MARGIN", "1500",
		"SG_SCOPE_AFFINITY", "HARD", "SG_NATS_URL", "nats://n:4222"))
	if err != nil {
		t.Fatal(err)
	}
	if g.Timeout != 90*time.Second || g.TimeoutMargin != 1500*time.Millisecond || g.Affinity != "hard" || g.NATSURL != "nats://n:4222" {
		t.Fatalf("SG names: %+v", g)
	}
	r, err := loadRCConfig(env("KXI_SG_MAX_RETRY", "0", "KXI_SG_RC_TIMER", "2000", "KXI_SG_MULTI_RC_TO_MAX_WAIT", "4", "KXI_ASSEMBLY_NAME", "eu"))
	if err != nil {
		t.Fatal(err)
	}
	if r.MaxRetry != 0 || r.Timer != 2*time.Second || r.MultiRCMaxWait != 4 || r.Assembly != "eu" {
		t.Fatalf("RC KXI names: %+v", r)
	}
	r, err = loadRCConfig(env("SG_MAX_RETRY", "5", "KXI_SG_MAX_RETRY", "1", "SG_RC_TIMER", "250ms", "SG_ASSEMBLY_NAME", "us", "KXI_ASSEMBLY_NAME", "eu"))
	if err != nil {
		t.Fatal(err)
	}
	if r.MaxRetry != 5 || r.Timer != 250*time.Millisecond || r.Assembly != "us" {
		t.Fatalf("RC SG names: %+v", r)
	}
	if d, err := loadDAPConfig(env("KXI_ASSEMBLY_NAME", "asia")); err != nil || d.Assembly != "asia" {
		t.Fatalf("DAP assembly %q", d.Assembly)
	}
}

func TestBadValues(t *testing.T) {
	for _, tc := range []struct {
		env  lookupFunc
		want string
	}{
		{env("SG_TIMEOUT", "soon"), "SG_TIMEOUT"},
		{env("SG_TIMEOUT", "-5s"), "SG_TIMEOUT"},
		{env("SG_TIMEOUT", "0"), "SG_TIMEOUT"},
		{env("KXI_SG_TIMEOUT", "60s"), "KXI_SG_TIMEOUT=\"60s\": want milliseconds"},
		{env("KXI_SG_TIMEOUT_MARGIN", "x"), "KXI_SG_TIMEOUT_MARGIN"},
		{env("SG_SCOPE_AFFINITY", "medium"), "SG_SCOPE_AFFINITY: scope affinity \"medium\""},
		{env("KXI_SCOPE_AFFINITY", "medium"), "KXI_SCOPE_AFFINITY"},
	} {
		if _, err := loadGWConfig(tc.env); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("got %v, want an error containing %q", err, tc.want)
		}
	}
	for _, tc := range []struct {
		env  lookupFunc
		want string
	}{
		{env("SG_MAX_RETRY", "-1"), "SG_MAX_RETRY=\"-1\": want an integer >= 0"},
		{env("KXI_SG_MAX_RETRY", "three"), "KXI_SG_MAX_RETRY"},
		{env("SG_MULTI_RC_TO_MAX_WAIT", "0"), "SG_MULTI_RC_TO_MAX_WAIT"},
		{env("KXI_SG_RC_TIMER", "10s"), "KXI_SG_RC_TIMER"},
	} {
		if _, err := loadRCConfig(tc.env); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("got %v, want an error containing %q", err, tc.want)
		}
	}
}

func TestMaskURL(t *testing.T) {
	got := maskURL("nats://u:secret@h:4222,nats://tok@h2:4222,nats://h3:4222")
	if strings.Contains(got, "secret") || strings.Contains(got, "tok@") || !strings.Contains(got, "h3:4222") {
		t.Fatalf("maskURL: %s", got)
	}
}

func TestParseRangeAndLabels(t *testing.T) {
	if _, err := parseRange("2024-01-02T00:00:00Z,2024-01-01T00:00:00Z", messagesUnbounded()); err == nil {
		t.Error("reversed range accepted")
	}
	r, err := parseRange("2024-01-01T00:00:00Z,-", messagesUnbounded())
	if err != nil || r.Start != time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano() || r.End != messagesUnbounded().End {
		t.Errorf("open range: %v %v", r, err)
	}
	if _, err := parseLabels("region"); err == nil {
		t.Error("label without value accepted")
	}
}

func messagesUnbounded() messages.TimeRange { return messages.Unbounded }

// SG_LOG_LEVEL is the default of every service's --log-level (the flag
// wins), as test/e2e_memory_test.go sets it for the services it starts; a bad
// value is an error naming the setting, from every service's configuration.
func TestLogLevelFromEnvironment(t *testing.T) {
	loaders := map[string]func(lookupFunc) (Common, error){
		"gw":     func(l lookupFunc) (Common, error) { c, err := loadGWConfig(l); return c.Common, err },
		"rc":     func(l lookupFunc) (Common, error) { c, err := loadRCConfig(l); return c.Common, err },
		"agg":    func(l lookupFunc) (Common, error) { c, err := loadAggConfig(l); return c.Common, err },
		"dap":    func(l lookupFunc) (Common, error) { c, err := loadDAPConfig(l); return c.Common, err },
		"common": loadCommon,
	}
	for name, load := range loaders {
		if c, err := load(env()); err != nil || c.LogLevel != defaults.LogLevel {
			t.Errorf("%s: log level %q, %v without SG_LOG_LEVEL, want %q", name, c.LogLevel, err, defaults.LogLevel)
		}
		if c, err := load(env("SG_LOG_LEVEL", " WARN ")); err != nil || c.LogLevel != "WARN" {
			t.Errorf("%s: log level %q, %v with SG_LOG_LEVEL=WARN", name, c.LogLevel, err)
		}
		for _, bad := range []string{"loud", "fatal", "disabled", "2", "-1"} {
			if _, err := load(env("SG_LOG_LEVEL", bad)); err == nil || !strings.Contains(err.Error(), `SG_LOG_LEVEL="`+bad+`": want trace, debug, info, warn or error`) {
				t.Errorf("%s: SG_LOG_LEVEL=%s gave %v, want an error naming the setting", name, bad, err)
			}
		}
	}
	// The flag's default is the environment's; the flag wins.
	c, err := loadCommon(env("SG_LOG_LEVEL", "debug"))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{{nil, "debug"}, {[]string{"--log-level", "error"}, "error"}} {
		c := c
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		addCommonFlags(fs, &c)
		if err := fs.Parse(tc.args); err != nil {
			t.Fatal(err)
		}
		if c.LogLevel != tc.want {
			t.Errorf("args %q: log level %q, want %q", tc.args, c.LogLevel, tc.want)
		}
		log, closeLog, err := newLogger(io.Discard, c.LogLevel)
		if err != nil || log.GetLevel().String() != tc.want {
			t.Errorf("args %q: logger at %v, %v", tc.args, log.GetLevel(), err)
		}
		closeLog()
	}
	if _, _, err := newLogger(io.Discard, "loud"); err == nil || !strings.Contains(err.Error(), `log level "loud"`) {
		t.Errorf("--log-level loud gave %v", err)
	}
}
