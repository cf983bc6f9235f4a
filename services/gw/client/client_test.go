package client_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/sg-project/sg/messages"
	"github.com/sg-project/sg/services/gw/client"
	"github.com/sg-project/sg/subjects"
	"github.com/sg-project/sg/test/natstest"
)

// fakeGW answers on a GW API subject like the GW does (status in headers,
// envelope in msgpack); it is a plain NATS responder.
type fakeGW struct {
	t  *testing.T
	nc *nats.Conn
	s  subjects.Subjects
}

func newFakeGW(t *testing.T) (*fakeGW, *nats.Conn) {
	srv := natstest.Start(t)
	return &fakeGW{t: t, nc: natstest.Connect(t, srv), s: subjects.Default()}, natstest.Connect(t, srv)
}

func (g *fakeGW) handle(api string, fn func(m *nats.Msg)) {
	g.t.Helper()
	sub, err := g.nc.Subscribe(g.s.GWAPI(api), fn)
	if err != nil {
		g.t.Fatal(err)
	}
	g.t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := g.nc.Flush(); err != nil {
		g.t.Fatal(err)
	}
}

// answer replies to m with status st, payload (msgpack) and extra headers,
// in chunks of at most chunk bytes when chunk > 0.
func (g *fakeGW) answer(m *nats.Msg, st messages.Status, payload []byte, extra nats.Header, chunk int) {
	id := m.Header.Get(messages.HdrRequestID)
	body, err := messages.Response{Header: messages.ResponseHeader{V: messages.RequestVersion, RequestID: id,
		API: subjects.APIGetData, Status: st}, Payload: payload}.Encode()
	if err != nil {
		g.t.Error(err)
		return
	}
	h := nats.Header{}
	st.Write(h)
	h.Set(messages.HdrRequestID, id)
	h.Set(messages.HdrContentType, string(messages.ContentMsgpack))
	for k, v := range extra {
		h[k] = v
	}
	if chunk > 0 {
		_, err = messages.SendChunked(g.nc, m.Reply, h, body, chunk)
	} else {
		err = g.nc.PublishMsg(&nats.Msg{Subject: m.Reply, Header: h, Data: body})
	}
	if err != nil {
		g.t.Error(err)
	}
}

