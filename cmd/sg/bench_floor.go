package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sg-project/sg/messages"
	"github.com/sg-project/sg/services/gw"
)

// smallFloorRow names the small request's floor in the bench's table.
const smallFloorRow = "small getData's floor: its messages, no work"

// smallFloor is the small request's floor, the small-request twin of the
// large answer's (relayMBs): the messages an sg getData of one portion
// makes, made by plain NATS subscribers that do no work but pass them on,
// each role on a connection of its own as sg's services are:
//
//	caller -> GW (request)       GW -> RC (submission)
//	RC -> DAP (portion)          RC -> Agg (expectation)
//	DAP -> Agg (partial)         DAP -> RC (completion)
//	Agg -> GW (answer)           GW -> caller (reply)
//
// With the request log, the GW also writes the entry (a conditional
// JetStream publish, "no message on its subject yet") as it submits, and,
// once the entry's acknowledgement and the answer are both in, `answered`
// (conditional on the entry's sequence, with a per-message TTL) before it
// replies, as sg's GW does (services/gw/requestlog.go), on a stream of the
// same configuration. Eight messages a request, twelve with the log (each
// write and its acknowledgement). What sg spends above this floor is its
// own work; what the floor spends above plain request-reply is what sg's
// protocol costs on this machine before any of it.
type smallFloor struct {
	subject string // the caller's: a request here is answered as sg's are
	base    string
	conns   [4]*nats.Conn // GW, RC, DAP, Agg
	subs    []*nats.Subscription
	log     bool
	js      jetstream.JetStream
	stream  string

	mu   sync.Mutex
	next uint64
	reqs map[uint64]*floorRequest // the GW's: requests not answered yet
	have map[uint64]int           // the Agg's: expectation and partial, counted

	body, entry []byte
}

// floorRequest is what the floor's GW holds of one request.
type floorRequest struct {
	reply     string
	entrySeq  uint64 // the entry's stream sequence, once acknowledged
	answer    []byte // the answer, once in
	answering bool   // `answered` is written or being written
}

// Sizes of the floor's messages, about sg's for the small request: the
// bodies of the submission, the portion, the expectation, the partial and
// the answer; the log entry's. A completion carries a header only. The cost
// of a message this small is per message, not per byte.
const (
	floorBodyBytes  = 320
	floorEntryBytes = 560
)

// answeredTTL is the TTL of the floor's `answered` records: sg's
// (gw.AnsweredTTL), as the Nats-TTL header says it.
var answeredTTL = gw.AnsweredTTL.String()

// floorStreamName is the floor's request log, made and deleted by the bench.
const floorStreamName = "sg-bench-floor"

func startSmallFloor(ctx context.Context, dial func() (*nats.Conn, error), withLog bool) (_ *smallFloor, err error) {
	f := &smallFloor{
		base: "_sg_bench.floor." + strings.TrimPrefix(nats.NewInbox(), nats.InboxPrefix),
		log:  withLog, reqs: map[uint64]*floorRequest{}, have: map[uint64]int{},
		body: bytes.Repeat([]byte{'x'}, floorBodyBytes), entry: bytes.Repeat([]byte{'e'}, floorEntryBytes),
	}
	f.subject = f.base + ".gw"
	defer func() {
		if err != nil {
			f.close()
		}
	}()
	for i := range f.conns {
		if f.conns[i], err = dial(); err != nil {
			return nil, err
		}
	}
	gwc, rcc, dapc, aggc := f.conns[0], f.conns[1], f.conns[2], f.conns[3]
	if withLog {
		if f.js, err = jetstream.New(gwc); err != nil {
			return nil, err
		}
		// The request log's configuration (services/gw/requestlog.go).
		_, err = f.js.CreateStream(ctx, jetstream.StreamConfig{
			Name: floorStreamName, Subjects: []string{f.base + ".log.>"}, MaxMsgsPerSubject: 1,
			Discard: jetstream.DiscardOld, Storage: jetstream.FileStorage, Replicas: 1, MaxAge: time.Hour,
			AllowDirect: true, AllowMsgTTL: true,
		})
		if err != nil {
			return nil, fmt.Errorf("the floor's request log: %w", err)
		}
		f.stream = floorStreamName
	}
	id := func(m *nats.Msg) uint64 {
		n, _ := strconv.ParseUint(m.Header.Get(messages.HdrRequestID), 10, 64)
		return n
	}
	send := func(c *nats.Conn, subject, reply string, n uint64, h nats.Header, body []byte) {
		hh := nats.Header{messages.HdrRequestID: []string{strconv.FormatUint(n, 10)}}
		for k, v := range h {
			hh[k] = v
		}
		_ = c.PublishMsg(&nats.Msg{Subject: subject, Reply: reply, Header: hh, Data: body})
	}
	sub := func(c *nats.Conn, subject string, fn nats.MsgHandler) error {
		s, err := c.Subscribe(subject, fn)
		if err == nil {
			f.subs = append(f.subs, s)
		}
		return err
	}
	subj := func(s string) string { return f.base + "." + s }
	err = errors.Join(
		// GW: a request is submitted (and its entry written); an answer is
		// replied, after `answered` with the log.
		sub(gwc, f.subject, func(m *nats.Msg) {
			f.mu.Lock()
			f.next++
			n := f.next
			f.reqs[n] = &floorRequest{reply: m.Reply}
			f.mu.Unlock()
			send(gwc, subj("rc"), "", n, nil, f.body)
			if f.log {
				send(gwc, subj("log."+strconv.FormatUint(n, 10)), subj("ack.entry."+strconv.FormatUint(n, 10)), n,
					nats.Header{jetstream.ExpectedLastSubjSeqHeader: []string{"0"}}, f.entry)
			}
		}),
		sub(gwc, subj("answer"), func(m *nats.Msg) {
			n := id(m)
			f.mu.Lock()
			r := f.reqs[n]
			if r == nil {
				f.mu.Unlock()
				return
			}
			r.answer = m.Data
			f.answerLocked(n, r)
		}),
		// An acknowledgement names its write in its subject: ack.<write>.<request>.
		sub(gwc, subj("ack.*.*"), func(m *nats.Msg) {
			n, _ := strconv.ParseUint(m.Subject[strings.LastIndexByte(m.Subject, '.')+1:], 10, 64)
			seq, ackErr := floorAck(m.Data)
			f.mu.Lock()
			r := f.reqs[n]
			if r == nil {
				f.mu.Unlock()
				return
			}
			if ackErr != nil {
				delete(f.reqs, n)
				f.mu.Unlock()
				_ = gwc.PublishMsg(&nats.Msg{Subject: r.reply, Header: nats.Header{"Floor-Error": []string{ackErr.Error()}}})
				return
			}
			if strings.HasPrefix(m.Subject, subj("ack.entry.")) {
				r.entrySeq = seq
				f.answerLocked(n, r)
				return
			}
			delete(f.reqs, n)
			f.mu.Unlock()
			_ = gwc.Publish(r.reply, r.answer)
		}),
		// RC: the portion to the DAP, what to expect to the Agg; a
		// completion ends the portion.
		sub(rcc, subj("rc"), func(m *nats.Msg) {
			n := id(m)
			send(rcc, subj("dap"), "", n, nil, f.body)
			send(rcc, subj("agg"), "", n, nil, f.body)
		}),
		sub(rcc, subj("done"), func(*nats.Msg) {}),
		// DAP: the partial to the Agg, the completion to the RC.
		sub(dapc, subj("dap"), func(m *nats.Msg) {
			n := id(m)
			send(dapc, subj("agg"), "", n, nil, f.body)
			send(dapc, subj("done"), "", n, nil, nil)
		}),
		// Agg: answers once it has the expectation and the partial.
		sub(aggc, subj("agg"), func(m *nats.Msg) {
			n := id(m)
			f.mu.Lock()
			f.have[n]++
			both := f.have[n] == 2
			if both {
				delete(f.have, n)
			}
			f.mu.Unlock()
			if both {
				send(aggc, subj("answer"), "", n, nil, f.body)
			}
		}),
	)
	if err != nil {
		return nil, err
	}
	for _, c := range f.conns {
		if err := c.Flush(); err != nil {
			return nil, err
		}
	}
	return f, nil
}

