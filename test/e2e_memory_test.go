package test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sg-project/sg/messages"
	"github.com/sg-project/sg/services/dap/demo"
	"github.com/sg-project/sg/services/gw/client"
	"github.com/sg-project/sg/subjects"
)

// A deployment of sg as production runs it: every service its own process
// (the sg binary, built by the test), on a standalone NATS server (sg nats),
// each under its own memory limit, so that each service's peak can be
// measured apart (the kernel's VmHWM, the peak resident set).
type procDeployment struct {
	t     *testing.T
	bin   string
	dir   string
	url   string
	env   []string
	procs []*sgProc
}

// sgProc is one sg process and the tail of its output.
type sgProc struct {
	name string
	cmd  *exec.Cmd
	mu   sync.Mutex
	tail []string
}

func (p *sgProc) keep(line string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.tail) == 40 {
		p.tail = p.tail[1:]
	}
	p.tail = append(p.tail, line)
}

// peakRSS is the process's peak resident set (VmHWM), in bytes.
func (p *sgProc) peakRSS() (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) == 3 && f[0] == "VmHWM:" && f[2] == "kB" {
			kb, err := strconv.ParseInt(f[1], 10, 64)
			return kb << 10, err
		}
	}
	return 0, fmt.Errorf("no VmHWM in /proc/%d/status", p.cmd.Process.Pid)
}

// buildSG builds the sg binary (without -race: the processes are measured,
// not checked) into dir.
func buildSG(t *testing.T, dir string) string {
	t.Helper()
	bin := filepath.Join(dir, "sg")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, "github.com/sg-project/sg/cmd/sg")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build sg: %v\n%s", err, out)
	}
	return bin
}

// start runs `sg args...` as process name; ready, if set, is a pattern of an
// output line start waits for (bounded), and its first group is returned.
func (d *procDeployment) start(name string, ready *regexp.Regexp, args ...string) string {
	d.t.Helper()
	cmd := exec.Command(d.bin, args...)
	cmd.Env = append(os.Environ(), d.env...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		d.t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout // one pipe: lines in the order written
	if err := cmd.Start(); err != nil {
		d.t.Fatalf("start %s: %v", name, err)
	}
	p := &sgProc{name: name, cmd: cmd}
	d.procs = append(d.procs, p)
	found := make(chan string, 1)
	want := ready // the reader's own: start reads ready below
	go func() {
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			p.keep(sc.Text())
			if want != nil {
				if m := want.FindStringSubmatch(sc.Text()); m != nil {
					found <- m[len(m)-1]
					want = nil
				}
			}
		}
		_, _ = io.Copy(io.Discard, out)
	}()
	if ready == nil {
		return ""
	}
	select {
	case s := <-found:
		return s
	case <-time.After(60 * time.Second):
		d.dump()
		d.t.Fatalf("%s did not print %q within 60s", name, ready)
		return ""
	}
}

// dump prints every process's last lines (on a failure).
func (d *procDeployment) dump() {
	for _, p := range d.procs {
		p.mu.Lock()
		d.t.Logf("== %s (last %d lines)\n%s", p.name, len(p.tail), strings.Join(p.tail, "\n"))
		p.mu.Unlock()
	}
}

// stop ends every process: SIGTERM, then a kill after 20 s.
func (d *procDeployment) stop() {
	for _, p := range d.procs {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
	}
	for _, p := range d.procs {
		done := make(chan struct{})
		go func() { _ = p.cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			_ = p.cmd.Process.Kill()
			<-done
		}
	}
}