func table(t testing.TB, rows int) []byte {
	tb := messages.NewTable([]messages.ColumnSpec{{Name: "sym", Type: messages.TypeSymbol}, {Name: "n", Type: messages.TypeInt}})
	for i := range rows {
		if err := tb.AppendRow(fmt.Sprintf("s%d", i%7), int64(i)); err != nil {
			t.Fatal(err)
		}
	}
	b, err := messages.Encode(tb)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func query() client.GetDataQuery {
	return client.GetDataQuery{Args: messages.GetDataArgs{Table: "trade", StartTS: time.Unix(0, 0), EndTS: time.Unix(3600, 0)}}
}

// The proof for the client: the GW answers RATE_LIMITED
// (Sg-Retry-After: 1) to the requests in flight; every caller pauses
// together, the GW sees no request inside the pause, and after it every
// caller gets its answer.
func TestRateLimitedPausesAllCallersTogether(t *testing.T) {
	const (
		inFlight = 4
		callers  = 20
		pause    = time.Second
	)
	g, cnc := newFakeGW(t)
	var (
		mu       sync.Mutex
		held     []*nats.Msg
		pauseEnd time.Time // zero until the RATE_LIMITED answers went out
		inside   int       // requests that arrived inside the pause
		total    int
	)
	ok := table(t, 3)
	limited := messages.Errorf(messages.CodeRateLimited, messages.CodeErr, "A downstream asked for a pause")
	retry := nats.Header{messages.HdrRetryAfter: {"1"}}
	g.handle(subjects.APIGetData, func(m *nats.Msg) {
		mu.Lock()
		defer mu.Unlock()
		total++
		now := time.Now()
		switch {
		case pauseEnd.IsZero():
			// Hold the first requests until every slot is in flight, then refuse them all.
			held = append(held, m)
			if len(held) == inFlight {
				pauseEnd = time.Now().Add(pause)
				for _, h := range held {
					g.answer(h, limited, nil, retry, 0)
				}
			}
		case now.Before(pauseEnd):
			inside++
			g.answer(m, limited, nil, retry, 0)
		default:
			g.answer(m, messages.StatusOK, ok, nil, 0)
		}
	})

	cl := client.NewWithOptions(cnc, subjects.Default(), client.Options{MaxInFlight: inFlight})
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	done := make(chan time.Time, callers)
	for range callers {
		wg.Go(func() {
			r, err := cl.GetData(ctx, query())
			if err != nil {
				t.Errorf("caller: %v", err)
				return
			}
			if r.Table.NumRows() != 3 || r.RequestID == "" {
				t.Errorf("caller got %d rows, request id %q", r.Table.NumRows(), r.RequestID)
			}
			done <- time.Now()
		})
	}
	wg.Wait()
	close(done)
	mu.Lock()
	defer mu.Unlock()
	t.Logf("GW saw %d requests: %d refused in flight, %d inside the pause", total, inFlight, inside)
	if inside != 0 {
		t.Errorf("%d requests reached the GW inside the pause, want 0", inside)
	}
	if total != callers+inFlight {
		t.Errorf("GW saw %d requests, want %d callers + %d tried again", total, callers, inFlight)
	}
	for at := range done {
		if at.Before(pauseEnd) {
			t.Errorf("a caller was answered %s before the pause ended", pauseEnd.Sub(at))
		}
	}
}

// A caller whose context ends before the answer leaves at once, and the GW
// gets a cancel with the request's id, from the same inbox as the request.
func TestContextEndSendsCancel(t *testing.T) {
	g, cnc := newFakeGW(t)
	requests := natstest.Subscribe(t, g.nc, g.s.GWAPI(subjects.APIGetData))
	cancels := natstest.Subscribe(t, g.nc, g.s.GWCancel())
	cl := client.New(cnc, subjects.Default())
	defer cl.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, err := cl.GetData(ctx, query())
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want the deadline", err)
	}
	req, err := requests.NextMsg(5 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	c, err := cancels.NextMsg(5 * time.Second)
	if err != nil {
		t.Fatalf("no cancel: %v", err)
	}
	id := req.Header.Get(messages.HdrRequestID)
	if id == "" || c.Header.Get(messages.HdrRequestID) != id || len(c.Data) != 0 {
		t.Fatalf("cancel %v %q for request %q", c.Header, c.Data, id)
	}
	prefix := func(s string) string { return s[:strings.LastIndexByte(s, '.')+1] }
	if c.Reply == "" || prefix(c.Reply) != prefix(req.Reply) {
		t.Fatalf("cancel reply %q, request reply %q: want the same inbox", c.Reply, req.Reply)
	}
	// The GW's answer to the cancel, and a late answer to the request, are dropped.
	if err := g.nc.Publish(c.Reply, []byte("ok")); err != nil {
		t.Fatal(err)
	}
	g.answer(req, messages.StatusOK, table(t, 1), nil, 0)
	if err := g.nc.Flush(); err != nil {
		t.Fatal(err)
	}
}

// Concurrent answers in chunks, on the one reply subscription, each reach
// their own caller whole.
func TestChunkedAnswersReassembled(t *testing.T) {
	g, cnc := newFakeGW(t)
	g.handle(subjects.APIGetData, func(m *nats.Msg) {
		var req messages.Request
		req, err := messages.DecodeRequest(m.Header, m.Data)
		if err != nil {
			t.Error(err)
			return
		}
		a, err := messages.DecodeGetDataArgsMsgpack(req.Payload)
		if err != nil {
			t.Error(err)
			return
		}
		g.answer(m, messages.StatusOK, table(t, a.Limit), nil, 4096)
	})
	cl := client.New(cnc, subjects.Default())
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			q := query()
			q.Args.Limit = 3000 + i
			r, err := cl.GetData(ctx, q)
			if err != nil {
				t.Errorf("caller %d: %v", i, err)
				return
			}
			if n := r.Table.NumRows(); n != 3000+i {
				t.Errorf("caller %d: %d rows, want %d", i, n, 3000+i)
			}
		})
	}
	wg.Wait()
}

// A bad chunk fails the call with a chunk error instead of hanging; no GW
// is a quick ErrNoResponders; a RATE_LIMITED answer is returned to the
// caller after MaxAttempts, as an AnswerError.
func TestErrors(t *testing.T) {
	g, cnc := newFakeGW(t)
	g.handle(subjects.APIGetData, func(m *nats.Msg) {
		h := nats.Header{messages.HdrChunkIndex: {"5"}, messages.HdrChunkCount: {"2"}, messages.HdrChunkTotal: {"10"}}
		_ = g.nc.PublishMsg(&nats.Msg{Subject: m.Reply, Header: h, Data: []byte("xx")})
	})
	g.handle(subjects.APIPing, func(m *nats.Msg) {
		g.answer(m, messages.Errorf(messages.CodeRateLimited, messages.CodeErr, "slow down"), nil,
			nats.Header{messages.HdrRetryAfter: {"0"}}, 0)
	})
	cl := client.NewWithOptions(cnc, subjects.Default(), client.Options{MaxAttempts: 2, MinPause: 10 * time.Millisecond})
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := cl.GetData(ctx, query()); !errors.Is(err, messages.ErrChunk) {
		t.Errorf("bad chunk: err = %v, want ErrChunk", err)
	}
	if _, err := cl.Do(ctx, subjects.APISQL, nil, messages.Opts{}); !errors.Is(err, nats.ErrNoResponders) {
		t.Errorf("no GW: err = %v, want ErrNoResponders", err)
	}
	resp, err := cl.Do(ctx, subjects.APIPing, nil, messages.Opts{})
	if err != nil || resp.Header.Status.RC != messages.CodeRateLimited {
		t.Fatalf("ping: %+v, %v; want the RATE_LIMITED answer", resp.Header, err)
	}
	var ae *client.AnswerError
	if err := client.StatusError(resp); !errors.As(err, &ae) || !errors.Is(err, client.ErrAnswer) || ae.Status.RC != messages.CodeRateLimited {
		t.Fatalf("StatusError = %v", err)
	}
	cl.Close()
	if _, err := cl.Do(ctx, subjects.APIPing, nil, messages.Opts{}); !errors.Is(err, client.ErrClosed) {
		t.Fatalf("after Close: err = %v, want ErrClosed", err)
	}
}

