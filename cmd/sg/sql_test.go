package main

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sg-project/sg/messages"
	"github.com/sg-project/sg/services/defaults"
)

// TestQuerySQLEqualsGetData: `sg query sql` with the statement
// prints what the same getData prints; `sg ping` exits non-zero when no DAP
// answers and zero when some do.
func TestQuerySQLEqualsGetData(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the whole system")
	}
	text, stop := startRun(t, "--live=false") // static data: the two answers must agree exactly
	defer stop()
	url := regexp.MustCompile(`--nats (\S+)`).FindStringSubmatch(text)
	if url == nil {
		t.Fatalf("no NATS URL in:\n%s", text)
	}
	since := time.Now().UTC().Add(-24 * time.Hour).Truncate(time.Hour).Format(time.RFC3339)
	sqlOut, err := sg(t, "query", "sql", "SELECT sym, count(*) AS n, avg(price) AS px FROM trade WHERE region IN ('eu','us') AND time >= '"+since+
		"' GROUP BY sym ORDER BY n DESC LIMIT 5", "--nats", url[1], "--format", "csv", "--log-level", "error")
	if err != nil {
		t.Fatalf("sg query sql: %v\n%s", err, sqlOut)
	}
	getOut, err := sg(t, "query", "getData", `{"table":"trade","labels":{"region":["eu","us"]},"startTS":"`+since+
		`","groupBy":["sym"],"agg":[["n","count"],["px","avg","price"]],"sortCols":["-n"],"limit":5}`,
		"--nats", url[1], "--format", "csv", "--log-level", "error")
	if err != nil {
		t.Fatalf("sg query getData: %v\n%s", err, getOut)
	}
	if sqlOut != getOut || strings.Count(sqlOut, "\n") != 6 {
		t.Fatalf("sql printed\n%s\ngetData printed\n%s", sqlOut, getOut)
	}
	// A WHERE nested deeper than a Where may be (messages.MaxWhereDepth) is
	// refused, never left unanswered: before, it planned and validated at
	// the RC, every DAP and the Agg refused what it sent, and the caller
	// waited for its timeout (`--opts`: well past any answer).
	deep := "SELECT count(*) AS n FROM trade WHERE " + strings.Repeat("NOT ", messages.MaxWhereDepth+2) + "price > 0"
	out, err := sg(t, "query", "sql", deep, "--opts", `{"timeout":600000}`, "--nats", url[1], "--log-level", "error")
	if err == nil || !strings.Contains(out, "BAD_REQUEST") || !strings.Contains(out, "nested deeper than") {
		t.Fatalf("sg query sql with a WHERE nested too deep: err %v\n%s", err, out)
	}
	queryStreams(t, url[1])
	if out, err := sg(t, "ping", "--nats", url[1], "--log-level", "error"); err != nil {
		t.Fatalf("ping with the demo fleet: %v\n%s", err, out)
	}
	out, err = sg(t, "ping", "--labels", "region=mars", "--nats", url[1], "--log-level", "error")
	if err == nil || !strings.Contains(out, "no DAP reached") {
		t.Fatalf("ping reaching no DAP: err %v\n%s", err, out)
	}
}

// queryStreams: `sg query getData` reads an answer of several windows as a
// stream and prints every row once in each format: CSV under one header, JSON
// as one envelope, a table under one header with the row count.
func queryStreams(t *testing.T, url string) {
	t.Helper()
	since := time.Now().UTC().Add(-36 * time.Hour).Format(time.RFC3339Nano)
	args := `{"table":"trade","startTS":"` + since + `","columns":["sym","price","size"]}`
	run := func(args, format string) string {
		t.Helper()
		out, err := sg(t, "query", "getData", args, "--nats", url, "--format", format, "--log-level", "error")
		if err != nil {
			t.Fatalf("sg query getData --format %s: %v\n%.2000s", format, err, out)
		}
		return out
	}
	countOut := run(`{"table":"trade","startTS":"`+since+`","agg":[["n","count"]]}`, "csv")
	lines := strings.Split(strings.TrimSpace(countOut), "\n")
	want, err := strconv.Atoi(lines[len(lines)-1])
	if err != nil || want == 0 {
		t.Fatalf("count printed %q", countOut)
	}
	jsonOut := run(args, "json")
	var env struct {
		Header  messages.ResponseHeader `json:"header"`
		Payload []map[string]any        `json:"payload"`
	}
	if err := json.Unmarshal([]byte(jsonOut), &env); err != nil || !env.Header.Status.IsOK() {
		t.Fatalf("--format json printed no envelope (%v): %.500s", err, jsonOut)
	}
	if len(jsonOut) < 2*defaults.AggStreamWindow {
		t.Fatalf("an answer of %d bytes is not a stream of several windows: ask for more rows", len(jsonOut))
	}
	csvOut := run(args, "csv")
	tableOut := run(args, "table")
	got := map[string]int{
		"json":  len(env.Payload),
		"csv":   strings.Count(csvOut, "\n") - 1,
		"table": strings.Count(tableOut, "\n") - 2,
	}
	for format, n := range got {
		if n != want {
			t.Errorf("--format %s printed %d rows, count says %d", format, n, want)
		}
	}
	if strings.Count(csvOut, "sym,price,size") != 1 || !strings.HasSuffix(tableOut, fmt.Sprintf("(%d rows)\n", want)) {
		t.Errorf("CSV header %d times; table ends %q", strings.Count(csvOut, "sym,price,size"), tableOut[max(0, len(tableOut)-40):])
	}
	t.Logf("%d rows; JSON %d bytes", want, len(jsonOut))
}