// TestLargeAnswerMemoryPerService: a JSON answer of about 300 MB, read as a
// stream, goes through a deployment whose every service is its own process
// under GOMEMLIMIT=100MiB, and no service's peak resident set passes 100 MiB
// (issue 10's proof: memory bounded by a window, not by the answer's size).
// The answer is checked whole: every row, counted against the count sg gives.
// The same rows are then read by a msgpack caller (the sg client's stream),
// and the peaks cover both answers.
//
// What bounds it: each DAP sends its portion's rows in windows under the
// Agg's credit (services/dap/window.go), and the Agg merges them as they come
// (services/agg/live.go), a frame out as soon as every DAP has a window. On
// 2026-11-23, three runs: Agg 77-86 MiB, DAPs 72-80 MiB (64-66 MiB of it
// their data, loaded), GW 35-42 MiB, RC 21-24 MiB, for 320 MB of JSON in
// 1.6-2.4 s; before windows, the Agg peaked at 331-353 MiB and the DAPs at
// 93-115 MiB. It takes about 15 s.
func TestLargeAnswerMemoryPerService(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: builds sg and runs 14 processes")
	}
	const (
		limit   = 100 << 20
		regions = 3
	)
	days := 54 // of trade per region: about 2 MB of JSON a region-day, 320 MB in all
	if raceEnabled {
		// The test's own client, built with -race, reads frames slower than
		// sg sends them, and the server cuts it off as a slow consumer once
		// it is 64 MiB behind: under -race the answer is a ninth of the size
		// (36 MB). The services are built without -race either way, and the
		// bound asserted is the same.
		days = 6
	}
	minSize := 300e6 * float64(days) / 54
	dir := t.TempDir()
	d := &procDeployment{t: t, bin: buildSG(t, dir), dir: dir,
		env: []string{"GOMEMLIMIT=100MiB", "SG_LOG_LEVEL=warn"}}
	defer d.stop()
	d.url = d.start("nats", regexp.MustCompile(`listening at (nats://\S+),`), "nats", "--listen", "127.0.0.1:0", "--data", filepath.Join(dir, "js"))
	end := time.Now().UTC().Truncate(24 * time.Hour)
	common := []string{"--nats", d.url, "--log-level", "warn"}
	d.start("agg", nil, append([]string{"agg", "--id", "agg-1"}, common...)...)
	d.start("rc", nil, append([]string{"rc", "--id", "rc-1", "--aggs", "agg-1"}, common...)...)
	// Each region's days are cut in three tiers of a third each: a DAP holds
	// a ninth of the answer's rows (about 25 MiB in memory).
	third := time.Duration(days) * 24 * time.Hour / 3
	for _, region := range []string{"eu", "us", "asia"}[:regions] {
		for i, tier := range []string{"hdb", "idb", "rdb"} {
			from, to := end.Add(-3*third+time.Duration(i)*third), end.Add(-2*third+time.Duration(i)*third)
			purview := from.Format(time.RFC3339) + "," + to.Format(time.RFC3339)
			if tier == "rdb" {
				purview = from.Format(time.RFC3339) + ",-"
			}
			id := "dap-" + region + "-" + tier
			d.start(id, nil, append([]string{"dap", "--id", id, "--labels", "region=" + region, "--tier", tier, "--tables", demo.Trade,
				"--purview", purview, "--data-range", from.Format(time.RFC3339) + "," + to.Format(time.RFC3339)}, common...)...)
		}
	}
	d.start("gw", nil, append([]string{"gw", "--id", "gw-1"}, common...)...)

	nc, err := nats.Connect(d.url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	cl := client.New(nc, subjects.Default())
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	// Every DAP answers a ping: the deployment serves.
	waitCtx, waitCancel := context.WithTimeout(ctx, 3*time.Minute)
	defer waitCancel()
	for {
		resp, err := cl.Do(waitCtx, subjects.APIPing, nil, messages.Opts{TimeoutMS: 2000})
		if err == nil && resp.Header.Status.IsOK() && bytes.Count(resp.Payload, []byte("dap-")) >= 3*regions {
			break
		}
		if waitCtx.Err() != nil {
			d.dump()
			t.Fatalf("the deployment did not reach its %d DAPs within 3 minutes: %v %+v", 3*regions, err, resp.Header.Status)
		}
		// A GW without DAPs yet answers at once: pause so that the retries
		// do not take the CPU the DAPs need to load their data.
		select {
		case <-waitCtx.Done():
		case <-time.After(50 * time.Millisecond):
		}
	}

	// The peaks so far are the start's (a DAP loads its data).
	started := map[string]int64{}
	for _, p := range d.procs {
		if peak, err := p.peakRSS(); err == nil {
			started[p.name] = peak
		}
	}

	// The whole range the DAPs hold (before it, no DAP covers the time).
	first, last := end.Add(-3*third), end
	count, err := cl.Do(ctx, subjects.APIGetData, messages.GetDataArgs{Table: demo.Trade, StartTS: first, EndTS: last,
		Agg: []messages.AggSpec{{Name: "n", Func: messages.AggCount}}}, messages.Opts{})
	if err != nil || !count.Header.Status.IsOK() {
		d.dump()
		t.Fatalf("count: %v %+v", err, count.Header.Status)
	}
	var counted messages.Table
	if err := messages.Decode(count.Payload, &counted); err != nil || counted.NumRows() != 1 {
		t.Fatalf("count answer: %v, %d rows", err, counted.NumRows())
	}
	want := counted.Columns[0].Ints[0]

	start := time.Now()
	rows, size, err := streamJSONRows(ctx, nc, fmt.Sprintf(`{"table":"trade","startTS":%q,"endTS":%q}`,
		first.Format(time.RFC3339Nano), last.Format(time.RFC3339Nano)))
	elapsed := time.Since(start)
	if err != nil {
		d.dump()
		t.Fatalf("getData stream: %v after %d rows, %d bytes", err, rows, size)
	}
	// The same rows again for a msgpack caller (the sg client's stream of
	// tables): the Agg's windows are encoded in the other form, and the
	// peaks below are over both answers.
	startMsgpack := time.Now()
	var msgpackRows int64
	hdr, err := cl.GetDataStream(ctx, client.GetDataQuery{Args: messages.GetDataArgs{Table: demo.Trade, StartTS: first, EndTS: last}},
		func(t messages.Table) error {
			msgpackRows += int64(t.NumRows())
			return nil
		})
	elapsedMsgpack := time.Since(startMsgpack)
	if err != nil || !hdr.Status.IsOK() {
		d.dump()
		t.Fatalf("getData stream, msgpack: %v %+v after %d rows", err, hdr.Status, msgpackRows)
	}
	over := false
	for _, p := range d.procs {
		peak, err := p.peakRSS()
		if err != nil {
			t.Fatalf("%s: %v", p.name, err)
		}
		t.Logf("%-12s peak resident set %6.1f MiB (%6.1f MiB before the request)", p.name, float64(peak)/(1<<20), float64(started[p.name])/(1<<20))
		if p.name != "nats" && peak > limit {
			over = true
			t.Errorf("%s peaked at %.1f MiB, above the %d MiB limit", p.name, float64(peak)/(1<<20), limit>>20)
		}
	}
	if over {
		d.dump()
	}
	if rows != want || float64(size) < minSize {
		t.Fatalf("streamed %d rows (%d bytes), count says %d: want every row of an answer of %.0f MB or more", rows, size, want, minSize/1e6)
	}
	t.Logf("answer: %d rows, %.1f MB of JSON in %s (%.1f MB/s)", rows, float64(size)/1e6, elapsed.Round(time.Millisecond),
		float64(size)/1e6/elapsed.Seconds())
	if msgpackRows != want {
		t.Fatalf("streamed %d rows to a msgpack caller, count says %d", msgpackRows, want)
	}
	t.Logf("answer: %d rows to a msgpack caller in %s", msgpackRows, elapsedMsgpack.Round(time.Millisecond))
}

