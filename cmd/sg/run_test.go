package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sg-project/sg/messages"
	"github.com/sg-project/sg/subjects"
)

// startRun runs `sg run` with args as main does, on a free port with a
// temporary data directory, until the sample query is answered and it
// serves; it returns the output so far and a stop that must end it cleanly.
func startRun(t *testing.T, args ...string) (out string, stop func()) {
	t.Helper()
	return startRunLogging(t, io.Discard, args...)
}

// startRunLogging is startRun with the logs (stderr) to logs.
func startRunLogging(t *testing.T, logs io.Writer, args ...string) (out string, stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		err := realMain(ctx, append([]string{"run", "--nats-listen", "127.0.0.1:0", "--data", t.TempDir(), "--log-level", "error", "--http-listen", "127.0.0.1:0"}, args...), pw, logs)
		pw.Close()
		done <- err
	}()
	lines := make(chan string)
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	stop = func() {
		t.Helper()
		cancel()
		go func() {
			for range lines {
			}
		}()
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(60 * time.Second):
			t.Fatal("sg run did not stop")
		}
	}
	var got []string
	bound := time.After(90 * time.Second)
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				stop()
				t.Fatalf("sg run ended early; output:\n%s", strings.Join(got, "\n"))
			}
			got = append(got, l)
			if strings.HasPrefix(l, "sg run: serving") {
				return strings.Join(got, "\n"), stop
			}
		case <-bound:
			stop()
			t.Fatalf("no sample answer within the bound; output so far:\n%s", strings.Join(got, "\n"))
		}
	}
}

// TestRunAllInOne: the sample query must come back as a table of the six eu
// symbols, and the command must stop cleanly when ctx ends.
func TestRunAllInOne(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the whole system")
	}
	text, stop := startRun(t)
	defer stop()
	if !strings.Contains(text, "(6 rows)") || !strings.Contains(text, "VOD.L") || !strings.Contains(text, "trades") {
		t.Fatalf("sample query output:\n%s", text)
	}
	// The HTTP API it prints answers getData as the NATS API does.
	_, rest, ok := strings.Cut(text, "sg run: HTTP API at http://")
	if !ok {
		t.Fatalf("no HTTP API address printed:\n%s", text)
	}
	addr, _, _ := strings.Cut(rest, "/v1")
	resp, err := http.Post("http://"+addr+"/v1/getData", "application/json",
		strings.NewReader(`{"table":"trade","labels":{"region":"eu"},"groupBy":["sym"],"agg":[["n","count"]]}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var env struct {
		Header struct {
			RC int    `json:"rc"`
			AI string `json:"ai"`
		} `json:"header"`
		Payload []map[string]any `json:"payload"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&env); err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || env.Header.RC != 0 || len(env.Payload) != 6 {
		t.Errorf("HTTP getData: status %d rc %d (%q), %d rows; want 200, 0, 6", resp.StatusCode, env.Header.RC, env.Header.AI, len(env.Payload))
	}
	// Serving means ready: the line says so, and so does /v1/health.
	if !regexp.MustCompile(`sg run: serving \(GW \S+ ready: 1 warm RC, \d+ DAPs registered\)`).MatchString(text) {
		t.Errorf("serving line without the readiness:\n%s", text)
	}
	hr, err := http.Get("http://" + addr + "/v1/health")
	if err != nil {
		t.Fatal(err)
	}
	hb, _ := io.ReadAll(hr.Body)
	hr.Body.Close()
	if hr.StatusCode != http.StatusOK || !strings.Contains(string(hb), `"ready":true`) {
		t.Errorf("health when serving: %d %s", hr.StatusCode, hb)
	}

	// Async over HTTP: 202 with Retry-After and Location; the Location
	// polled after the Retry-After given answers the result.
	req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/v1/getData",
		strings.NewReader(`{"table":"trade","labels":{"region":"eu"},"groupBy":["sym"],"agg":[["n","count"]]}`))
	req.Header.Set("Prefer", "respond-async")
	sub, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	sub.Body.Close()
	loc, ra := sub.Header.Get("Location"), sub.Header.Get("Retry-After")
	if sub.StatusCode != http.StatusAccepted || loc == "" || ra == "" {
		t.Fatalf("async submit: %d Location %q Retry-After %q", sub.StatusCode, loc, ra)
	}
	for polls := 0; ; polls++ {
		// 0 is the seed's value for a job already finished: poll now.
		secs, err := strconv.Atoi(ra)
		if err != nil || secs < 0 || polls > 10 {
			t.Fatalf("poll %d: Retry-After %q", polls, ra)
		}
		wait := time.NewTimer(time.Duration(secs) * time.Second)
		<-wait.C
		res, err := http.Get("http://" + addr + loc)
		if err != nil {
			t.Fatal(err)
		}
		var env struct {
			Payload []map[string]any `json:"payload"`
		}
		derr := json.NewDecoder(res.Body).Decode(&env)
		res.Body.Close()
		if res.StatusCode == http.StatusOK {
			if derr != nil || len(env.Payload) != 6 {
				t.Fatalf("async result: %v, %d rows", derr, len(env.Payload))
			}
			break
		}
		if res.StatusCode != http.StatusAccepted {
			t.Fatalf("async poll: %d", res.StatusCode)
		}
		ra = res.Header.Get("Retry-After")
	}

	// sg query --async prints the same table; its progress goes to stderr.
	_, natsRest, _ := strings.Cut(text, "sg run: NATS at ")
	natsURL, _, _ := strings.Cut(natsRest, " ")
	var out, errb bytes.Buffer
	if err := realMain(context.Background(), []string{"query", "--async", "--nats", natsURL, "--log-level", "error", "getData",
		`{"table":"trade","labels":{"region":"eu"},"groupBy":["sym"],"agg":[["n","count"]]}`}, &out, &errb); err != nil {
		t.Fatalf("sg query --async: %v\n%s", err, errb.String())
	}
	if !strings.Contains(out.String(), "(6 rows)") || !strings.Contains(errb.String(), "accepted") {
		t.Fatalf("sg query --async:\n%s\n%s", out.String(), errb.String())
	}
	t.Logf("sg query --async progress:\n%s", errb.String())

	// sg run runs with the request log on, as every deployment does: each
	// request is written to it twice (its entry with the first drive, then
	// `answered`; answered records expire by their TTL, which the last
	// sequence does not see).
	nc, err := nats.Connect(natsURL)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := js.Stream(ctx, subjects.Default().RequestLogStream())
	if err != nil {
		t.Fatalf("sg run's request log stream %s: %v", subjects.Default().RequestLogStream(), err)
	}
	before, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	const requests = 3
	body := []byte(`{"header":{"api":"getData"},"payload":{"table":"trade","labels":{"region":"eu"},"limit":1}}`)
	for range requests {
		m, err := nc.RequestWithContext(ctx, subjects.Default().GWAPI(subjects.APIGetData), body)
		if err != nil {
			t.Fatalf("getData over NATS: %v", err)
		}
		if rc := m.Header.Get(messages.HdrRC); rc != "0" {
			t.Fatalf("getData over NATS: rc %q: %s", rc, m.Data)
		}
	}
	after, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if after.Config.Storage != jetstream.FileStorage || after.State.LastSeq-before.State.LastSeq != 2*requests {
		t.Errorf("request log %s: storage %s, %d records written for %d requests; want file storage and %d",
			after.Config.Name, after.Config.Storage, after.State.LastSeq-before.State.LastSeq, requests, 2*requests)
	}
}
