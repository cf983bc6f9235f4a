package rc

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nuid"
	"github.com/rs/zerolog"

	"github.com/sg-project/sg/messages"
	"github.com/sg-project/sg/services/cputime"
	"github.com/sg-project/sg/services/defaults"
	"github.com/sg-project/sg/services/logwriter"
	"github.com/sg-project/sg/subjects"
	"github.com/sg-project/sg/test/natstest"
	"github.com/sg-project/sg/test/promtest"
)

// BenchmarkSmallSubmission is the RC's share of a small getData of one
// portion (issue 10: Go benchmarks for each hop): the GW's submission, the
// DAP's completion and the Agg's done notice, as they arrive (headers,
// bodies and subjects as the GW, the DAP and the Agg send them), handed to
// the RC's entry for one input (onInput, then the loop's re-arming of its
// deadline timer and wake ticker, as Run does after each) on the
// benchmark's goroutine. The submission is decoded, placed by the core, and
// the portion's dispatch to the DAP and the expectation to the Agg are
// encoded and published (to an embedded server, with no subscriber); the
// completion frees the DAP and the done notice ends the request. One DAP,
// registered beforehand by its registration message through the same entry.
// Neither NATS's delivery nor the inbox channel count: ns/op, allocs/op and
// B/op are the RC's own (shell and core).
//
// Cases: the caller's encoding (msgpack; JSON, whose arguments the RC
// decodes as sent); the done notices one per request (the Agg's batch when
// one caller asks at a time) or in batches of doneBatch (as the Agg sends
// them under load, many callers); and the RC's log off (as the DAP and Agg
// benchmarks) or at sg run's level (info), through services/logwriter to
// io.Discard, as sg bench runs it.
func BenchmarkSmallSubmission(b *testing.B) {
	for _, c := range []smallSubmissionCase{
		{content: messages.ContentMsgpack, batch: 1},
		{content: messages.ContentJSON, batch: 1},
		{content: messages.ContentMsgpack, batch: doneBatch},
		{content: messages.ContentMsgpack, batch: 1, logInfo: true},
	} {
		b.Run(c.name(), func(b *testing.B) { benchSmallSubmission(b, c) })
	}
}

// doneBatch is the batched case's done notices per message: about what the
// Agg gathers in its delay (defaults.AggDoneDelay) with sg bench's 50 callers.
const doneBatch = 50

type smallSubmissionCase struct {
	content messages.Content
	batch   int // requests per done notice
	logInfo bool
}

func (c smallSubmissionCase) name() string {
	done, log := "each", "off"
	if c.batch > 1 {
		done = "batch" + strconv.Itoa(c.batch)
	}
	if c.logInfo {
		log = "info"
	}
	return "content=" + string(c.content) + "/done=" + done + "/log=" + log
}