// streamJSONRows asks for a getData answer as a stream of JSON frames, as
// any NATS client can (README, "Large answers"), and returns its rows (each
// row object of the trade table begins with its time) and bytes. The frames
// must come in order, from one stream, and end with Sg-Stream-End.
func streamJSONRows(ctx context.Context, nc *nats.Conn, args string) (rows, size int64, err error) {
	body, err := messages.Request{Header: messages.RequestHeader{API: subjects.APIGetData, Opts: messages.Opts{TimeoutMS: 240_000}},
		Payload: []byte(args), Content: messages.ContentJSON}.Encode()
	if err != nil {
		return 0, 0, err
	}
	inbox := nc.NewInbox()
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		return 0, 0, err
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := sub.SetPendingLimits(-1, 64<<20); err != nil {
		return 0, 0, err
	}
	h := nats.Header{}
	messages.SetString(h, messages.HdrContentType, string(messages.ContentJSON))
	messages.SetString(h, messages.HdrAcceptStream, "1")
	if err := nc.PublishMsg(&nats.Msg{Subject: subjects.Default().GWAPI(subjects.APIGetData), Reply: inbox, Header: h, Data: body}); err != nil {
		return 0, 0, err
	}
	rowStart := []byte(`{"time":`)
	var id string
	for seq := 0; ; seq++ {
		m, err := sub.NextMsgWithContext(ctx)
		if err != nil {
			return rows, size, fmt.Errorf("frame %d: %w", seq, err)
		}
		// Frame 0 carries the answer's status; a later frame only an error's.
		if st, err := messages.ReadStatus(m.Header); (err != nil && seq == 0) || (err == nil && !st.IsOK()) {
			return rows, size, fmt.Errorf("frame %d: status %+v (%v)", seq, st, err)
		}
		f, err := messages.ReadStreamFrame(m.Header)
		switch {
		case err != nil:
			return rows, size, fmt.Errorf("frame %d: %w", seq, err)
		case f.Seq != seq || (seq > 0 && f.ID != id):
			return rows, size, fmt.Errorf("frame %d of %q where %d of %q was due", f.Seq, f.ID, seq, id)
		}
		id = f.ID
		rows += int64(bytes.Count(m.Data, rowStart))
		size += int64(len(m.Data))
		if f.End {
			return rows, size, nil
		}
	}
}
