package agg

import (
	"bytes"
	"net"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/sg-project/sg/messages"
	"github.com/sg-project/sg/test/natstest"
)

// A frame's buffer is given back (messages.ReleaseBuffer) once PublishMsg
// returns (frameSender.send): nats.go must have copied the data by then,
// connected (into its write buffer) and disconnected alike (into the pending
// buffer it flushes once reconnected). Poisoned on release (TestMain), a
// buffer it only referenced would arrive as junk.
func TestFrameBufferGivenBackOncePublishedWhileReconnecting(t *testing.T) {
	s := natstest.Start(t)
	port := s.Addr().(*net.TCPAddr).Port
	url := s.ClientURL()
	disconnected, reconnected := make(chan struct{}, 1), make(chan struct{}, 1)
	nc, err := nats.Connect(url, nats.MaxReconnects(-1), nats.ReconnectWait(10*time.Millisecond),
		nats.DisconnectErrHandler(func(*nats.Conn, error) { disconnected <- struct{}{} }),
		nats.ReconnectHandler(func(*nats.Conn) { reconnected <- struct{}{} }))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	// Its own subscription: sent again on reconnecting, before the pending
	// publishes, so the frame published while disconnected comes back.
	sub := natstest.Subscribe(t, nc, "frames")
	frame := func(i byte) []byte { return bytes.Repeat([]byte{i}, 100<<10) } // above the free list's minimum: kept
	publish := func(i byte) {
		data := frame(i)
		if err := nc.PublishMsg(&nats.Msg{Subject: "frames", Header: nats.Header{"Sg-Frame": {string('0' + i)}}, Data: data}); err != nil {
			t.Fatalf("publish %d: %v", i, err)
		}
		messages.ReleaseBuffer(data) // as send does
	}
	next := func(i byte) {
		m, err := sub.NextMsg(wait)
		if err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
		if !bytes.Equal(m.Data, frame(i)) {
			t.Fatalf("frame %d arrived as other bytes than published (%x...): its buffer was read after its release", i, m.Data[:8])
		}
	}
	publish(1) // connected
	next(1)
	s.Shutdown()
	s.WaitForShutdown()
	natstest.Receive(t, disconnected, "disconnect", wait)
	publish(2) // into the reconnect buffer
	natstest.Start(t, func(o *server.Options) { o.Port = port })
	natstest.Receive(t, reconnected, "reconnect", wait)
	next(2)
}
