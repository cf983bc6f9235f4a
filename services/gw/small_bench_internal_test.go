package gw

import (
	"encoding/json"
	"io"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"github.com/nats-io/nuid"
	"github.com/rs/zerolog"

	"github.com/sg-project/sg/messages"
	"github.com/sg-project/sg/services/cputime"
	"github.com/sg-project/sg/services/dap/demo"
	"github.com/sg-project/sg/services/dap/engine"
	"github.com/sg-project/sg/services/defaults"
	"github.com/sg-project/sg/services/logwriter"
	"github.com/sg-project/sg/subjects"
	"github.com/sg-project/sg/test/natstest"
	"github.com/sg-project/sg/test/promtest"
)

// BenchmarkSmallRequestGW is the GW's share of a small getData (issue 10:
// Go benchmarks for each hop): a caller's request, as the Go client sends it
// (Do: msgpack, Sg-Accept-Chunks; DoJSON: JSON; each with Sg-Request-Id and
// a reply subject under its inbox), handed to the GW's API handler (handle)
// on the benchmark's goroutine, as micro calls it; then, as the loop does,
// the handler's input is stepped through the shell: the submission to the
// RC is encoded and published. The Agg's answer, as the Agg sends it
// (headers, envelope, a one-row trade table), is handed to the answer
// callback (onAnswer) and stepped the same way: the caller's answer is
// published. Publishes go to an embedded server with no subscriber;
// neither NATS's delivery nor micro's wrapper (its stats, under a lock)
// count, nor the channel's wait: ns/op, allocs/op and B/op are the GW's own
// (shell and core).
//
// With the request log (requestlog=on, a file stream as deployed, on the
// embedded server's JetStream): the request's entry is written when it is
// accepted and `answered` before the answer goes out; the loop's work on
// each acknowledgement counts, and so does waiting for it: ns/op then holds
// the embedded server's two stores and acknowledgements, and allocs/op and
// B/op its allocations (the runtime counts the process's). The difference
// from requestlog=off is what the log costs a request, the GW's and the
// server's together.
//
// log=info: the GW logs at sg run's level (info: a line per answer),
// through services/logwriter to io.Discard, as sg bench runs it; log=off as
// the other hops' benchmarks.
func BenchmarkSmallRequestGW(b *testing.B) {
	for _, c := range []smallRequestGWCase{
		{content: messages.ContentMsgpack},
		{content: messages.ContentJSON},
		{content: messages.ContentMsgpack, requestLog: true},
		{content: messages.ContentJSON, requestLog: true},
		{content: messages.ContentMsgpack, logInfo: true},
	} {
		b.Run(c.name(), func(b *testing.B) { benchSmallRequestGW(b, c) })
	}
}

type smallRequestGWCase struct {
	content    messages.Content
	requestLog bool
	logInfo    bool
}

func (c smallRequestGWCase) name() string {
	rl, log := "off", "off"
	if c.requestLog {
		rl = "on"
	}
	if c.logInfo {
		log = "info"
	}
	return "content=" + string(c.content) + "/requestlog=" + rl + "/log=" + log
}

