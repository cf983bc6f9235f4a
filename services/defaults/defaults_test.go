package defaults

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"
)

// TestREADMETable: every default here is the one README's Configuration
// table shows, so the docs cannot drift from the code.
func TestREADMETable(t *testing.T) {
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string][]string{}
	for _, line := range strings.Split(string(b), "\n") {
		if !strings.HasPrefix(line, "| `SG_") {
			continue
		}
		cells := strings.Split(line, "|")
		if len(cells) < 5 {
			continue
		}
		for i := range cells {
			cells[i] = strings.TrimSpace(cells[i])
		}
		rows[strings.Trim(cells[1], "`")] = cells[1:]
	}
	for _, s := range Table {
		r, ok := rows[s.Env]
		if !ok {
			t.Errorf("README's Configuration table has no row for %s", s.Env)
			continue
		}
		if kxi := strings.Trim(r[1], "`"); kxi != s.KXI {
			t.Errorf("%s: README names %q beside it, want %q", s.Env, kxi, s.KXI)
		}
		if r[2] != s.Default {
			t.Errorf("%s: README's default is %q, the code's %q", s.Env, r[2], s.Default)
		}
	}
}

// TestTableMatchesConstants: the table's texts are the constants'.
func TestTableMatchesConstants(t *testing.T) {
	secs := func(d time.Duration) string { return fmt.Sprintf("%d s", int(d/time.Second)) }
	want := map[string]string{
		"SG_TIMEOUT": secs(Timeout), "SG_TIMEOUT_MARGIN": secs(TimeoutMargin), "SG_RC_TIMER": secs(RCTimer),
		"SG_MAX_RETRY": fmt.Sprint(MaxRetry), "SG_MULTI_RC_TO_MAX_WAIT": fmt.Sprint(MultiRCMaxWait),
		"SG_MAX_REQUEST_BYTES":        fmt.Sprintf("%d (%d KiB)", MaxRequestBytes, MaxRequestBytes>>10),
		"SG_RC_MAX_QUEUED":            fmt.Sprint(RCMaxQueued),
		"SG_RC_MAX_QUEUED_PER_CALLER": fmt.Sprint(RCMaxQueuedPerCaller),
		"SG_ANSWER_STORE_TTL":         "`" + strings.TrimSuffix(AnswerStoreTTL.String(), "0s") + "`",
		"SG_RC_LABEL_SET_RETENTION":   "`" + strings.TrimSuffix(LabelSetRetention.String(), "0s") + "`",
		"SG_ANSWER_STORE_MAX_BYTES":   fmt.Sprintf("%d (%d GiB)", AnswerStoreMaxBytes, AnswerStoreMaxBytes>>30),
	}
	for _, s := range Table {
		if w, ok := want[s.Env]; ok && w != s.Default {
			t.Errorf("%s: table says %q, constant %q", s.Env, s.Default, w)
		}
	}
}
