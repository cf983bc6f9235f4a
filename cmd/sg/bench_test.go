package main

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sg-project/sg/services/cputime"
)

// A run adds its section on top and keeps every older section as it was; a
// file sg bench did not write is refused, not overwritten.
func TestBenchDocKeepsOlderSections(t *testing.T) {
	cfg := benchConfig{requests: 10, clients: 2, large: 1}
	first, err := benchDoc(nil, []string{"sg", "bench", "--out", "x"}, cfg, "\n### sg, request log on\n\n| first |\n")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(first, benchTitle) || strings.Count(first, "\n## sg bench, ") != 1 {
		t.Fatalf("first run's file:\n%s", first)
	}
	older := first + "\n## Sixth session\n\nhand-written notes\n"
	second, err := benchDoc([]byte(older), []string{"sg", "bench", "--large", "3"}, cfg, "\n### sg, request log on\n\n| second |\n")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Count(second, benchTitle) != 1 || strings.Count(second, "\n## sg bench, ") != 2 {
		t.Fatalf("second run's file has its title once and two runs:\n%s", second)
	}
	iSecond, iFirst, iNotes := strings.Index(second, "| second |"), strings.Index(second, "| first |"), strings.Index(second, "hand-written notes")
	if iSecond < 0 || iFirst < 0 || iNotes < 0 || !(iSecond < iFirst && iFirst < iNotes) {
		t.Fatalf("want the newest run first, then the older sections in their order:\n%s", second)
	}
	if !strings.Contains(second, "- command: `sg bench --large 3`") || !strings.Contains(second, "- command: `sg bench --out x`") {
		t.Fatalf("each run keeps its own command line:\n%s", second)
	}
	if _, err := benchDoc([]byte("# my notes\n\nprecious\n"), []string{"sg", "bench"}, cfg, "| t |\n"); err == nil {
		t.Fatal("a file sg bench did not write was accepted for overwriting")
	}
}

// testWindow stands for benchLargeFor (2 s) where the test times answers.
const testWindow = 20 * time.Millisecond

// Without --large a large-answer row asks at least benchLargeMin answers and
// goes on while under benchLargeFor; with --large it asks exactly that many.
func TestTimedMBsCounts(t *testing.T) {
	calls := 0
	read := func() (int64, error) { calls++; return 1e6, nil }
	m, err := timedMBs(5, 3, testWindow, read)
	if err != nil || m.n != 5 || calls != 5 || m.mbs <= 0 {
		t.Fatalf("--large 5: %d calls, %+v, %v", calls, m, err)
	}
	calls = 0
	m, err = timedMBs(0, 3, testWindow, read)
	if err != nil || m.n != calls || m.n < 3 {
		t.Fatalf("default: %d calls, %+v, %v", calls, m, err)
	}
	// A slow answer: the minimum, however long it takes.
	calls = 0
	slow := func() (int64, error) {
		calls++
		deadline := time.Now().Add(testWindow / 2)
		for time.Now().Before(deadline) { // busy, so that the process's CPU moves
		}
		return 1e6, nil
	}
	m, err = timedMBs(0, 3, testWindow, slow)
	if err != nil || m.n != 3 {
		t.Fatalf("slow answers: %d ran, want 3 (%v)", m.n, err)
	}
	if _, ok := cputime.Process(); ok && m.cpuMs <= 0 {
		t.Fatalf("a busy read used no CPU per MB: %+v", m)
	}
	if _, err := timedMBs(0, 3, testWindow, func() (int64, error) { return 0, errors.New("boom") }); err == nil {
		t.Fatal("a failed read was not reported")
	}
}

// CPU rows only when sg runs in the bench's process; against a running sg
// the table says why there are none rather than print the callers' CPU as
// sg's.
func TestBenchLargeRowsCPU(t *testing.T) {
	pub := measured{mbs: 1000, cpuMs: 1, n: 100}
	wj, wm := measured{mbs: 300, cpuMs: 3.2, n: 9, answerBytes: 17_800_000}, measured{mbs: 200, cpuMs: 5, n: 65, answerBytes: 2_470_000}
	sj, sm := measured{mbs: 400, cpuMs: 2.5, n: 20}, measured{mbs: 150, cpuMs: 7, n: 58}
	rj, rm := measured{mbs: 600, cpuMs: 2, n: 12}, measured{mbs: 500, cpuMs: 2.5, n: 80}
	var own benchResult
	own.addLarge(true, pub, wj, wm, sj, sm, rj, rm)
	var b strings.Builder
	writeBenchTable(&b, own.rows)
	for _, want := range []string{"| large answer, CPU (plain: publish) | core-ms/MB | 1.00 | 3.20 | 3.2x | 5.00 | 5.0x |",
		"| large answer (plain: publish) | MB/s | 1000 | 300 | 30.0% | 200 | 20.0% |",
		"| " + relayFloorRow + " | MB/s | 1000 | 600 | 60.0% | 500 | 50.0% |",
		"| " + relayFloorRow + ", CPU | core-ms/MB | 1.00 | 2.00 | 2.0x | 2.50 | 2.5x |"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("own sg's table lacks %q:\n%s", want, b.String())
		}
	}
	if !slices.ContainsFunc(own.notes, func(n string) bool {
		return strings.Contains(n, "9 JSON, 65 msgpack whole; 20 JSON, 58 msgpack streamed")
	}) {
		t.Errorf("own sg's notes do not say what ran: %q", own.notes)
	}
	if !slices.ContainsFunc(own.notes, func(n string) bool {
		return strings.Contains(n, "17.80 MB JSON, 2.47 MB msgpack") && strings.Contains(n, "12 and 80 relayed")
	}) {
		t.Errorf("own sg's notes do not say what the floor relayed: %q", own.notes)
	}
	var running benchResult
	running.addLarge(false, pub, wj, wm, sj, sm, rj, rm)
	for _, r := range running.rows {
		if r.unit == "core-ms/MB" {
			t.Errorf("a running sg's table has a CPU row: %+v", r)
		}
	}
	if !slices.ContainsFunc(running.notes, func(n string) bool { return strings.Contains(n, "CPU per MB: not reported") }) {
		t.Errorf("a running sg's notes do not say why there is no CPU row: %q", running.notes)
	}
}