func benchSmallRequestGW(b *testing.B, c smallRequestGWCase) {
	log := zerolog.Nop()
	if c.logInfo {
		lines := logwriter.New(io.Discard, defaults.LogBuffer)
		b.Cleanup(func() { _ = lines.Close() })
		log = zerolog.New(lines).Level(zerolog.InfoLevel).With().Timestamp().Logger()
	}
	nc := natstest.Connect(b, natstest.Start(b))
	cfg := Config{ID: "gw1", NC: nc, Subjects: subjects.Default(), Log: log}
	if c.requestLog {
		cfg.RequestLog = &Durability{MaxAge: time.Hour}
	}
	g, err := New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	s := g.s

	// The ids the GW gives its requests, made before the clock (the
	// answers to them are built of them); each request still makes one as
	// the GW does (nuid.Next), so its cost stays in.
	ids := make([]string, b.N+1)
	for i := range ids {
		ids[i] = nuid.Next()
	}
	next := 0
	g.newID = func() string {
		_ = nuid.Next()
		id := ids[next]
		next++
		return id
	}
	sh := startBenchShell(b, g)

	// The caller's request and the Agg's answer to it, as the Go client and
	// the Agg send them.
	start := time.Date(2026, 1, 5, 10, 30, 0, 0, time.UTC)
	args := messages.GetDataArgs{Table: demo.Trade, Limit: 1, StartTS: start, EndTS: start.Add(time.Minute)}
	var body []byte
	if c.content == messages.ContentJSON {
		j, err := json.Marshal(map[string]any{"table": args.Table, "limit": args.Limit,
			"startTS": args.StartTS.Format(time.RFC3339Nano), "endTS": args.EndTS.Format(time.RFC3339Nano)})
		if err != nil {
			b.Fatal(err)
		}
		body, err = messages.Request{Header: messages.RequestHeader{API: subjects.APIGetData}, Payload: j, Content: messages.ContentJSON}.Encode()
		if err != nil {
			b.Fatal(err)
		}
	} else {
		p, err := messages.Encode(args)
		if err != nil {
			b.Fatal(err)
		}
		body, err = messages.Request{Header: messages.RequestHeader{API: subjects.APIGetData}, Payload: p, Content: messages.ContentMsgpack}.Encode()
		if err != nil {
			b.Fatal(err)
		}
	}
	payload := oneRowAnswer(b, args, c.content)
	inbox := nc.NewInbox() + "."
	request := func() *nats.Msg {
		h := nats.Header{}
		if c.content == messages.ContentMsgpack { // DoRequest's; DoJSON sends none
			messages.SetString(h, messages.HdrContentType, string(messages.ContentMsgpack))
			messages.SetString(h, messages.HdrAcceptChunks, "1")
		}
		hh := make(nats.Header, len(h)+1) // client.send's copy, with the request's id
		for k, v := range h {
			hh[k] = v
		}
		hh.Set(messages.HdrRequestID, nuid.Next())
		return &nats.Msg{Subject: s.GWAPI(subjects.APIGetData), Reply: inbox + nuid.Next(), Header: hh, Data: body}
	}
	answer := func(id string, req *nats.Msg) *nats.Msg {
		// agg.answerWhole: the drive's id (the first drive's is the GW's id)
		// in the routing headers, the caller's in the envelope.
		clientID := req.Header.Get(messages.HdrRequestID)
		data, err := messages.Response{Header: messages.ResponseHeader{V: messages.RequestVersion, RequestID: clientID,
			API: subjects.APIGetData, Status: messages.StatusOK}, Payload: payload, Content: c.content}.EncodeOwn()
		if err != nil {
			b.Fatal(err)
		}
		h := nats.Header{}
		messages.Routing{RequestID: messages.DriveID(id, 0), API: subjects.APIGetData, AggID: "agg1", Content: c.content}.Write(h)
		messages.StatusOK.Write(h)
		return &nats.Msg{Subject: s.GWAnswer("gw1", id), Header: h, Data: data.Join()}
	}

	// One request before the clock: the path is warm, and its submission
	// (read here, the only time anything listens) shows the answers'
	// subjects are the ones the GW waits on.
	submits, err := nc.SubscribeSync(s.RCSubmit("rc1"))
	if err != nil {
		b.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		b.Fatal(err)
	}
	warm := request()
	sh.request(warm)
	m, err := submits.NextMsg(10 * time.Second)
	if err != nil {
		b.Fatal(err)
	}
	sub, err := messages.DecodeValid[messages.RCSubmission](m.Data)
	if err != nil || sub.RequestID != ids[0] || sub.ReplyTo != s.GWAnswer("gw1", ids[0]) {
		b.Fatalf("warm-up submission %+v (%v), want request %s", sub, err, ids[0])
	}
	if err := submits.Unsubscribe(); err != nil {
		b.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		b.Fatal(err)
	}
	sh.answer(answer(ids[0], warm))

	reqs, answers := make([]*nats.Msg, b.N), make([]*nats.Msg, b.N)
	for i := range b.N {
		reqs[i] = request()
		answers[i] = answer(ids[i+1], reqs[i])
	}
	st0 := sh.c.Stats()
	b.ReportAllocs()
	b.ResetTimer()
	cpu0, _ := cputime.Process()
	for i := range b.N {
		sh.request(reqs[i])
		sh.answer(answers[i])
	}
	cpu1, _ := cputime.Process()
	b.StopTimer()
	// The process's CPU: with the request log, the time waited for the
	// server's acknowledgements is not in it, its work is.
	b.ReportMetric(float64(cpu1-cpu0)/float64(b.N), "cpu-ns/op")
	if st := sh.c.Stats(); st.Answered-st0.Answered != uint64(b.N) || st.InFlight != 0 || st.Refused != st0.Refused || st.LogRetries != 0 {
		b.Fatalf("%d answered of %d, %d in flight: %+v", st.Answered-st0.Answered, b.N, st.InFlight, st)
	}
	if n := promtest.Value(b, g.met.sendFailed); n != 0 {
		b.Fatalf("%.0f answers not sent", n)
	}
}

// benchShell is the GW's loop, turned by hand on the benchmark's goroutine:
// the shell as Run builds it, with the core Run builds (newCore), and the
// request log's writes when the GW has one; no loop runs, so this
// goroutine alone touches it.
type benchShell struct {
	*shell
	b *testing.B
}

