package gw

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/sg-project/sg/messages"
	"github.com/sg-project/sg/subjects"
	"github.com/sg-project/sg/test/natstest"
)

// A chunk 0 passed on as it comes (core/relay.go) that is above the max
// payload (the server's shrank since the relay judged it) is never cut
// again: that would make it a transfer of its own, which the caller would
// complete, cut. The caller gets an error answer instead.
func TestRelayedChunkAboveMaxPayloadIsNotCutAgain(t *testing.T) {
	nc := natstest.Connect(t, natstest.Start(t))
	g, err := New(Config{ID: "gw1", NC: nc, Subjects: subjects.Default(), Log: zerolog.New(zerolog.NewTestWriter(t))})
	if err != nil {
		t.Fatal(err)
	}
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