// --phase-profiles writes one CPU profile per phase, named by pass and
// phase, and returns the phase's own error; without a directory it only
// measures.
func TestPhaseProfilesWritesOnePerPhase(t *testing.T) {
	dir := t.TempDir()
	p := phaseProfiles{dir: dir, pass: "logon"}
	ran := 0
	if err := p.run("clients-json-0", func() error { ran++; return nil }); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	if err := p.run("publish", func() error { ran++; return boom }); !errors.Is(err, boom) {
		t.Fatalf("got %v, want the phase's error", err)
	}
	if ran != 2 {
		t.Fatalf("measured %d times, want 2", ran)
	}
	for _, name := range []string{"logon-clients-json-0.pprof", "logon-publish.pprof"} {
		f, err := os.Open(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		// A CPU profile is a gzipped protobuf; a profile never started is empty.
		z, err := gzip.NewReader(f)
		if err != nil {
			t.Fatalf("%s is not a profile: %v", name, err)
		}
		b, err := io.ReadAll(z)
		f.Close()
		if err != nil || len(b) == 0 {
			t.Fatalf("%s: %d bytes, %v", name, len(b), err)
		}
	}
	if err := (phaseProfiles{}).run("x", func() error { ran++; return nil }); err != nil || ran != 3 {
		t.Fatalf("without a dir: %v, measured %d", err, ran)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 2 {
		t.Fatalf("%d files, want 2", len(entries))
	}
	var stdout, stderr bytes.Buffer
	err := realMain(context.Background(), []string{"bench", "--cpuprofile", filepath.Join(dir, "all.pprof"), "--phase-profiles", dir, "--out", ""}, &stdout, &stderr)
	if err == nil || !strings.Contains(err.Error(), "exclude each other") {
		t.Fatalf("both profiles: got %v", err)
	}
}

// sg bench, end to end at its smallest: it starts its own sg twice (request
// log on, off), measures every row against plain NATS and writes the table,
// each figure a positive number; a change that breaks a phase (the relay
// floor, a caller, a pass) fails here, not in the next person's run.
func TestBenchRunsEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: starts sg twice")
	}
	out := filepath.Join(t.TempDir(), "B.md")
	var stdout, stderr bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	args := []string{"--requests", "10", "--clients", "2", "--duration", "200ms", "--large", "1", "--publish-mib", "4",
		"--large-last", "30m", "--out", out}
	if err := cmdBench(ctx, args, &stdout, &stderr); err != nil {
		t.Fatalf("sg bench: %v\n%s", err, stderr.String())
	}
	doc, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	rows := []string{"small getData p50, 1 client", "small getData p99, 1 client", "small getData, 1 client", "small getData, 2 clients",
		"large answer (plain: publish)", "large answer, streamed (plain: publish)", relayFloorRow + " |",
		smallFloorRow + ", p50, 1 client", smallFloorRow + ", 2 clients"}
	passes := strings.Split(string(doc), "\n### sg, request log ")
	if len(passes) != 3 || !strings.HasPrefix(passes[1], "on") || !strings.HasPrefix(passes[2], "off") {
		t.Fatalf("want a pass with the request log on, then off:\n%s", doc)
	}
	for _, pass := range passes[1:] {
		for _, row := range rows {
			i := strings.Index(pass, "| "+row)
			if i < 0 {
				t.Fatalf("no row %q in:\n%s", row, pass)
			}
			cells := strings.Split(strings.SplitN(pass[i:], "\n", 2)[0], "|")
			// | what | unit | plain | sg JSON | ratio | sg msgpack | ratio |
			for _, k := range []int{3, 4, 6} {
				v, err := strconv.ParseFloat(strings.TrimSpace(cells[k]), 64)
				if err != nil || v <= 0 {
					t.Errorf("row %q: cell %d is %q, want a positive figure", row, k, cells[k])
				}
			}
		}
	}
}