func benchSmallSubmission(b *testing.B, c smallSubmissionCase) {
	log := zerolog.Nop()
	if c.logInfo {
		lines := logwriter.New(io.Discard, defaults.LogBuffer)
		b.Cleanup(func() { _ = lines.Close() })
		log = zerolog.New(lines).Level(zerolog.InfoLevel).With().Timestamp().Logger()
	}
	nc := natstest.Connect(b, natstest.Start(b))
	s := subjects.Default()
	br := newBenchRC(b, Config{ID: "rc1", NC: nc, Subjects: s, Log: log, AggIDs: []string{"agg1"}, WarmUp: -1})
	r := br.r

	// The caller's arguments, as the Go client sends them (Do: msgpack;
	// DoJSON: JSON as given), which the GW forwards as sent.
	start := time.Date(2026, 1, 5, 10, 30, 0, 0, time.UTC)
	args := messages.GetDataArgs{Table: "trade", Limit: 1, StartTS: start, EndTS: start.Add(time.Minute)}
	var a messages.Args
	if c.content == messages.ContentJSON {
		j, err := json.Marshal(map[string]any{"table": args.Table, "limit": args.Limit,
			"startTS": args.StartTS.Format(time.RFC3339Nano), "endTS": args.EndTS.Format(time.RFC3339Nano)})
		if err != nil {
			b.Fatal(err)
		}
		a = messages.JSONArgs(j)
	} else {
		m, err := messages.Encode(&args)
		if err != nil {
			b.Fatal(err)
		}
		a = messages.MsgpackArgs(m)
	}
	caller := "_INBOX." + nuid.Next()
	submission := func(id string) *nats.Msg {
		// As the GW builds and sends it (gw.submission, arrive, submit).
		now := time.Now()
		sub := messages.RCSubmission{RequestID: id, GWID: "gw1", Header: messages.RequestHeader{API: subjects.APIGetData},
			ReplyTo: s.GWAnswer("gw1", id), Content: c.content, ReceivedAt: now.UnixNano(),
			Deadline: now.Add(time.Hour).UnixNano(), AnswerID: "k-" + id}
		sub.SetArguments(a)
		data, err := messages.Encode(&sub)
		if err != nil {
			b.Fatal(err)
		}
		h := make(nats.Header, 4)
		messages.Routing{RequestID: id}.Write(h)
		messages.SetString(h, messages.HdrClientRequestID, sub.AnswerID)
		messages.SetString(h, messages.HdrCaller, caller)
		return &nats.Msg{Subject: s.RCSubmit("rc1"), Header: h, Data: data}
	}
	purview := messages.Unbounded
	completion := func(id string, portion messages.PortionID) *nats.Msg {
		// As the DAP sends it (dap.complete) for the dispatch the RC sends.
		p := messages.PortionDispatch{V: messages.PortionVersion, RequestID: id, PortionID: portion, Attempt: 1, RCID: "rc1",
			API: subjects.APIGetData, AggID: "agg1"}
		cm := messages.PortionCompletion{V: messages.PortionVersion, RequestID: id, PortionID: portion, Attempt: 1, DAPID: "dap1",
			Outcome: messages.OutcomeOK, Code: messages.CodeOK, PartialSent: true, PurviewVersion: 1, ReferenceVintage: 1,
			Rows: 1, Bytes: 600, ElapsedNS: int64(40 * time.Microsecond), Purview: &purview}
		if err := cm.Validate(); err != nil {
			b.Fatal(err)
		}
		data, err := messages.Encode(&cm)
		if err != nil {
			b.Fatal(err)
		}
		return &nats.Msg{Subject: s.RCCompletion("rc1"), Header: p.ReplyHeader(messages.StatusOK), Data: data}
	}
	done := func(ids []string) *nats.Msg {
		// As the Agg sends it (doneNotices.send): no headers, ai left out.
		m := messages.AggDone{V: messages.AggDoneVersion, AggID: "agg1"}
		for _, id := range ids {
			m.Done = append(m.Done, messages.AggDoneEntry{RequestID: id, Status: messages.Status{RC: messages.CodeOK, AC: messages.CodeOK},
				Held: int64(time.Millisecond)})
		}
		data, err := messages.Encode(&m)
		if err != nil {
			b.Fatal(err)
		}
		return &nats.Msg{Subject: s.RCAggDone("rc1"), Data: data}
	}

	// One request before the clock, whose dispatch (read here, the only
	// time anything listens) gives the portion ids the RC numbers its
	// portions from; the DAP's one slot (concurrency 1) is free again only
	// if each completion names its portion, which the dispatches counted at
	// the end prove.
	dispatches, err := nc.SubscribeSync(s.DAPPortion("dap1"))
	if err != nil {
		b.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		b.Fatal(err)
	}
	br.in(submission("warm"))
	m, err := dispatches.NextMsg(10 * time.Second)
	if err != nil {
		b.Fatal(err)
	}
	first, err := messages.DecodeValid[messages.PortionDispatch](m.Data)
	if err != nil || first.RequestID != "warm" || first.AggID != "agg1" {
		b.Fatalf("warm-up dispatch %+v (%v)", first, err)
	}
	if err := dispatches.Unsubscribe(); err != nil {
		b.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		b.Fatal(err)
	}
	br.in(completion("warm", first.PortionID))
	br.in(done([]string{"warm"}))

	// The messages of b.N requests, built before the clock starts.
	subs, comps, dones := make([]*nats.Msg, b.N), make([]*nats.Msg, b.N), make([]*nats.Msg, b.N)
	var batch []string
	for i := range b.N {
		id := fmt.Sprintf("bench-%d", i)
		subs[i], comps[i] = submission(id), completion(id, first.PortionID+messages.PortionID(i+1))
		if batch = append(batch, id); len(batch) == c.batch || i == b.N-1 {
			dones[i], batch = done(batch), nil
		}
	}
	dispatched0 := promtest.Value(b, r.metrics.dispatches)
	b.ReportAllocs()
	b.ResetTimer()
	cpu0, _ := cputime.Process()
	for i := range b.N {
		br.in(subs[i])
		br.in(comps[i])
		if dones[i] != nil {
			br.in(dones[i])
		}
	}
	cpu1, _ := cputime.Process()
	b.StopTimer()
	// The process's CPU: the RC's, and the embedded server's reading of
	// what it publishes (on the other core, beside the RC's time).
	b.ReportMetric(float64(cpu1-cpu0)/float64(b.N), "cpu-ns/op")
	if n := promtest.Value(b, r.metrics.dispatches) - dispatched0; n != float64(b.N) || len(r.pending) != 0 {
		b.Fatalf("%.0f dispatched of %d, %d requests still held", n, b.N, len(r.pending))
	}
	if bad := promtest.Value(b, r.metrics.badMessages); bad != 0 {
		b.Fatalf("%.0f bad messages", bad)
	}
}

