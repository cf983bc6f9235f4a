package gw

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/sg-project/sg/messages"
	"github.com/sg-project/sg/services/gw/core"
	"github.com/sg-project/sg/subjects"
	"github.com/sg-project/sg/test/natstest"
	"github.com/sg-project/sg/test/promtest"
)

// A chunk 0 passed on as it comes (core/relay.go) that is above the max
// payload (the server's shrank since the relay judged it) is never cut
// again: that would make it a transfer of its own, which the caller would
// complete, cut. The caller gets an error answer instead.
func TestRelayedChunkAboveMaxPayloadIsNotCutAgain(t *testing.T) {
	nc := natstest.Connect(t, natstest.Start(t))
	g := newTestGW(t, nc)
	inbox := nc.NewInbox()
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		t.Fatal(err)
	}
	ri := &reqInfo{api: subjects.APIGetData, id: "r1", clientID: "c1", reply: inbox, content: messages.ContentMsgpack,
		chunks: true, received: time.Now(), log: zerolog.New(zerolog.NewTestWriter(t))}
	body := make([]byte, nc.MaxPayload()+1)
	h := nats.Header{}
	messages.StatusOK.Write(h)
	for k, v := range map[string]string{messages.HdrChunkStream: "t1", messages.HdrChunkIndex: "0", messages.HdrChunkCount: "3",
		messages.HdrChunkTotal: "3000000", messages.HdrChunkSum: "1f"} {
		h.Set(k, v)
	}
	g.forward(ri, answer{header: h, data: body, chunk: true})
	m, err := sub.NextMsg(5 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	st, err := messages.ReadStatus(m.Header)
	if err != nil || st.IsOK() || m.Header.Get(messages.HdrChunkIndex) != "" {
		t.Fatalf("got status %+v (%v), chunk header %q, %d bytes; want an error answer, not a chunk", st, err, m.Header.Get(messages.HdrChunkIndex), len(m.Data))
	}
	// Nothing else came before a marker sent on the same connection after it.
	if err := nc.Publish(inbox, []byte("marker")); err != nil {
		t.Fatal(err)
	}
	if m, err := sub.NextMsg(5 * time.Second); err != nil || string(m.Data) != "marker" {
		t.Fatalf("after the error answer: %v (%v), want the marker", m, err)
	}
}