// answerLocked replies to request n once its answer is in: at once without
// the log; with it, once the entry is acknowledged, by writing `answered`
// first (the reply goes on its acknowledgement). Unlocks f.mu.
func (f *smallFloor) answerLocked(n uint64, r *floorRequest) {
	gwc := f.conns[0]
	switch {
	case r.answer == nil || r.answering:
		f.mu.Unlock()
	case !f.log:
		delete(f.reqs, n)
		f.mu.Unlock()
		_ = gwc.Publish(r.reply, r.answer)
	case r.entrySeq == 0:
		f.mu.Unlock() // the entry's acknowledgement answers
	default:
		r.answering = true
		seq := r.entrySeq
		f.mu.Unlock()
		h := nats.Header{messages.HdrRequestID: []string{strconv.FormatUint(n, 10)},
			jetstream.ExpectedLastSubjSeqHeader: []string{strconv.FormatUint(seq, 10)},
			jetstream.MsgTTLHeader:              []string{answeredTTL}}
		_ = gwc.PublishMsg(&nats.Msg{Subject: f.base + ".log." + strconv.FormatUint(n, 10), Reply: f.base + ".ack.answered." + strconv.FormatUint(n, 10), Header: h})
	}
}

// floorAck reads a JetStream publish acknowledgement's sequence, or its error.
func floorAck(data []byte) (uint64, error) {
	if i := bytes.Index(data, []byte(`"error"`)); i >= 0 {
		return 0, fmt.Errorf("request log write refused: %s", data)
	}
	i := bytes.Index(data, []byte(`"seq":`))
	if i < 0 {
		return 0, fmt.Errorf("request log write: no sequence in %q", data)
	}
	rest := data[i+len(`"seq":`):]
	j := 0
	for j < len(rest) && rest[j] >= '0' && rest[j] <= '9' {
		j++
	}
	return strconv.ParseUint(string(rest[:j]), 10, 64)
}

// call is one caller's request through the floor.
func (f *smallFloor) call(c *nats.Conn, body []byte) (int, error) {
	m, err := c.Request(f.subject, body, 10*time.Second)
	if err != nil {
		return 0, err
	}
	if e := m.Header.Get("Floor-Error"); e != "" {
		return 0, errors.New(e)
	}
	return len(m.Data), nil
}

func (f *smallFloor) close() {
	for _, s := range f.subs {
		_ = s.Unsubscribe()
	}
	if f.stream != "" {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = f.js.DeleteStream(ctx, f.stream)
		cancel()
	}
	for _, c := range f.conns {
		if c != nil {
			c.Close()
		}
	}
}

// floorPath says which messages the floor makes.
func floorPath(withLog bool) string {
	p := "request, submission, portion, expectation, partial, completion, answer, reply"
	if withLog {
		p += "; the log entry and `answered` written, each acknowledged"
	}
	return p
}