// benchRC is an RC set up as Run sets it up before its loop (warm, its Aggs
// alive, one DAP registered), without its subscriptions or its loop: the
// benchmark's goroutine hands it each input as the loop would (in), so it
// alone touches the RC's state.
type benchRC struct {
	r        *RC
	deadline *time.Timer
	wake     *time.Ticker
}

func newBenchRC(b *testing.B, cfg Config) *benchRC {
	b.Helper()
	r, err := New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	// Run's set-up, as far as the loop (no replay: no JetStream).
	r.started = r.cfg.Now()
	for _, id := range r.cfg.AggIDs {
		r.aggs[id] = &aggRecord{lastSeen: r.cfg.Now(), interval: defaultAggHeartbeat}
	}
	close(r.ready)
	r.startWarmUp(r.cfg.Now())
	if !r.isWarm {
		b.Fatal("the RC is not warm")
	}
	br := &benchRC{r: r, deadline: time.NewTimer(time.Hour)}
	r.wantWake = r.wakePeriod()
	br.wake = time.NewTicker(r.stall.Period)
	r.stall.Wake(r.cfg.Now())
	b.Cleanup(func() { br.deadline.Stop(); br.wake.Stop() })

	// The DAP's registration, as it sends it (dap.publishRegistration).
	reg := messages.DAPRegistration{V: messages.DAPVersion, DAPID: "dap1", Labels: messages.LabelSet{"region": "eu"},
		Tier: messages.TierHDB, Purview: messages.Unbounded, Tables: []messages.TableInfo{{Name: "trade", Kind: messages.TablePartitioned}},
		Available: true, Concurrency: 1, PurviewVersion: 1, ReferenceVintage: 1}
	data, err := messages.Encode(&reg)
	if err != nil {
		b.Fatal(err)
	}
	br.in(&nats.Msg{Subject: r.cfg.Subjects.DAPRegister("dap1"), Data: data})
	if len(r.daps) != 1 {
		b.Fatalf("%d DAPs known after the registration", len(r.daps))
	}
	return br
}

// in is one turn of Run's loop for a message from the inbox.
func (br *benchRC) in(m *nats.Msg) {
	br.r.onInput(input{subject: m.Subject, msg: m})
	br.r.armDeadline(br.deadline)
	br.r.armWake(br.wake)
}
