package gw_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/sg-project/sg/messages"
	"github.com/sg-project/sg/services/gw"
	"github.com/sg-project/sg/services/gw/client"
	"github.com/sg-project/sg/subjects"
	"github.com/sg-project/sg/test/natstest"
	"github.com/sg-project/sg/test/promtest"
)

// A job whose request fails (no RC: NO_RESOURCES) is failed, and its poll
// answers the error envelope; hostile polls and position reports change
// nothing; an unknown id is UNKNOWN_JOB.
func TestJobFailsAndHostilePolls(t *testing.T) {
	e := startGW(t, func(c *gw.Config) { c.Jobs = &gw.Jobs{Memory: true} })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	job, err := e.cl.Submit(ctx, messages.RequestHeader{API: "ping"}, nil)
	if err != nil {
		t.Fatalf("submit: %v", err)
	}
	// Failed already (no RC answers at once): Retry-After 0; else at least min.
	if done := job.Status.State == messages.JobFailed; job.ID == "" || (done && job.RetryAfter != 0) || (!done && job.RetryAfter < time.Second) {
		t.Fatalf("accepted: %+v", job)
	}
	// Garbage on the GW's position subject: skipped, counted.
	for _, b := range [][]byte{nil, []byte("x"), {0x81, 0xa1, 'v', 0x01}} {
		if err := e.nc.Publish(e.s.GWPosition("gw1"), b); err != nil {
			t.Fatal(err)
		}
	}
	resp, err := e.cl.Wait(ctx, job.ID, nil)
	if err != nil || resp.Header.Status.RC != messages.CodeNoResources {
		t.Fatalf("failed job: %v %+v", err, resp.Header.Status)
	}
	if a, f := promtest.Sum(t, e.reg, "sg_gw_jobs_total", map[string]string{"event": "accepted"}), promtest.Sum(t, e.reg, "sg_gw_jobs_total", map[string]string{"event": "failed"}); a != 1 || f != 1 {
		t.Fatalf("sg_gw_jobs_total accepted %v failed %v, want 1 and 1", a, f)
	}
	for _, tc := range []struct {
		name string
		h    nats.Header
		body []byte
		want messages.Code
	}{
		{"no id", nats.Header{}, nil, messages.CodeBadRequest},
		{"bad id", nats.Header{messages.HdrJobID: []string{"a.b*"}}, nil, messages.CodeBadRequest},
		{"a body", nats.Header{messages.HdrJobID: []string{job.ID}}, []byte("{}"), messages.CodeBadRequest},
		{"unknown", nats.Header{messages.HdrJobID: []string{"NoSuchJob"}}, nil, messages.CodeUnknownJob},
	} {
		m, err := e.nc.RequestMsg(&nats.Msg{Subject: e.s.GWJob(), Header: tc.h, Data: tc.body}, 5*time.Second)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		st, err := messages.ReadStatus(m.Header)
		if err != nil || st.RC != tc.want {
			t.Fatalf("%s: %v %+v, want %s", tc.name, err, st, tc.want)
		}
	}
	for deadline := time.Now().Add(5 * time.Second); ; {
		got := promtest.Sum(t, e.reg, "sg_gw_malformed_messages_total", map[string]string{"kind": "position_report"})
		if got == 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("malformed position reports counted %v, want 3", got)
		}
		tick := time.NewTimer(20 * time.Millisecond)
		<-tick.C
	}
	_, _, _, err = e.cl.Poll(ctx, "NoSuchJob")
	var ae *client.AnswerError
	if !errors.As(err, &ae) || ae.Status.RC != messages.CodeUnknownJob {
		t.Fatalf("poll unknown: %v", err)
	}
}

