package test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/sg-project/sg/messages"
)

// lockedBuffer collects log lines from every service.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) lines() [][]byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out [][]byte
	sc := bufio.NewScanner(bytes.NewReader(b.buf.Bytes()))
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		out = append(out, append([]byte(nil), sc.Bytes()...))
	}
	return out
}

// Every log line about a request, in every service, carries its request id
// and the caller's logCorr.
func TestLogLinesCarryRequestIDAndLogCorr(t *testing.T) {
	var buf lockedBuffer
	log := zerolog.New(&buf).Level(zerolog.DebugLevel)
	sys := startSystem(t, systemOptions{log: &log})
	src, _ := engineSource(t, sys)
	sys.startDAP(oneDAP(src, 1))
	sys.waitDAPs(1)

	ctx, cancel := context.WithTimeout(sys.ctx, 20*time.Second)
	defer cancel()
	args := messages.GetDataArgs{Table: "trade", GroupBy: []string{"sym"}, Agg: []messages.AggSpec{{Name: "n", Func: messages.AggCount}}}
	resp, err := sys.client.Do(ctx, "getData", args, messages.Opts{LogCorr: "corr-42"})
	if err != nil || !resp.Header.Status.IsOK() {
		t.Fatalf("getData: %v %+v", err, resp.Header.Status)
	}
	// The answer carries the client's id, a label; inside sg the request is
	// known by the GW's own id, which the GW logs next to the label.
	clientID := resp.Header.RequestID
	var id any
	for _, line := range buf.lines() {
		var m map[string]any
		if json.Unmarshal(line, &m) == nil && m["client_request_id"] == clientID && m["request_id"] != nil {
			id = m["request_id"]
			break
		}
	}
	if id == nil {
		t.Fatalf("no GW log line names client request %s with its request id", clientID)
	}
	services := map[string]int{}
	for _, line := range buf.lines() {
		var m map[string]any
		if err := json.Unmarshal(line, &m); err != nil {
			t.Fatalf("log line is not JSON: %s", line)
		}
		if m["request_id"] != id {
			continue
		}
		if m["log_corr"] != "corr-42" {
			t.Errorf("line about %s without its logCorr: %s", id, line)
		}
		svc, _ := m["service"].(string)
		if svc == "" {
			if _, ok := m["agg"]; ok {
				svc = "agg"
			} else if _, ok := m["dap"]; ok {
				svc = "dap"
			}
		}
		services[svc]++
	}
	for _, want := range []string{"gw", "rc", "agg"} {
		if services[want] == 0 {
			t.Errorf("no %s log line about the request (seen %v)", want, services)
		}
	}
}
