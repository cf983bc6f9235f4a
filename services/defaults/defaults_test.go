package defaults

import (
	"fmt"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// readmeSettings reads README's Configuration table: each setting's cells
// (name, KXI name, default), a row that names several split into one per
// name. A row's default that lists as many values as it has names gives
// each its own ("64 MiB, 256 MiB"); otherwise they share it ("none").
func readmeSettings(t *testing.T) (settings map[string][2]string, order []string) {
	t.Helper()
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(b), "\n## Configuration\n")
	if !ok {
		t.Fatal("README has no Configuration section")
	}
	section, _, _ = strings.Cut(section, "\n## ")
	settings = map[string][2]string{}
	for _, line := range strings.Split(section, "\n") {
		if !strings.HasPrefix(line, "| `") {
			continue
		}
		cells := strings.Split(line, "|")
		if len(cells) < 5 {
			t.Errorf("README Configuration row with %d cells: %s", len(cells), line)
			continue
		}
		for i := range cells {
			cells[i] = strings.TrimSpace(cells[i])
		}
		names := strings.Split(cells[1], ", ")
		defs := strings.Split(cells[3], ", ")
		if len(defs) != len(names) {
			defs = []string{cells[3]}
		}
		for i, n := range names {
			d := defs[0]
			if len(defs) == len(names) {
				d = defs[i]
			}
			n = strings.Trim(n, "`")
			if _, dup := settings[n]; dup {
				t.Errorf("README's Configuration table names %s twice", n)
			}
			settings[n] = [2]string{strings.Trim(cells[2], "`"), d}
			order = append(order, n)
		}
	}
	return settings, order
}

// TestREADMETable: README's Configuration table and Table list the same
// settings with the same defaults, so the docs cannot drift from the code.
func TestREADMETable(t *testing.T) {
	rows, order := readmeSettings(t)
	inTable := map[string]bool{}
	for _, s := range Table {
		inTable[s.Env] = true
		r, ok := rows[s.Env]
		if !ok {
			t.Errorf("README's Configuration table has no row for %s", s.Env)
			continue
		}
		if r[0] != s.KXI {
			t.Errorf("%s: README names %q beside it, want %q", s.Env, r[0], s.KXI)
		}
		if r[1] != s.Default {
			t.Errorf("%s: README's default is %q, the code's %q", s.Env, r[1], s.Default)
		}
	}
	for _, n := range order {
		if !inTable[n] {
			t.Errorf("README's Configuration table has %s, which defaults.Table lacks", n)
		}
	}
	if len(order) < len(Table) {
		t.Errorf("README's Configuration table has %d settings, defaults.Table %d", len(order), len(Table))
	}
}

