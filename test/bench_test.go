package test

import (
	"context"
	"fmt"
	"runtime/metrics"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sg-project/sg/messages"
	"github.com/sg-project/sg/services/cputime"
	"github.com/sg-project/sg/services/dap/demo"
	"github.com/sg-project/sg/services/gw"
	"github.com/sg-project/sg/services/gw/client"
)

// What DESIGN.md section 8 measures, on one machine:
//
//	go test ./test -run '^$' -bench . -benchtime 2000x
//
// BenchmarkSmallRequest: a small getData through GW, RC, DAP and Agg, and as
// a ratio to a plain NATS request-reply measured in the same run (the floor
// is the number of hops: client-GW, GW-RC, RC-DAP, DAP-Agg, Agg-GW, GW-client),
// mean (x-nats-rr) and median (x-p50, what sg bench reports). As in sg run
// and sg bench, the services connect in process and the caller over TCP.
// BenchmarkLargeAnswer: result throughput of a multi-MiB answer in MB/s.

func BenchmarkSmallRequest(b *testing.B) {
	for _, logged := range []bool{false, true} {
		b.Run(fmt.Sprintf("log=%v", logged), func(b *testing.B) {
			o := systemOptions{inProcess: true} // as sg run and sg bench
			if logged {
				o.requestLog = &gw.Durability{}
			}
			benchSmallRequest(b, o)
		})
	}
}

// benchSmallRequest reports, beside the time, what a loaded machine blurs
// less: the CPU of the whole process (services and NATS server) and the
// goroutine runs (wake-ups) per request.
func benchSmallRequest(b *testing.B, o systemOptions) {
	sys := startSystem(b, o)
	src, _ := engineSource(b, sys)
	sys.startDAP(oneDAP(src, 1))
	sys.waitDAPs(1)

	// The caller and the echo responder connect over TCP, each on its own
	// connection, as sg bench's do (the services may be in process).
	dial := func() *nats.Conn {
		nc, err := nats.Connect(sys.url, nats.Name(b.Name()))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(nc.Close)
		return nc
	}
	caller, responder := dial(), dial()
	cl := client.New(caller, sys.s)

	// The baseline: a plain request-reply on the same server.
	echo, err := responder.Subscribe("bench.echo", func(m *nats.Msg) { _ = m.Respond(m.Data) })
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = echo.Unsubscribe() }()
	if err := responder.Flush(); err != nil {
		b.Fatal(err)
	}
	const baselineN = 2000
	plain := make([]time.Duration, baselineN)
	start := time.Now()
	for i := range plain {
		t0 := time.Now()
		if _, err := caller.Request("bench.echo", []byte("ping"), 5*time.Second); err != nil {
			b.Fatal(err)
		}
		plain[i] = time.Since(t0)
	}
	baseline := time.Since(start) / baselineN

	args := messages.GetDataArgs{Table: demo.Trade, Limit: 1,
		StartTS: demoEnd.Add(-time.Hour), EndTS: demoEnd.Add(-time.Hour + time.Minute)}
	ctx := context.Background()
	runs0 := goroutineRuns()
	cpu0, _ := cputime.Process()
	took := make([]time.Duration, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		resp, err := cl.Do(ctx, "getData", args, messages.Opts{})
		if err != nil || !resp.Header.Status.IsOK() {
			b.Fatalf("getData: %v %+v", err, resp.Header.Status)
		}
		took[i] = time.Since(t0)
	}
	b.StopTimer()
	per := b.Elapsed() / time.Duration(b.N)
	b.ReportMetric(float64(baseline.Microseconds()), "nats-rr-µs")
	b.ReportMetric(float64(per)/float64(baseline), "x-nats-rr")
	// The median, as sg bench reports it: the mean carries the stalls of a
	// loaded machine (GC, the other helpers' processes).
	p50 := median(took)
	b.ReportMetric(float64(p50)/float64(time.Microsecond), "p50-µs")
	b.ReportMetric(float64(p50)/float64(median(plain)), "x-p50")
	cpu1, _ := cputime.Process()
	b.ReportMetric(float64(cpu1-cpu0)/float64(time.Microsecond)/float64(b.N), "cpu-µs/op")
	b.ReportMetric(float64(goroutineRuns()-runs0)/float64(b.N), "runs/op")
}