// relayStory is a shell with request r1 of a caller that reassembles
// chunks, on a server whose max payload is 64 KiB, and an Agg's chunked
// answer to it, passed on as it comes; next is what the caller got next.
func relayStory(t *testing.T) (g *GW, sh *shell, chunks []*nats.Msg, inbox string, next func() *nats.Msg) {
	srv := natstest.Start(t, func(o *server.Options) { o.MaxPayload = 64 << 10 })
	nc := natstest.Connect(t, srv)
	g = newTestGW(t, nc)
	caller := natstest.Connect(t, srv)
	inbox = caller.NewInbox()
	sub, err := caller.SubscribeSync(inbox)
	if err != nil {
		t.Fatal(err)
	}
	if err := caller.Flush(); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now().UnixNano()
	c := core.New(core.Config{Self: "gw1", Incarnation: t0, Start: t0, TimeoutMargin: int64(time.Second),
		AnnounceEvery: int64(time.Second), DeadAfter: int64(10 * time.Second), MaxInFlight: 10, MaxInFlightPerCaller: 10,
		MaxAnswerBytes: 1 << 20, MaxPayload: nc.MaxPayload(), AnswerSubject: g.s.GWAnswer})
	sh = &shell{g: g, c: c, timer: time.NewTimer(time.Hour)}
	t.Cleanup(func() { sh.timer.Stop() })
	sh.step(core.RCAnnounced{At: t0, RC: core.RCInfo{ID: "rc1", StartedAt: 1, Period: int64(time.Second)}})
	sub0 := messages.RCSubmission{V: messages.RCVersion, GWID: "gw1", Header: messages.RequestHeader{API: subjects.APIGetData},
		ReplyTo: g.s.GWAnswer("gw1", "r1"), Content: messages.ContentMsgpack, Deadline: t0 + int64(time.Minute), ReceivedAt: t0}
	sh.step(core.Arrived{At: t0, Req: core.Request{ID: "r1", ClientID: "k", Caller: inbox[:strings.LastIndexByte(inbox, '.')], Reply: inbox,
		API: subjects.APIGetData, Content: messages.ContentMsgpack, Chunks: true, Sub: sub0, Received: t0, Deadline: t0 + int64(time.Minute)}})

	payload, _ := messages.EncodeSized(bytes.Repeat([]byte{7}, 200<<10), 0)
	body, err := messages.Response{Header: messages.ResponseHeader{RequestID: "k", API: subjects.APIGetData},
		Payload: payload, Content: messages.ContentMsgpack}.Encode()
	if err != nil {
		t.Fatal(err)
	}
	h := nats.Header{}
	messages.StatusOK.Write(h)
	chunks, err = messages.SplitChunksBody("x", h, messages.Body{body}, int(nc.MaxPayload())-messages.RelayRoom)
	if err != nil || len(chunks) < 4 {
		t.Fatalf("%d chunks: %v", len(chunks), err)
	}
	next = func() *nats.Msg {
		t.Helper()
		m, err := sub.NextMsg(testWait)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	return g, sh, chunks, inbox, next
}

// step hands sh a chunk of r1's answer.
func stepChunk(sh *shell, m *nats.Msg) {
	sh.step(core.AnswerChunk{At: time.Now().UnixNano(), ID: "r1", Header: m.Header, Data: m.Data})
}

// A chunk of an answer passed on as it comes that cannot be published (here
// one whose headers no longer fit the max payload) ends the transfer: the
// core learns it (core.RelayFailed), the caller gets the GW's chunk end at
// once instead of waiting for its timeout, the rest of the answer is
// dropped, and the request counts as answered ERR, once, when the transfer
// ended.
func TestRelayedChunkNotSentEndsTheTransfer(t *testing.T) {
	g, sh, chunks, inbox, next := relayStory(t)
	chunks[1].Header.Set("Sg-Pad", strings.Repeat("p", 2*messages.RelayRoom)) // above the max payload now
	for _, m := range chunks[:3] {
		stepChunk(sh, m)
	}
	if n := sh.c.Relaying(); n != 0 {
		t.Fatalf("relaying %d answers after a chunk could not be sent", n)
	}
	if m := next(); m.Header.Get(messages.HdrChunkIndex) != "0" {
		t.Fatalf("first message %v, want chunk 0", m.Header)
	}
	if m := next(); !messages.IsChunkEnd(m.Header) {
		t.Fatalf("after the chunk that could not be sent: %v, want the GW's chunk end", m.Header)
	}
	stepChunk(sh, chunks[3]) // dropped: the transfer is over
	if err := g.nc.Publish(inbox, []byte("marker")); err != nil {
		t.Fatal(err)
	}
	if m := next(); string(m.Data) != "marker" {
		t.Fatalf("after the chunk end: %v, want nothing more", m.Header)
	}
	for code, want := range map[string]float64{"ERR": 1, "OK": 0} {
		if n := promtest.Value(t, g.met.requests.WithLabelValues(subjects.APIGetData, code)); n != want {
			t.Errorf("sg_gw_requests_total{code=%s} = %v, want %v", code, n, want)
		}
	}
	if n := promtest.Value(t, g.met.sendFailed); n != 1 {
		t.Errorf("sg_gw_answer_send_failures_total = %v, want 1", n)
	}
}

// An answer passed on as it comes counts when its last chunk went out, not
// when chunk 0 did: OK once, whole.
func TestRelayedAnswerCountsWhenItEnds(t *testing.T) {
	g, sh, chunks, _, next := relayStory(t)
	ok := func() float64 { return promtest.Value(t, g.met.requests.WithLabelValues(subjects.APIGetData, "OK")) }
	stepChunk(sh, chunks[0])
	if next().Header.Get(messages.HdrChunkIndex) != "0" || ok() != 0 {
		t.Fatalf("after chunk 0: counted OK %v, want 0", ok())
	}
	for _, m := range chunks[1:] {
		stepChunk(sh, m)
		next()
	}
	if ok() != 1 || sh.c.Relaying() != 0 {
		t.Fatalf("after the last chunk: counted OK %v, relaying %d; want 1, 0", ok(), sh.c.Relaying())
	}
}

// An answer whose chunks alone pass the GW's held bound (core) reaches its
// caller TOO_LARGE naming a stream, with no Retry-After: coming back would
// not help. (One ended because others hold the room is the core's
// RATE_LIMITED limit answer: core TestHeldBoundedAcrossRequests.)
func TestHeldFullAnswers(t *testing.T) {
	nc := natstest.Connect(t, natstest.Start(t))
	g := newTestGW(t, nc)
	for _, tc := range []struct {
		name         string
		chunks       bool
		err          error
		rc           messages.Code
		limit, names string
	}{
		{"alone above it", false, fmt.Errorf("%w: alone", messages.ErrTooLarge), messages.CodeTooLarge, "", messages.HdrAcceptStream},
	} {
		t.Run(tc.name, func(t *testing.T) {
			inbox := nc.NewInbox()
			sub, err := nc.SubscribeSync(inbox)
			if err != nil {
				t.Fatal(err)
			}
			ri := &reqInfo{api: subjects.APIGetData, id: "r1", clientID: "c1", reply: inbox, content: messages.ContentJSON,
				chunks: tc.chunks, received: time.Now(), log: zerolog.New(zerolog.NewTestWriter(t))}
			if err := g.forward(ri, answer{err: tc.err}); err != nil {
				t.Fatal(err)
			}
			m, err := sub.NextMsg(5 * time.Second)
			if err != nil {
				t.Fatal(err)
			}
			st, err := messages.ReadStatus(m.Header)
			if err != nil || st.RC != tc.rc || !strings.Contains(st.AI, tc.names) {
				t.Fatalf("status %+v (%v), want %s naming %s", st, err, tc.rc, tc.names)
			}
			if got := m.Header.Get(messages.HdrLimit); got != tc.limit {
				t.Fatalf("Sg-Limit %q, want %q", got, tc.limit)
			}
			if ra := m.Header.Get(messages.HdrRetryAfter); (ra != "") != (tc.limit != "") {
				t.Fatalf("Sg-Retry-After %q with Sg-Limit %q", ra, tc.limit)
			}
			if tc.chunks && strings.Contains(st.AI, messages.HdrAcceptChunks) {
				t.Fatalf("a caller that takes chunks is told to take chunks: %q", st.AI)
			}
		})
	}
}
