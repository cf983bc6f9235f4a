package main

import (
	"regexp"
	"strings"
	"testing"
	"time"
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
	if out, err := sg(t, "ping", "--nats", url[1], "--log-level", "error"); err != nil {
		t.Fatalf("ping with the demo fleet: %v\n%s", err, out)
	}
	out, err := sg(t, "ping", "--labels", "region=mars", "--nats", url[1], "--log-level", "error")
	if err == nil || !strings.Contains(out, "no DAP reached") {
		t.Fatalf("ping reaching no DAP: err %v\n%s", err, out)
	}
}
