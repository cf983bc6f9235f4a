package test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"hash/crc32"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sg-project/sg/messages"
	"github.com/sg-project/sg/services/dap/demo"
	"github.com/sg-project/sg/services/gw"
	"github.com/sg-project/sg/subjects"
)

// plainLargeRequest asks for the whole trade table with a plain nats.go
// Request (no sg client, no Sg-Accept-Chunks) and checks what every such
// caller is promised: one whole message, never a chunk or a cut document, a
// TOO_LARGE error naming a size above the max payload and the ways to get the
// answer. It returns the message, its status and the size it names.
func plainLargeRequest(t *testing.T, nc *nats.Conn, s subjects.Subjects) (*nats.Msg, messages.Status, int, []byte) {
	t.Helper()
	m, body := requestWholeTrade(t, nc, s)
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
	if !strings.Contains(st.AI, "limit") || !strings.Contains(st.AI, "time range") || !strings.Contains(st.AI, messages.HdrAcceptStream+": 1") {
		t.Fatalf("the error does not say how to page (a limit and a time range) or stream: %q", st.AI)
	}
	var size int
	if _, err := fmt.Sscanf(st.AI, "Answer is %d bytes", &size); err != nil || int64(size) <= nc.MaxPayload() {
		t.Fatalf("the error does not name a size above the max payload (%d): %q (%v)", nc.MaxPayload(), st.AI, err)
	}
	t.Logf("plain request: %s", st.AI)
	return m, st, size, body
}

// A plain NATS request (nats.go Request, no sg client) for an answer above the max
// payload never gets a cut document: it gets one message, a TOO_LARGE error naming
// the size and how to get the answer. The same request with Sg-Accept-Chunks: 1 gets
// the whole answer in chunks, of exactly that size.
func TestGetDataPlainRequestLargeAnswerNotCut(t *testing.T) {
	sys := startSystem(t, systemOptions{})
	sys.startDemo(demoFleetConfig(sys, 10000))
	m, st, size, body := plainLargeRequest(t, sys.nc, sys.s)
	// Without an answer store the error says so, and names no object.
	if m.Header.Get(messages.HdrAnswerBucket) != "" || !strings.Contains(st.AI, "not available") {
		t.Fatalf("a GW without an answer store named one: headers %v, %q", m.Header, st.AI)
	}

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
	payload, hdr := reassembleAsTheREADMESays(t, sub)
	if st, err := messages.ReadStatus(hdr); err != nil || !st.IsOK() || len(payload) != size {
		t.Fatalf("chunked answer: %d bytes (the error said %d), status %+v (%v)", len(payload), size, st, err)
	}
	if resp, err := messages.DecodeResponse(hdr, payload); err != nil || !resp.Header.Status.IsOK() {
		t.Fatalf("reassembled answer does not decode: %v", err)
	}
}

// With an answer store (as sg run and sg gw have with JetStream), the plain
// caller's error names the bucket, the key and the TTL, in its text and in
// headers, and the caller reads the whole answer from there with nothing but
// a NATS client: the object is the answer document, its headers the answer's.
func TestGetDataPlainRequestLargeAnswerInObjectStore(t *testing.T) {
	const ttl = 3 * time.Minute
	bucket := "SG_TEST_ANSWERS"
	sys := startSystem(t, systemOptions{answerStore: &gw.AnswerStore{Bucket: bucket, TTL: ttl, MaxBytes: 256 << 20, Memory: true}})
	sys.startDemo(demoFleetConfig(sys, 10000))
	before := time.Now()
	m, st, size, _ := plainLargeRequest(t, sys.nc, sys.s)
	key := m.Header.Get(messages.HdrAnswerKey)
	if got := m.Header.Get(messages.HdrAnswerBucket); got != bucket || key == "" {
		t.Fatalf("headers %s=%q %s=%q, want the bucket %q and a key", messages.HdrAnswerBucket, got, messages.HdrAnswerKey, key, bucket)
	}
	for _, want := range []string{strconv.Quote(bucket), strconv.Quote(key), ttl.String()} {
		if !strings.Contains(st.AI, want) {
			t.Fatalf("the error does not name %s: %q", want, st.AI)
		}
	}
	exp, err := messages.GetInt(m.Header, messages.HdrAnswerExpires)
	if err != nil {
		t.Fatal(err)
	}
	if e := time.Unix(0, exp); e.Before(before.Add(ttl)) || e.After(time.Now().Add(ttl)) {
		t.Fatalf("%s is %s, want about now + %s", messages.HdrAnswerExpires, e, ttl)
	}

	data := fetchStoredAnswer(t, sys.nc, bucket, key)
	if len(data) != size {
		t.Fatalf("stored answer is %d bytes, the error said %d", len(data), size)
	}
}

