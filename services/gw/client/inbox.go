package client

import (
	"fmt"
	"strings"
	"sync"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nuid"
	"github.com/sg-project/sg/messages"
)

// inbox is the client's one reply subscription: every request's reply
// subject is prefix+token, and a map of waiters by token routes each answer
// (or each chunk of it) to its caller. One subscription for all requests
// keeps a request to a publish and a map entry, and chunked answers (many
// messages to one reply subject) still reach their reassembler.
type inbox struct {
	prefix string // "_INBOX.<nuid>."
	limit  int64  // bytes of one reassembled answer

	mu      sync.Mutex
	sub     *nats.Subscription
	waiters map[string]*waiter
	closed  bool
}

// waiter is one request's answer being received. ra is touched only by the
// subscription's handler (one goroutine); h, data and err are written before
// done is closed and read after.
type waiter struct {
	ra   *messages.Reassembler
	done chan struct{}
	h    nats.Header
	data []byte
	err  error
}

func newInbox(nc *nats.Conn, limit int64) (*inbox, error) {
	in := &inbox{prefix: nc.NewInbox() + ".", limit: limit, waiters: map[string]*waiter{}}
	sub, err := nc.Subscribe(in.prefix+"*", in.handle)
	if err != nil {
		return nil, fmt.Errorf("client: subscribe %s*: %w", in.prefix, err)
	}
	// Chunks of concurrent answers share this buffer; bounded, never unlimited.
	if err := sub.SetPendingLimits(-1, int(min(4*limit, 1<<31-1))); err != nil {
		_ = sub.Unsubscribe()
		return nil, fmt.Errorf("client: pending limits: %w", err)
	}
	in.sub = sub
	return in, nil
}

// reply returns a new reply subject and its waiter; forget(token) removes it.
func (in *inbox) reply() (subject, token string, w *waiter, err error) {
	token = nuid.Next()
	w = &waiter{ra: messages.NewReassembler(in.limit), done: make(chan struct{})}
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.closed {
		return "", "", nil, ErrClosed
	}
	in.waiters[token] = w
	return in.prefix + token, token, w, nil
}

// subject returns a reply subject under the inbox with no waiter: its
// answers are dropped (the answer to a cancel).
func (in *inbox) subject() string { return in.prefix + nuid.Next() }

func (in *inbox) forget(token string) {
	in.mu.Lock()
	delete(in.waiters, token)
	in.mu.Unlock()
}

// handle routes one message to its waiter. The token comes from the
// network: an unknown one (a late chunk, a cancel's answer, a forged reply)
// is dropped.
func (in *inbox) handle(m *nats.Msg) {
	token, ok := strings.CutPrefix(m.Subject, in.prefix)
	if !ok {
		return
	}
	in.mu.Lock()
	w := in.waiters[token]
	in.mu.Unlock()
	if w == nil || w.ra.Done() {
		return
	}
	select {
	case <-w.done:
		return // already failed
	default:
	}
	if len(m.Data) == 0 && m.Header.Get("Status") == "503" {
		w.err = nats.ErrNoResponders
		close(w.done)
		return
	}
	done, err := w.ra.Add(m.Header, m.Data)
	switch {
	case err != nil:
		w.err = err
		close(w.done)
	case done:
		w.h = w.ra.Header()
		w.data, w.err = w.ra.Payload()
		close(w.done)
	}
}

func (in *inbox) close() {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.closed {
		return
	}
	in.closed = true
	_ = in.sub.Unsubscribe()
}
