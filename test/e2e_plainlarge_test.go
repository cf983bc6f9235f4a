package test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sg-project/sg/messages"
	"github.com/sg-project/sg/services/dap/demo"
	"github.com/sg-project/sg/subjects"
)

// A plain NATS request (nats.go Request, no sg client) for an answer above the max
// payload never gets a cut document: it gets one message, a TOO_LARGE error naming
// the size and how to get the answer. The same request with Sg-Accept-Chunks: 1 gets
// the whole answer in chunks, of exactly that size.
func TestGetDataPlainRequestLargeAnswerNotCut(t *testing.T) {
	sys := startSystem(t, systemOptions{})
	sys.startDemo(demoFleetConfig(sys, 10000))
	args, err := json.Marshal(messages.GetDataArgs{Table: demo.Trade})
	if err != nil {
		t.Fatal(err)
	}
	body, err := messages.Request{Header: messages.RequestHeader{API: subjects.APIGetData}, Payload: args, Content: messages.ContentJSON}.Encode()
	if err != nil {
		t.Fatal(err)
	}
	m, err := sys.nc.Request(sys.s.GWAPI(subjects.APIGetData), body, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if m.Header.Get(messages.HdrChunkCount) != "" {
		t.Fatalf("a plain request got a chunk (headers %v)", m.Header)
	}
	resp, err := messages.DecodeResponse(m.Header, m.Data)
	if err != nil {
		t.Fatalf("the answer is not a whole document: %v", err)
	}
	st := resp.Header.Status
	if st.RC != messages.CodeTooLarge || !strings.Contains(st.AI, messages.HdrAcceptChunks) || len(resp.Payload) != 0 {
		t.Fatalf("answer %+v, want TOO_LARGE naming %s", st, messages.HdrAcceptChunks)
	}
	var size int
	if _, err := fmt.Sscanf(st.AI, "Answer is %d bytes", &size); err != nil || int64(size) <= sys.nc.MaxPayload() {
		t.Fatalf("the error does not name a size above the max payload (%d): %q (%v)", sys.nc.MaxPayload(), st.AI, err)
	}
	t.Logf("plain request: %s", st.AI)

	// Saying it reassembles, the caller gets the whole answer.
	inbox := sys.nc.NewInbox()
	sub, err := sys.nc.SubscribeSync(inbox)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := sub.SetPendingLimits(-1, -1); err != nil {
		t.Fatal(err)
	}
	h := nats.Header{}
	messages.SetString(h, messages.HdrAcceptChunks, "1")
	if err := sys.nc.PublishMsg(&nats.Msg{Subject: sys.s.GWAPI(subjects.APIGetData), Reply: inbox, Header: h, Data: body}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	payload, hdr, err := messages.ReceiveChunked(ctx, sub, 0)
	if err != nil {
		t.Fatal(err)
	}
	if st, err := messages.ReadStatus(hdr); err != nil || !st.IsOK() || len(payload) != size {
		t.Fatalf("chunked answer: %d bytes (the error said %d), status %+v (%v)", len(payload), size, st, err)
	}
	if resp, err := messages.DecodeResponse(hdr, payload); err != nil || !resp.Header.Status.IsOK() {
		t.Fatalf("reassembled answer does not decode: %v", err)
	}
}
