package main

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// scrape reads /metrics and sums each series over its labels.
func scrape(t *testing.T, addr string) map[string]float64 {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		l := sc.Text()
		if l == "" || l[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(l, ' ')
		name := l[:i]
		if j := strings.IndexByte(name, '{'); j >= 0 {
			name = name[:j]
		}
		v, err := strconv.ParseFloat(l[i+1:], 64)
		if err != nil {
			t.Fatalf("metrics line %q: %v", l, err)
		}
		out[name] += v
	}
	return out
}

func freePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// TestMetricsUnderKXNames scrapes /metrics of a running sg run and checks
// that the seed's (KX's) metric names are there and move with a request.
func TestMetricsUnderKXNames(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the whole system")
	}
	maddr := freePort(t)
	text, stop := startRun(t, "--metrics-listen", maddr)
	defer stop()
	names := []string{"kxi_rc_queue_length", "kxi_rc_retry_count", "kxi_rc_reqs_total", "kxi_rc_connected_daps",
		"kxi_sg_pending", "kxi_sg_connected_coordinators", "kxi_rc_req_complete_time_count", "kxi_agg_fn_time_count",
		"kxi_da_requests", "kxi_da_request_time_count", "sg_rc_queue_length", "sg_gw_requests_total"}
	// sg run's own query was answered, but a labelled counter (the GW's
	// requests by code) has its first series only once the GW has counted
	// it, which may be just after the answer went out: scrape until every
	// name is there, bounded (a scrape at once failed 1 CI run: no
	// sg_gw_requests_total).
	var before map[string]float64
	for bound := time.Now().Add(10 * time.Second); ; {
		before = scrape(t, maddr)
		missing := 0
		for _, name := range names {
			if _, ok := before[name]; !ok {
				missing++
			}
		}
		if missing == 0 || time.Now().After(bound) {
			break
		}
		time.Sleep(20 * time.Millisecond) // polling a scrape, bounded above
	}
	for _, name := range names {
		if _, ok := before[name]; !ok {
			t.Errorf("/metrics has no %s", name)
		}
	}
	if before["kxi_sg_connected_coordinators"] != 1 || before["kxi_rc_connected_daps"] < 9 {
		t.Errorf("connected coordinators %v, DAPs %v; want 1 and the demo fleet (>= 9)",
			before["kxi_sg_connected_coordinators"], before["kxi_rc_connected_daps"])
	}
	// One more request through the HTTP API: the counters move.
	_, rest, _ := strings.Cut(text, "sg run: HTTP API at http://")
	addr, _, _ := strings.Cut(rest, "/v1")
	resp, err := http.Post("http://"+addr+"/v1/getData", "application/json",
		strings.NewReader(`{"table":"trade","labels":{"region":"eu"},"groupBy":["sym"],"agg":[["n","count"]]}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	// The RC and the DAPs record a request as it ends, which may be just
	// after the client has its answer: scrape until all moved, bounded.
	moving := []string{"kxi_rc_reqs_total", "kxi_rc_req_complete_time_count", "kxi_agg_fn_time_count",
		"kxi_da_requests", "kxi_da_request_time_count"}
	var after map[string]float64
	for bound := time.Now().Add(10 * time.Second); ; {
		after = scrape(t, maddr)
		still := 0
		for _, name := range moving {
			if after[name] <= before[name] {
				still++
			}
		}
		if still == 0 || time.Now().After(bound) {
			break
		}
		time.Sleep(20 * time.Millisecond) // polling a scrape, bounded above
	}
	for _, name := range moving {
		if after[name] <= before[name] {
			t.Errorf("%s did not move: %v -> %v", name, before[name], after[name])
		}
	}
	if t.Failed() {
		t.Log(fmt.Sprint(after))
	}
}
