package gw_test

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/sg-project/sg/messages"
	"github.com/sg-project/sg/services/gw"
	"github.com/sg-project/sg/services/gw/client"
)

// An idempotent resubmission of a job an older GW recorded (a rolling upgrade) (v1: BodySum is
// sha256 of the request re-encoded with opts.async and the key cleared) must
// find that job, as the older GW itself would.
func TestIdempotentResubmissionOfAnOlderGWsJob(t *testing.T) {
	e := startGW(t, func(c *gw.Config) { c.Jobs, c.StartupWait = &gw.Jobs{Memory: true}, 5*time.Second })
	ctx := ctxT(t)
	hdr := messages.RequestHeader{API: "ping", Opts: messages.Opts{IdempotencyKey: "k1"}}
	job, err := e.cl.Submit(ctx, hdr, nil)
	if err != nil {
		t.Fatal(err)
	}
	js, _ := jetstream.New(e.nc)
	kv, err := js.KeyValue(ctx, e.s.JobsBucket())
	if err != nil {
		t.Fatal(err)
	}
	ent, err := kv.Get(ctx, "j."+job.ID)
	if err != nil {
		t.Fatal(err)
	}
	var rec map[string]any
	if err := json.Unmarshal(ent.Value(), &rec); err != nil {
		t.Fatal(err)
	}
	var raw struct {
		Body    []byte      `json:"body"`
		Request []byte      `json:"request"`
		Header  nats.Header `json:"header"`
	}
	if err := json.Unmarshal(ent.Value(), &raw); err != nil {
		t.Fatal(err)
	}
	// A v2 record keeps the request as sent apart from v1's body, which it
	// leaves empty: an older GW resuming it refuses an empty request rather
	// than run it as a new async job.
	if len(raw.Body) != 0 || len(raw.Request) == 0 {
		t.Fatalf("v2 record: body %q, request %q; want no body, the request", raw.Body, raw.Request)
	}
	// What an older GW (d94d9be submitJob) stored for this very request.
	req, err := messages.DecodeRequest(raw.Header, raw.Request)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Opts.Async, req.Header.Opts.IdempotencyKey = false, ""
	body, err := req.Encode()
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(body)
	rec["v"], rec["body"], rec["bodySum"] = 1, body, hex.EncodeToString(sum[:])
	b, _ := json.Marshal(rec)
	if _, err := kv.Put(ctx, "j."+job.ID, b); err != nil {
		t.Fatal(err)
	}
	again, err := e.cl.Submit(ctx, hdr, nil)
	var ae *client.AnswerError
	if errors.As(err, &ae) && strings.Contains(ae.Status.AI, "different request") {
		t.Fatalf("resubmission of a v1 job refused: %v", ae.Status)
	}
	if err != nil || again.ID != job.ID {
		t.Fatalf("resubmission: %v, job %q want %q", err, again.ID, job.ID)
	}
}