// Without a job store, opts.async is NOT_SUPPORTED.
func TestAsyncWithoutJobStore(t *testing.T) {
	e := startGW(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := e.cl.Submit(ctx, messages.RequestHeader{API: "ping"}, nil)
	var ae *client.AnswerError
	if !errors.As(err, &ae) || ae.Status.RC != messages.CodeNotSupported {
		t.Fatalf("async without a store: %v", err)
	}
}

// Concurrent submissions with one idempotency key make one job.
func TestConcurrentIdempotentSubmissions(t *testing.T) {
	e := startGW(t, func(c *gw.Config) { c.Jobs, c.StartupWait = &gw.Jobs{Memory: true}, 5*time.Second })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	const n = 8
	ids := make(chan string, n)
	for range n {
		go func() {
			job, err := e.cl.Submit(ctx, messages.RequestHeader{API: "ping", Opts: messages.Opts{IdempotencyKey: "k1"}}, nil)
			if err != nil {
				t.Error(err)
			}
			ids <- job.ID
		}()
	}
	first := natstest.Receive(t, ids, "job id", wait)
	for range n - 1 {
		if id := natstest.Receive(t, ids, "job id", wait); id != first || id == "" {
			t.Fatalf("job %q, want %q for every submission", id, first)
		}
	}
	if a := promtest.Sum(t, e.reg, "sg_gw_jobs_total", map[string]string{"event": "accepted"}); a != 1 {
		t.Fatalf("%v jobs accepted, want 1", a)
	}
}

// TestAsyncRunsTheRequestDecodedOnce: a job runs on the decode of its
// submission. Its request is not sent to the GW API again (the getData
// endpoint counts one request: the submission), and the RC gets the
// caller's argument bytes as sent, which a re-encoding would not keep
// (spacing, key order), and a request without opts.async; the job's answer
// is the RC's.
func TestAsyncRunsTheRequestDecodedOnce(t *testing.T) {
	e := startGW(t, func(c *gw.Config) { c.Jobs = &gw.Jobs{Memory: true} })
	got := submissionsAnswered(e)
	const args = `{ "table" : "trade",  "limit":5, "startTS":"2026-01-02T03:04:05Z" }`
	body := `{"header":{"v":1,"api":"getData","opts":{"async":true,"idempotencyKey":"k"}},"payload":` + args + `}`
	r := e.raw(subjects.APIGetData, nats.Header{messages.HdrContentType: {"json"}}, []byte(body))
	if r.Header.Status.RC != messages.CodeAccepted {
		t.Fatalf("submission: %v, want ACCEPTED", r.Header.Status)
	}
	var js messages.JobStatus
	if err := json.Unmarshal(r.Payload, &js); err != nil || js.JobID == "" {
		t.Fatalf("job status %s: %v", r.Payload, err)
	}
	s := natstest.Receive(t, got, "the job's submission", wait)
	if string(s.ArgsJSON) != args || len(s.Args) != 0 {
		t.Errorf("RC got argsj %q and args %x, want the caller's bytes %q", s.ArgsJSON, []byte(s.Args), args)
	}
	if s.Header.Opts.Async || s.Header.Opts.IdempotencyKey != "" {
		t.Errorf("RC got opts %+v: the job's run is not async and has no key", s.Header.Opts)
	}
	resp, err := e.cl.Wait(ctxT(t), js.JobID, nil)
	if err != nil || !resp.Header.Status.IsOK() {
		t.Fatalf("job's answer: %v %+v", err, resp.Header.Status)
	}
	if n := e.endpointRequests(subjects.APIGetData); n != 1 {
		t.Errorf("getData endpoint served %d requests, want 1: the job's run went through the API again", n)
	}
}

// endpointRequests is the number of requests the GW's micro endpoint for api
// has received, from $SRV.STATS.
func (e *env) endpointRequests(api string) int {
	e.t.Helper()
	m, err := e.nc.Request("$SRV.STATS."+e.s.ServiceName(subjects.ServiceGW), nil, wait)
	if err != nil {
		e.t.Fatalf("micro stats: %v", err)
	}
	var st micro.Stats
	if err := json.Unmarshal(m.Data, &st); err != nil {
		e.t.Fatalf("micro stats %s: %v", m.Data, err)
	}
	for _, ep := range st.Endpoints {
		if ep.Name == api {
			return ep.NumRequests
		}
	}
	e.t.Fatalf("micro stats: no endpoint %s in %s", api, m.Data)
	return 0
}
