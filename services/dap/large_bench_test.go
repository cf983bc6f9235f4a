package dap

import (
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/sg-project/sg/messages"
	"github.com/sg-project/sg/services/agg/merge"
	"github.com/sg-project/sg/services/dap/demo"
	"github.com/sg-project/sg/services/dap/engine"
	"github.com/sg-project/sg/subjects"
	"github.com/sg-project/sg/test/natstest"
)

// largePortionHours is the demo hdb DAP's share of the whole trade table
// (sg bench's large answer): 59 of its 72 hours, about 36,000 rows and
// 600 KB, sent in two windows.
const largePortionHours = 59

// BenchmarkLargePortion is the DAP's share of a large answer (issue 10): a
// dispatch of the whole trade table to a DAP holding 59 hours of one
// region, run by runPortion as a slot runs it: the engine's view of the
// rows, then its windows encoded and published (to no subscriber). ns/op
// is the DAP's own and NATS's copy into its buffer; decode is the Agg's
// work on the windows received (merge.DecodePartial, as onPartial calls
// it), per portion.
func BenchmarkLargePortion(b *testing.B) {
	end := t0.Add(largePortionHours * time.Hour)
	args := messages.GetDataArgs{Table: demo.Trade, StartTS: t0, EndTS: end}
	st := engine.NewStore()
	if err := (demo.Config{Seed: 1}).LoadTables(st, "eu", t0, end, demo.Trade); err != nil {
		b.Fatal(err)
	}
	raw, err := messages.Encode(&args)
	if err != nil {
		b.Fatal(err)
	}
	d, s, nc := benchSlot(b, st)
	cfg := d.cfg
	msg := func(i int) *nats.Msg {
		p := messages.PortionDispatch{V: messages.PortionVersion, RequestID: fmt.Sprintf("bench-%d", i), PortionID: 1, Attempt: 1,
			RCID: "rc1", API: subjects.APIGetData, Args: raw, Labels: messages.LabelSet{"region": "eu"},
			Range:          messages.TimeRange{Start: t0.UnixNano(), End: end.UnixNano()},
			PurviewVersion: 1, ReferenceVintage: 1, AggID: "agg1", Deadline: time.Now().Add(time.Hour).UnixNano()}
		data, err := messages.Encode(&p)
		if err != nil {
			b.Fatal(err)
		}
		return &nats.Msg{Subject: cfg.Subjects.DAPPortion(cfg.ID), Header: p.Header(), Data: data}
	}
	run := func(m *nats.Msg) {
		d.onPortion(m)
		p, ok := d.queue.pop()
		if !ok {
			b.Fatal("dispatch not queued")
		}
		s.p = p
		d.runPortion(s)
	}

	// The Agg's grant of every window, at the first (from its headers: the
	// windows are not decoded): the DAP never waits for credit.
	granter, err := nc.Subscribe(cfg.Subjects.AggPartial("agg1"), func(m *nats.Msg) {
		c := messages.PartialCredit{V: messages.PortionVersion, RequestID: m.Header.Get(messages.HdrRequestID), PortionID: 1, Attempt: 1,
			AggID: "agg1", Windows: messages.MaxPartialWindows}
		if data, err := messages.Encode(&c); err == nil {
			_ = nc.Publish(cfg.Subjects.DAPCredit(cfg.ID), data)
		}
	})
	if err != nil {
		b.Fatal(err)
	}
	defer granter.Unsubscribe()
	credits, err := nc.Subscribe(cfg.Subjects.DAPCredit(cfg.ID), d.onCredit)
	if err != nil {
		b.Fatal(err)
	}
	defer credits.Unsubscribe()
	// The windows as the Agg receives them, for decode.
	windows := natstest.Subscribe(b, nc, cfg.Subjects.AggPartial("agg1"))
	run(msg(-1))
	var payloads [][]byte
	var bytes int
	for more := true; more; {
		m, err := windows.NextMsg(wait)
		if err != nil {
			b.Fatal(err)
		}
		pr, err := messages.DecodeValid[messages.PartialResult](m.Data)
		if err != nil {
			b.Fatal(err)
		}
		payloads, bytes, more = append(payloads, pr.Payload), bytes+len(pr.Payload), pr.More
	}
	_ = windows.Unsubscribe()
	if len(payloads) < 2 {
		b.Fatalf("%d windows of %d bytes, want a partial sent in windows", len(payloads), bytes)
	}

	// The encoding alone (sendWindows's, the whole partial in one buffer):
	// no NATS.
	b.Run("encode", func(b *testing.B) {
		part, _, err := EngineSource{Store: st}.ExecutePartial(b.Context(), subjects.APIGetData, messages.Args{Msgpack: raw}, nil,
			messages.TimeRange{Start: t0.UnixNano(), End: end.UnixNano()})
		if err != nil {
			b.Fatal(err)
		}
		pr := messages.PartialResult{V: messages.PortionVersion, RequestID: "bench", PortionID: 1, Attempt: 1, DAPID: cfg.ID, Status: messages.StatusOK}
		buf := make([]byte, 0, 2*bytes)
		b.SetBytes(int64(bytes))
		b.ReportAllocs()
		for b.Loop() {
			if buf, _, err = messages.AppendPartialResult(buf[:0], &pr, func(enc *msgpack.Encoder) error { return merge.EncodePartialTo(enc, part) }); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("send", func(b *testing.B) {
		msgs := make([]*nats.Msg, b.N)
		for i := range b.N {
			msgs[i] = msg(i)
		}
		b.SetBytes(int64(bytes))
		b.ReportAllocs()
		b.ResetTimer()
		for i := range b.N {
			run(msgs[i])
		}
	})
	b.Run("decode", func(b *testing.B) {
		b.SetBytes(int64(bytes))
		b.ReportAllocs()
		for b.Loop() {
			for _, w := range payloads {
				p, err := merge.DecodePartial(w)
				if err != nil {
					b.Fatal(err)
				}
				p.Release()
			}
		}
	})
}