// TestTableMatchesConstants: the table's texts are the constants'.
func TestTableMatchesConstants(t *testing.T) {
	secs := func(d time.Duration) string { return fmt.Sprintf("%d s", int(d/time.Second)) }
	// dur: a duration as README writes it, its unit the largest that is whole.
	dur := func(d time.Duration) string {
		for _, u := range []struct {
			d time.Duration
			s string
		}{{time.Hour, "h"}, {time.Minute, "m"}, {time.Second, "s"}, {time.Millisecond, "ms"}} {
			if d >= u.d && d%u.d == 0 {
				return fmt.Sprintf("`%d%s`", d/u.d, u.s)
			}
		}
		return "`" + d.String() + "`"
	}
	mib := func(n int) string { return fmt.Sprintf("%d MiB", n>>20) }
	want := map[string]string{
		"SG_TIMEOUT": secs(Timeout), "SG_TIMEOUT_MARGIN": secs(TimeoutMargin), "SG_RC_TIMER": secs(RCTimer),
		"SG_MAX_RETRY": fmt.Sprint(MaxRetry), "SG_MULTI_RC_TO_MAX_WAIT": fmt.Sprint(MultiRCMaxWait),
		"SG_MAX_REQUEST_BYTES":        fmt.Sprintf("%d (%d KiB)", MaxRequestBytes, MaxRequestBytes>>10),
		"SG_RC_MAX_QUEUED":            fmt.Sprint(RCMaxQueued),
		"SG_RC_MAX_QUEUED_PER_CALLER": fmt.Sprint(RCMaxQueuedPerCaller),
		"SG_ANSWER_STORE_TTL":         dur(AnswerStoreTTL),
		"SG_RC_LABEL_SET_RETENTION":   dur(LabelSetRetention),
		"SG_ANSWER_STORE_MAX_BYTES":   fmt.Sprintf("%d (%d GiB)", AnswerStoreMaxBytes, AnswerStoreMaxBytes>>30),
		"SG_HTTP_CHUNK_IDLE":          dur(HTTPChunkIdle),
		"SG_HTTP_MAX_BACKLOG_BYTES":   mib(HTTPMaxBacklogBytes),
		"SG_HTTP_MAX_BACKLOG_TOTAL":   mib(HTTPMaxBacklogTotal),
		"SG_JETSTREAM":                map[bool]string{true: "`on`", false: "`off`"}[JetStream],
		"SG_JS_STORAGE":               "`" + JSStorage + "`",
		"SG_NATS_URL":                 "`" + NATSURL + "`",
		"SG_PREFIX":                   "`" + Prefix + "`",
		"SG_LOG_LEVEL":                "`" + LogLevel + "`",
		"SG_SCOPE_AFFINITY":           "`" + Affinity + "`",
		"SG_JS_REPLICAS":              fmt.Sprintf("`%d`", JSReplicas),
		"SG_REQUEST_LOG_MAX_AGE":      dur(RequestLogMaxAge),
		"SG_REQUEST_LOG_CREATE_AFTER": fmt.Sprintf("`%d`", RequestLogCreateAfter),
		"SG_NATS_SYNC_INTERVAL":       dur(NATSSyncInterval),
		"SG_DAP_MAX_QUEUE":            fmt.Sprint(DAPMaxQueue),
		"SG_AGG_MAX_REQUEST_BYTES":    fmt.Sprintf("the largest answer (%s)", mib(MaxAnswerBytes)),
		"SG_GW_MAX_HELD_BYTES":        fmt.Sprintf("%d largest answers (%s)", GWHeldAnswers, mib(GWHeldAnswers*MaxAnswerBytes)),
		"SG_AGG_MAX_BYTES":            fmt.Sprintf("%d GiB", AggMaxHeldBytes>>30),
		"SG_JOB_RETENTION":            dur(JobRetention),
		"SG_GW_MAX_JOBS":              fmt.Sprint(GWMaxJobs),
		"SG_RETRY_MIN":                dur(RetryMin),
		"SG_RETRY_MAX":                fmt.Sprintf("`%ds`", RetryMax/time.Second), // the seed's max_seconds
		"SG_RETRY_SAFETY_MARGIN":      fmt.Sprint(RetrySafetyMargin),
		"SG_RETRY_NOMINAL_EXEC":       dur(RetryNominalExec),
		"SG_RETRY_NOMINAL_AGG":        dur(RetryNominalAgg),
	}
	seen := map[string]bool{}
	for _, s := range Table {
		seen[s.Env] = true
		if w, ok := want[s.Env]; ok && w != s.Default {
			t.Errorf("%s: table says %q, constant %q", s.Env, s.Default, w)
		}
		if s.Help == "" {
			t.Errorf("%s: no help line", s.Env)
		}
	}
	for env := range want {
		if !seen[env] {
			t.Errorf("%s: a constant's text for a setting Table lacks", env)
		}
	}
}

// TestEverySettingInTable: every SG_ or KXI_ name the code reads (a string
// literal outside tests) is in Table, so none has its default elsewhere and
// is missing from README and sg --help.
func TestEverySettingInTable(t *testing.T) {
	known := map[string]bool{}
	for _, s := range Table {
		known[s.Env] = true
		if s.KXI != "" {
			known[s.KXI] = true
		}
	}
	name := regexp.MustCompile(`"((?:SG|KXI)_[A-Z0-9_]+)"`)
	found := 0
	err := filepath.WalkDir("../..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && strings.HasPrefix(d.Name(), ".") && path != "../.." {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range name.FindAllSubmatch(b, -1) {
			found++
			if !known[string(m[1])] {
				t.Errorf("%s reads %s, which defaults.Table lacks", path, m[1])
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if found < len(Table) {
		t.Errorf("found %d setting names in the code, fewer than Table's %d: is the walk reading the module?", found, len(Table))
	}
}

// TestImportsNothingOfSg: messages (and anything else) may import defaults
// only while defaults imports no package of sg's; one that did could close an
// import cycle through messages.
func TestImportsNothingOfSg(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		parsed, err := parser.ParseFile(token.NewFileSet(), f, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, im := range parsed.Imports {
			if p := strings.Trim(im.Path.Value, `"`); strings.HasPrefix(p, "github.com/sg-project/sg") {
				t.Errorf("%s imports %s: defaults must import nothing of sg's (messages imports defaults)", f, p)
			}
		}
	}
}
