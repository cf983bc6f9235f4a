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
	mu      sync.Mutex
	buf     bytes.Buffer
	written chan struct{} // closed and replaced on each write
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.written != nil {
		close(b.written)
		b.written = nil
	}
	return b.buf.Write(p)
}

// next is closed at the next write.
func (b *lockedBuffer) next() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.written == nil {
		b.written = make(chan struct{})
	}
	return b.written
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
	// The Agg logs its answer after sending it, and the RC hears of it
	// after that: wait (bounded) for a line from each service, on writes.
	seen := func() map[string]int {
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
				t.Fatalf("line about %s without its logCorr: %s", id, line)
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
		return services
	}
	bound := time.After(10 * time.Second)
	services := seen()
	for services["gw"] == 0 || services["rc"] == 0 || services["agg"] == 0 {
		written := buf.next()
		if services = seen(); services["gw"] > 0 && services["rc"] > 0 && services["agg"] > 0 {
			break
		}
		select {
		case <-written:
		case <-bound:
			t.Fatalf("within 10s, not a line about the request from each of gw, rc and agg (seen %v)", services)
		}
		services = seen()
	}
}