func startBenchShell(b *testing.B, g *GW) *benchShell {
	b.Helper()
	start := time.Now()
	g.startedAt = start.UnixNano()
	var lw *logWrites
	if g.cfg.RequestLog != nil {
		rl, err := g.openRequestLog(b.Context())
		if err != nil {
			b.Fatal(err)
		}
		g.rlog = rl
		lw = newLogWrites(g.rlog, g.nc.NewInbox()+".")
		sub, err := g.nc.ChanSubscribe(lw.prefix+"*", lw.acks)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = sub.Unsubscribe() })
		if err := g.nc.Flush(); err != nil {
			b.Fatal(err)
		}
	}
	sh := &benchShell{shell: &shell{g: g, c: g.newCore(start), lw: lw, timer: time.NewTimer(time.Hour), stall: g.newStallWatch()}, b: b}
	b.Cleanup(func() { sh.timer.Stop() })
	// An RC's announcement, as it sends it (rc.announce): warm, one DAP.
	data, err := messages.Encode(&messages.RCAnnouncement{V: messages.RCVersion, RCID: "rc1", DAPs: 1, StartedAt: start.UnixNano()})
	if err != nil {
		b.Fatal(err)
	}
	g.onAnnounce(&nats.Msg{Subject: g.s.RCAnnounce("rc1"), Data: data})
	sh.turn()
	if r := g.Readiness(); !r.Ready {
		b.Fatalf("GW not ready after the RC's announcement: %+v", r)
	}
	return sh
}

// turn is one turn of the loop for the input the last callback handed it,
// and the log writes that asked for (sendLog, at the top of the next turn).
func (sh *benchShell) turn() {
	sh.handle(<-sh.g.in)
	sh.sendLog()
}

// acked is one turn of the loop for the next request log acknowledgement,
// as it comes from the embedded server.
func (sh *benchShell) acked() {
	sh.ack(<-sh.lw.acks)
	sh.sendLog()
}

// request: a caller's request arrives (as micro hands it to the endpoint's
// handler) and is submitted to the RC; with the request log, its entry is
// written and acknowledged.
func (sh *benchShell) request(m *nats.Msg) {
	endpoint{g: sh.g, api: subjects.APIGetData}.Handle(&microRequest{msg: m}) // micro allocates one per request too
	sh.turn()
	if sh.lw != nil {
		sh.acked() // the entry
	}
}

// answer: the Agg's answer arrives and goes to the caller; with the request
// log, after `answered` is written and acknowledged.
func (sh *benchShell) answer(m *nats.Msg) {
	sh.g.onAnswer(m)
	sh.turn()
	if sh.lw != nil {
		sh.acked() // `answered`: then the answer goes out
	}
}

// microRequest is micro's request as its endpoint subscription hands it to
// the handler: the message, nothing more (the GW answers by publishing).
type microRequest struct{ msg *nats.Msg }

func (r *microRequest) Respond(data []byte, _ ...micro.RespondOpt) error {
	return r.msg.Respond(data)
}
func (r *microRequest) RespondJSON(any, ...micro.RespondOpt) error { panic("not used by the GW") }
func (r *microRequest) Error(string, string, []byte, ...micro.RespondOpt) error {
	panic("not used by the GW")
}
func (r *microRequest) Data() []byte           { return r.msg.Data }
func (r *microRequest) Headers() micro.Headers { return micro.Headers(r.msg.Header) }
func (r *microRequest) Subject() string        { return r.msg.Subject }
func (r *microRequest) Reply() string          { return r.msg.Reply }

// oneRowAnswer is the payload of the Agg's answer to args (one trade row of
// the demo's), in content, as the Agg encodes it.
func oneRowAnswer(b *testing.B, args messages.GetDataArgs, content messages.Content) []byte {
	b.Helper()
	st := engine.NewStore()
	day := args.StartTS.Truncate(time.Hour)
	if err := (demo.Config{Seed: 1}).Load(st, "eu", day, day.Add(time.Hour), false); err != nil {
		b.Fatal(err)
	}
	part, err := st.Execute(args, args.StartTS, args.EndTS)
	if err != nil || part.Rows.NumRows() != 1 {
		b.Fatalf("partial of %d rows (%v), want 1", part.Rows.NumRows(), err)
	}
	if content == messages.ContentJSON {
		p, err := messages.EncodeTableJSON(part.Rows, 1)
		if err != nil {
			b.Fatal(err)
		}
		return p
	}
	p, err := messages.EncodeTableMsgpack(part.Rows, 1, 0)
	if err != nil {
		b.Fatal(err)
	}
	return p
}