// A stream goes through the endpoint's rate-limit actor like any call: the
// GW's RATE_LIMITED answer to a stream pauses the endpoint for its
// Sg-Retry-After, and the stream is asked for again only after the pause and
// read whole.
func TestStreamsGoThroughTheRateLimitActor(t *testing.T) {
	g, cnc := newFakeGW(t)
	var (
		mu       sync.Mutex
		pauseEnd time.Time
		arrived  []time.Time
	)
	limited := messages.Errorf(messages.CodeRateLimited, messages.CodeErr, "A downstream asked for a pause")
	win := table(t, 3)
	g.handle(subjects.APIGetData, func(m *nats.Msg) {
		mu.Lock()
		defer mu.Unlock()
		arrived = append(arrived, time.Now())
		if pauseEnd.IsZero() {
			pauseEnd = time.Now().Add(time.Second)
			g.answer(m, limited, nil, nats.Header{messages.HdrRetryAfter: {"1"}}, 0)
			return
		}
		id := m.Header.Get(messages.HdrRequestID)
		for seq := range 2 {
			h := nats.Header{}
			messages.SetStreamFrame(h, "s1", seq, seq == 1)
			data := win
			if seq == 0 {
				messages.StatusOK.Write(h)
				var err error
				if data, err = (messages.Response{Header: messages.ResponseHeader{V: messages.RequestVersion, RequestID: id,
					API: subjects.APIGetData, Status: messages.StatusOK}, Payload: win}).Encode(); err != nil {
					t.Error(err)
				}
			}
			if err := g.nc.PublishMsg(&nats.Msg{Subject: m.Reply, Header: h, Data: data}); err != nil {
				t.Error(err)
			}
		}
	})
	cl := client.New(cnc, subjects.Default())
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	rows := 0
	hdr, err := cl.GetDataStream(ctx, query(), func(tb messages.Table) error {
		rows += tb.NumRows()
		return nil
	})
	if err != nil || !hdr.Status.IsOK() || rows != 6 {
		t.Fatalf("stream: %v, status %+v, %d rows (want 6)", err, hdr.Status, rows)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(arrived) != 2 {
		t.Fatalf("GW saw %d requests, want 2 (refused, then asked again)", len(arrived))
	}
	if arrived[1].Before(pauseEnd) {
		t.Errorf("the stream was asked for again %s before the pause ended", pauseEnd.Sub(arrived[1]))
	}
}

// StreamJSON writes a JSON answer stream as the one envelope a whole answer
// is and returns the status frame 0's header names (checked once, by the
// writer); a frame 0 whose header does not validate writes nothing.
func TestStreamJSONWritesOneEnvelope(t *testing.T) {
	g, cnc := newFakeGW(t)
	windows := []string{`[{"i":0}]`, `[]`, `[{"i":1},{"i":2}]`}
	st := messages.Status{RC: messages.CodeOK, AC: messages.CodeOK, AI: "2 of 3 DAPs answered"}
	var (
		mu     sync.Mutex
		frame0 []byte
	)
	// The fake GW sends every frame even after the client has stopped reading:
	// the test waits for it to finish before the next request and the end
	// (it published on a closed connection when the test ended first).
	sent := make(chan struct{}, 2)
	waitSent := func() {
		t.Helper()
		select {
		case <-sent:
		case <-time.After(10 * time.Second):
			t.Fatal("the fake GW did not finish sending its frames")
		}
	}
	g.handle(subjects.APIGetData, func(m *nats.Msg) {
		mu.Lock()
		defer mu.Unlock()
		defer func() { sent <- struct{}{} }()
		for seq, w := range windows {
			h := nats.Header{}
			messages.SetStreamFrame(h, "s1", seq, seq == len(windows)-1)
			data := []byte(w)
			if seq == 0 {
				messages.StatusOK.Write(h)
				data = frame0
			}
			if err := g.nc.PublishMsg(&nats.Msg{Subject: m.Reply, Header: h, Data: data}); err != nil {
				t.Error(err)
			}
		}
	})
	hdr := messages.ResponseHeader{V: messages.RequestVersion, RequestID: "r1", API: subjects.APIGetData, Status: st}
	f0, err := messages.Response{Header: hdr, Payload: []byte(windows[0]), Content: messages.ContentJSON}.Encode()
	if err != nil {
		t.Fatal(err)
	}
	setFrame0 := func(b []byte) {
		mu.Lock()
		defer mu.Unlock()
		frame0 = b
	}
	setFrame0(f0)
	whole, err := messages.Response{Header: hdr, Payload: []byte(`[{"i":0},{"i":1},{"i":2}]`), Content: messages.ContentJSON}.Encode()
	if err != nil {
		t.Fatal(err)
	}
	cl := client.New(cnc, subjects.Default())
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var out strings.Builder
	got, err := cl.StreamJSON(ctx, subjects.APIGetData, []byte(`{"table":"trade"}`), messages.Opts{}, &out)
	if err != nil || got != st {
		t.Fatalf("StreamJSON: status %+v, %v; want %+v", got, err, st)
	}
	if out.String() != string(whole) {
		t.Fatalf("wrote %s\nwant %s", out.String(), whole)
	}
	waitSent()

	setFrame0([]byte(`{"header":{"requestId":"r1"},"payload":[{"i":0}]}`)) // no version
	out.Reset()
	if _, err := cl.StreamJSON(ctx, subjects.APIGetData, nil, messages.Opts{}, &out); !errors.Is(err, messages.ErrInvalid) || out.Len() != 0 {
		t.Fatalf("a frame 0 without a version: %v, wrote %q", err, out.String())
	}
	waitSent()
}

// A job poll holds one of its endpoint's MaxInFlight slots, as Do and
// streams do: with one slot, a second poll waits for the first to finish
// (here until its context ends) and never reaches the GW meanwhile.
func TestPollTakesAnInFlightSlot(t *testing.T) {
	g, cnc := newFakeGW(t)
	polls := make(chan *nats.Msg, 4)
	sub, err := g.nc.Subscribe(g.s.GWJob(), func(m *nats.Msg) { polls <- m })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := g.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	cl := client.NewWithOptions(cnc, subjects.Default(), client.Options{MaxInFlight: 1})
	first := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, _, _, err := cl.Poll(ctx, "j1")
		first <- err
	}()
	var held *nats.Msg
	select {
	case held = <-polls:
	case <-time.After(10 * time.Second):
		t.Fatal("the first poll never reached the GW")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if _, _, _, err := cl.Poll(ctx, "j2"); !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "in flight") {
		t.Fatalf("second poll with the one slot taken: %v, want to wait for the slot until its deadline", err)
	}
	g.answer(held, messages.StatusOK, nil, nil, 0)
	if err := <-first; err != nil {
		t.Fatalf("first poll: %v", err)
	}
	ctx3, cancel3 := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel3()
	next := make(chan string, 1)
	go func() {
		m := <-polls
		next <- m.Header.Get(messages.HdrJobID)
		g.answer(m, messages.StatusOK, nil, nil, 0)
	}()
	if _, _, done, err := cl.Poll(ctx3, "j3"); err != nil || !done {
		t.Fatalf("third poll, the slot free again: done %t, %v", done, err)
	}
	// Polls from one connection arrive in order: j2 would come first.
	if id := <-next; id != "j3" {
		t.Fatalf("the GW got a poll for %q after j1, want j3", id)
	}
}

// An ACCEPTED answer whose job status does not decode says why, and one
// without a job id says so, never "...: <nil>".
func TestSubmitAcceptedWithoutJobStatus(t *testing.T) {
	g, cnc := newFakeGW(t)
	payloads := make(chan []byte, 1)
	g.handle(subjects.APIPing, func(m *nats.Msg) {
		g.answer(m, messages.Status{RC: messages.CodeAccepted, AC: messages.CodeOK}, <-payloads, nil, 0)
	})
	cl := client.New(cnc, subjects.Default())
	for name, p := range map[string][]byte{"no job id": mustEncode(t, map[string]any{"v": 1, "state": "queued"}), "not a job status": mustEncode(t, "text")} {
		payloads <- p
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err := cl.Submit(ctx, messages.RequestHeader{API: subjects.APIPing}, nil)
		cancel()
		if err == nil || strings.Contains(err.Error(), "<nil>") {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func mustEncode(t *testing.T, v any) []byte {
	t.Helper()
	b, err := messages.Encode(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