// fetchStoredAnswer reads an answer from the answer store as any NATS client
// can (nats.go's jetstream package, no sg code) and checks that it is a whole
// OK answer: the object is the answer document, its headers the answer's.
func fetchStoredAnswer(t *testing.T, nc *nats.Conn, bucket, key string) []byte {
	t.Helper()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	obj, err := js.ObjectStore(ctx, bucket)
	if err != nil {
		t.Fatal(err)
	}
	info, err := obj.GetInfo(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	data, err := obj.GetBytes(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	ost, err := messages.ReadStatus(info.Headers)
	if err != nil || !ost.IsOK() {
		t.Fatalf("stored answer's headers %v: status %+v (%v)", info.Headers, ost, err)
	}
	resp, err := messages.DecodeResponse(info.Headers, data)
	if err != nil || !resp.Header.Status.IsOK() || len(resp.Payload) == 0 {
		t.Fatalf("stored answer does not decode as a whole OK answer: %v", err)
	}
	var table []map[string]any
	if err := json.Unmarshal(resp.Payload, &table); err != nil || len(table) == 0 {
		t.Fatalf("stored answer's payload is not the table's rows: %v (%d rows)", err, len(table))
	}
	t.Logf("fetched %d bytes, %d rows from %s/%s", len(data), len(table), bucket, key)
	return data
}

// A GW holds what it reassembles of answers (for callers that take no
// chunks) within MaxHeldBytes, all requests together: a plain caller whose
// answer alone passes a bound set below it gets TOO_LARGE naming the
// gateway's limit and a stream, never a cut document nor a Retry-After that
// could not help; a caller that takes chunks still gets the whole answer,
// passed on as it comes. (Answers past the bound held by others end
// RATE_LIMITED: services/gw TestHeldFullAnswers, core
// TestHeldBoundedAcrossRequests.)
func TestGetDataPlainRequestHeldBounded(t *testing.T) {
	sys := startSystem(t, systemOptions{gwMaxHeld: 64 << 10})
	sys.startDemo(demoFleetConfig(sys, 10000))
	m, _ := requestWholeTrade(t, sys.nc, sys.s)
	resp, err := messages.DecodeResponse(m.Header, m.Data)
	if err != nil {
		t.Fatalf("the answer is not a whole document: %v", err)
	}
	st := resp.Header.Status
	if st.RC != messages.CodeTooLarge || len(resp.Payload) != 0 || m.Header.Get(messages.HdrRetryAfter) != "" {
		t.Fatalf("answer %+v with %d bytes, Retry-After %q: want TOO_LARGE, no payload, no Retry-After", st, len(resp.Payload), m.Header.Get(messages.HdrRetryAfter))
	}
	for _, want := range []string{gw.LimitHeldBytes, messages.HdrAcceptStream} {
		if !strings.Contains(st.AI, want) {
			t.Fatalf("the error does not name %s: %q", want, st.AI)
		}
	}
	// Taking chunks, the same request is answered whole: the GW passes them on.
	whole, err := sys.client.Do(context.Background(), subjects.APIGetData, messages.GetDataArgs{Table: demo.Trade}, messages.Opts{})
	if err != nil || !whole.Header.Status.IsOK() || int64(len(whole.Payload)) <= sys.nc.MaxPayload() {
		t.Fatalf("chunked answer: %v %+v, %d bytes", err, whole.Header.Status, len(whole.Payload))
	}
}

// requestWholeTrade asks for the whole trade table as a plain nats.go
// client does: a JSON envelope, no Sg-Accept-Chunks; the reply as it came,
// and the request's body (to send again).
// reassembleAsTheREADMESays collects a chunked answer as README.md (Large
// answers) tells any NATS client to: nats.go and the standard library only,
// the headers by the names the README gives (not sg's constants: a renamed
// header fails here as it would fail the README's readers), chunks in any
// order, duplicates ignored, the whole checked against Sg-Chunk-Total and
// Sg-Chunk-Sum (CRC-32C, lowercase hex, no leading zeros).
func reassembleAsTheREADMESays(t *testing.T, sub *nats.Subscription) ([]byte, nats.Header) {
	t.Helper()
	var stream string
	var chunks [][]byte
	var have, total int
	var sum string
	var first nats.Header
	deadline := time.Now().Add(30 * time.Second)
	for chunks == nil || have < len(chunks) {
		m, err := sub.NextMsg(time.Until(deadline))
		if err != nil {
			t.Fatalf("chunk %d of %d: %v", have, len(chunks), err)
		}
		if stream == "" {
			stream = m.Header.Get("Sg-Chunk-Stream")
		}
		if got := m.Header.Get("Sg-Chunk-Stream"); got == "" || got != stream {
			t.Fatalf("a chunk of transfer %q in transfer %q (headers %v)", got, stream, m.Header)
		}
		i, err1 := strconv.Atoi(m.Header.Get("Sg-Chunk-Index"))
		n, err2 := strconv.Atoi(m.Header.Get("Sg-Chunk-Count"))
		tot, err3 := strconv.Atoi(m.Header.Get("Sg-Chunk-Total"))
		if err1 != nil || err2 != nil || err3 != nil || n < 1 || i < 0 || i >= n {
			t.Fatalf("chunk headers do not read: %v", m.Header)
		}
		if chunks == nil {
			chunks, total, sum, first = make([][]byte, n), tot, m.Header.Get("Sg-Chunk-Sum"), m.Header
		}
		if n != len(chunks) || tot != total || m.Header.Get("Sg-Chunk-Sum") != sum {
			t.Fatalf("chunk %d announces another whole: %v", i, m.Header)
		}
		if chunks[i] == nil { // a duplicate is ignored
			chunks[i] = m.Data
			have++
		}
	}
	whole := bytes.Join(chunks, nil)
	if len(whole) != total {
		t.Fatalf("reassembled %d bytes, Sg-Chunk-Total says %d", len(whole), total)
	}
	if got := strconv.FormatUint(uint64(crc32.Checksum(whole, crc32.MakeTable(crc32.Castagnoli))), 16); got != sum {
		t.Fatalf("CRC-32C %s, Sg-Chunk-Sum says %s", got, sum)
	}
	for _, k := range []string{"Sg-Rc", "Sg-Ac"} { // every chunk carries the answer's headers
		if first.Get(k) == "" {
			t.Fatalf("no %s on the chunks: %v", k, first)
		}
	}
	return whole, first
}

func requestWholeTrade(t *testing.T, nc *nats.Conn, s subjects.Subjects) (*nats.Msg, []byte) {
	t.Helper()
	args, err := json.Marshal(messages.GetDataArgs{Table: demo.Trade})
	if err != nil {
		t.Fatal(err)
	}
	body, err := messages.Request{Header: messages.RequestHeader{API: subjects.APIGetData}, Payload: args, Content: messages.ContentJSON}.Encode()
	if err != nil {
		t.Fatal(err)
	}
	m, err := nc.Request(s.GWAPI(subjects.APIGetData), body, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	return m, body
}