func median(d []time.Duration) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2]
}

// goroutineRuns estimates how many times goroutines were scheduled to run:
// the runtime samples its scheduling latency for one run in 8 of each
// goroutine (runtime gTrackingPeriod), so the histogram's count times 8.
func goroutineRuns() uint64 {
	s := []metrics.Sample{{Name: "/sched/latencies:seconds"}}
	metrics.Read(s)
	var n uint64
	for _, c := range s[0].Value.Float64Histogram().Counts {
		n += c
	}
	return 8 * n
}

func BenchmarkLargeAnswer(b *testing.B) {
	b.ReportAllocs()
	sys := startSystem(b, systemOptions{})
	sys.startDemo(demoFleetConfig(sys, 40000))
	args := messages.GetDataArgs{Table: demo.Trade}
	ctx := context.Background()
	var bytes int64
	b.ResetTimer()
	cpu0, _ := cputime.Process()
	for i := 0; i < b.N; i++ {
		resp, err := sys.client.Do(ctx, "getData", args, messages.Opts{})
		if err != nil || !resp.Header.Status.IsOK() {
			b.Fatalf("getData: %v %+v", err, resp.Header.Status)
		}
		bytes += int64(len(resp.Payload))
	}
	b.StopTimer()
	b.ReportMetric(float64(bytes)/b.Elapsed().Seconds()/1e6, "MB/s")
	b.ReportMetric(float64(bytes)/float64(b.N)/(1<<20), "MiB/answer")
	cpu1, _ := cputime.Process()
	b.ReportMetric(float64(cpu1-cpu0)/float64(time.Millisecond)/float64(b.N), "cpu-ms/op")
}

// BenchmarkLargeAnswerStream is BenchmarkLargeAnswer read with the client's
// streaming read (Sg-Accept-Stream): the Agg, the GW and the caller handle a
// window at a time. MB/s counts the whole answer's msgpack bytes, as
// BenchmarkLargeAnswer does, so the two compare.
func BenchmarkLargeAnswerStream(b *testing.B) { largeAnswerStream(b, systemOptions{}, 40000) }

// BenchmarkLargeAnswerStreamLogged is BenchmarkLargeAnswerStream with the
// GW's request log on, as every deployment runs, and an answer of many more
// frames than messages.StreamStartFrames: frame 0 waits for the `answered`
// write, and the Agg for the GW's start signal after StreamStartFrames.
func BenchmarkLargeAnswerStreamLogged(b *testing.B) {
	largeAnswerStream(b, systemOptions{requestLog: &gw.Durability{Memory: true}}, 200000)
}

func largeAnswerStream(b *testing.B, o systemOptions, rows int) {
	sys := startSystem(b, o)
	sys.startDemo(demoFleetConfig(sys, rows))
	q := client.GetDataQuery{Args: messages.GetDataArgs{Table: demo.Trade}}
	ctx := context.Background()
	whole, err := sys.client.Do(ctx, "getData", q.Args, messages.Opts{})
	if err != nil || !whole.Header.Status.IsOK() {
		b.Fatalf("getData: %v %+v", err, whole.Header.Status)
	}
	size := int64(len(whole.Payload))
	var bytes int64
	b.ReportAllocs()
	b.ResetTimer()
	cpu0, _ := cputime.Process()
	for i := 0; i < b.N; i++ {
		rows := 0
		hdr, err := sys.client.GetDataStream(ctx, q, func(t messages.Table) error {
			rows += t.NumRows()
			return nil
		})
		if err != nil || !hdr.Status.IsOK() || rows == 0 {
			b.Fatalf("getData stream: %v %+v, %d rows", err, hdr.Status, rows)
		}
		bytes += size
	}
	b.StopTimer()
	b.ReportMetric(float64(bytes)/b.Elapsed().Seconds()/1e6, "MB/s")
	b.ReportMetric(float64(bytes)/float64(b.N)/(1<<20), "MiB/answer")
	cpu1, _ := cputime.Process()
	b.ReportMetric(float64(cpu1-cpu0)/float64(time.Millisecond)/float64(b.N), "cpu-ms/op")
}
