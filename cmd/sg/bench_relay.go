package main

import (
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
)

// relayFloorRow names the floor's rows in the bench's table.
const relayFloorRow = "large answer's floor: its bytes relayed, no work (plain: publish)"

// relayAnswerWait bounds the wait for one relayed answer's last byte.
const relayAnswerWait = 30 * time.Second

// relayFloor is relayMBs for answers of the size of sg's whole JSON and
// msgpack answers: the sender and the two relays on connections from dial
// (as the DAPs, the Agg and the GW connect), the receiver on sink (the
// caller's connection). k answers per encoding, as the large rows ask.
func relayFloor(dial func() (*nats.Conn, error), sink *nats.Conn, jsonBytes, msgpackBytes int64, k int, prof phaseProfiles) (jsonMBs, msgpackMBs measured, err error) {
	var conns [3]*nats.Conn
	for i := range conns {
		c, err := dial()
		if err != nil {
			return measured{}, measured{}, err
		}
		defer c.Close()
		conns[i] = c
	}
	jsonMBs, err = relayMBs(conns, sink, jsonBytes, k, prof, "relay-json")
	if err != nil {
		return measured{}, measured{}, fmt.Errorf("JSON-sized answers: %w", err)
	}
	msgpackMBs, err = relayMBs(conns, sink, msgpackBytes, k, prof, "relay-msgpack")
	if err != nil {
		return measured{}, measured{}, fmt.Errorf("msgpack-sized answers: %w", err)
	}
	return jsonMBs, msgpackMBs, nil
}

// relayMBs is the floor of a large answer's path, measured with plain NATS:
// answers of size bytes, one at a time, sent on conns[0] in messages of the
// max payload (less 1 KiB), passed on unchanged by a subscriber on conns[1]
// and one on conns[2], and taken whole off sink: the three crossings of an
// answer's bytes (DAP -> Agg -> GW -> caller), each hop pipelined, with no
// work done on the bytes: a reference for sg's answer, which makes the same
// crossings in messages no larger, though not a strict bound (its first
// crossing comes from several DAPs at once, in partials of other sizes).
func relayMBs(conns [3]*nats.Conn, sink *nats.Conn, size int64, k int, prof phaseProfiles, phase string) (measured, error) {
	if size <= 0 {
		return measured{}, errors.New("no answer size")
	}
	chunk := int(min(conns[0].MaxPayload(), conns[1].MaxPayload(), conns[2].MaxPayload(), sink.MaxPayload()) - 1024)
	if chunk <= 0 {
		return measured{}, errors.New("max payload below 1 KiB")
	}
	base := "_sg_bench.relay." + strings.TrimPrefix(nats.NewInbox(), nats.InboxPrefix)
	hop := func(i int) string { return fmt.Sprintf("%s.%d", base, i) }
	var failed atomic.Pointer[error]
	var subs []*nats.Subscription
	defer func() {
		for _, s := range subs {
			_ = s.Unsubscribe()
		}
	}()
	for i := 1; i <= 2; i++ {
		c, next := conns[i], hop(i)
		sub, err := c.Subscribe(hop(i-1), func(m *nats.Msg) {
			if err := c.Publish(next, m.Data); err != nil {
				failed.CompareAndSwap(nil, &err)
			}
		})
		if err != nil {
			return measured{}, err
		}
		subs = append(subs, sub)
	}
	// Answers are sent one at a time, so the bytes received since the last
	// answer ended are this answer's.
	var got int64
	done := make(chan struct{}, 1)
	sub, err := sink.Subscribe(hop(2), func(m *nats.Msg) {
		if got += int64(len(m.Data)); got >= size {
			got = 0
			done <- struct{}{}
		}
	})
	if err != nil {
		return measured{}, err
	}
	subs = append(subs, sub)
	for i, s := range subs {
		if err := s.SetPendingLimits(-1, -1); err != nil {
			return measured{}, err
		}
		c := sink
		if i < 2 {
			c = conns[i+1]
		}
		if err := c.Flush(); err != nil {
			return measured{}, err
		}
	}
	payload := make([]byte, chunk)
	return prof.timedMBs(phase, k, func() (int64, error) {
		for left := size; left > 0; left -= int64(chunk) {
			if err := conns[0].Publish(hop(0), payload[:min(left, int64(chunk))]); err != nil {
				return 0, err
			}
		}
		select {
		case <-done:
		case <-time.After(relayAnswerWait):
			if e := failed.Load(); e != nil {
				return 0, fmt.Errorf("a relay could not pass an answer of %d bytes on: %w", size, *e)
			}
			return 0, fmt.Errorf("an answer of %d bytes not relayed within %s", size, relayAnswerWait)
		}
		if e := failed.Load(); e != nil {
			return 0, *e
		}
		return size, nil
	})
}
