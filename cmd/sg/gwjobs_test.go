package main

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sg-project/sg/messages"
	"github.com/sg-project/sg/services/auth"
	"github.com/sg-project/sg/services/dap/demo"
	"github.com/sg-project/sg/subjects"
	"github.com/sg-project/sg/test/testlog"
)

// clientCreds: --jobs-creds wins; else, with a GW credential, the client
// credential sg auth made beside it; else none (the GW's own connection).
func TestJobsClientCreds(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "auth")
	if _, err := auth.Init(dir, "sg"); err != nil {
		t.Fatal(err)
	}
	gwSeed := auth.SeedFile(dir, "gw")
	for _, c := range []struct {
		jobs, gw, want string
	}{
		{"", gwSeed, auth.SeedFile(dir, "client")},
		{"/elsewhere/alice.nk", gwSeed, "/elsewhere/alice.nk"},
		{"", "", ""},
		{"", filepath.Join(t.TempDir(), "gw.nk"), ""}, // no client.nk beside it
	} {
		if got := (JobsConfig{Creds: c.jobs}).clientCreds(c.gw); got != c.want {
			t.Errorf("jobs %q gw %q: %q, want %q", c.jobs, c.gw, got, c.want)
		}
	}
	jc, err := loadJobsConfig(func(k string) (string, bool) {
		if k == "SG_GW_JOBS_CREDS" {
			return "/x/client.nk", true
		}
		return "", false
	})
	if err != nil || jc.Creds != "/x/client.nk" {
		t.Fatalf("SG_GW_JOBS_CREDS: %+v %v", jc.Creds, err)
	}
}

// TestGWJobsUnderAuth: a deployment of separate commands (sg rc, sg agg,
// sg dap --demo, sg gw) under NATS auth, each on its role's credential:
// `sg gw` runs async jobs on the client credential beside its own, so an
// async query is answered and no service logs a permissions violation.
func TestGWJobsUnderAuth(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a whole deployment")
	}
	dir := t.TempDir()
	authDir := filepath.Join(dir, "auth")
	if _, err := auth.Init(authDir, "sg"); err != nil {
		t.Fatal(err)
	}
	srv, _, err := startNATSServerWith(natsServerConfig{Listen: "127.0.0.1:0", DataDir: filepath.Join(dir, "js"), AuthDir: authDir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
	url := srv.ClientURL()
	var logs testlog.Buffer
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	for _, args := range [][]string{
		{"agg", "--creds", auth.SeedFile(authDir, "agg")},
		{"rc", "--creds", auth.SeedFile(authDir, "rc")},
		{"dap", "--demo", "--creds", auth.SeedFile(authDir, "dap")},
		{"gw", "--creds", auth.SeedFile(authDir, "gw")},
	} {
		wg.Go(func() {
			if err := realMain(ctx, append(args, "--nats", url), &logs, &logs); err != nil && ctx.Err() == nil {
				t.Errorf("sg %s: %v", args[0], err)
			}
		})
	}
	// Wait for the deployment to serve: the GW takes requests (its micro
	// endpoints answer $SRV.PING) and the RC is warm with the whole demo
	// fleet (a GW holds requests until it knows a warm RC).
	opts, err := auth.ConnectOptions(auth.SeedFile(authDir, "admin"))
	if err != nil {
		t.Fatal(err)
	}
	admin, err := nats.Connect(url, opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	s := subjects.Default()
	anns, err := admin.SubscribeSync(s.RCAnnouncePattern())
	if err != nil {
		t.Fatal(err)
	}
	bound := time.Now().Add(60 * time.Second)
	for {
		m, err := anns.NextMsg(time.Until(bound))
		if err != nil {
			t.Fatalf("no warm RC with the demo fleet: %v\nlogs:\n%s", err, logs.String())
		}
		if a, err := messages.DecodeValid[messages.RCAnnouncement](m.Data); err == nil && !a.Warming && a.DAPs >= 3*len(demo.Regions) {
			break
		}
	}
	if _, err := admin.Request("$SRV.PING."+s.ServiceName(subjects.ServiceGW), nil, time.Until(bound)); err != nil {
		t.Fatalf("no GW: %v\nlogs:\n%s", err, logs.String())
	}
	client := auth.SeedFile(authDir, "client")
	if out, err := sg(t, "ping", "--nats", url, "--creds", client, "--wait", "30s", "--log-level", "error"); err != nil {
		t.Fatalf("ping: %v\n%s\nlogs:\n%s", err, out, logs.String())
	}
	out, err := sg(t, "query", "--async", "--nats", url, "--creds", client, "--wait", "30s", "--log-level", "error",
		"getData", `{"table":"trade","labels":{"region":"eu"},"groupBy":["sym"],"agg":[["n","count"]]}`)
	if err != nil || !strings.Contains(out, "(6 rows)") {
		t.Fatalf("query --async: %v\n%s\nlogs:\n%s", err, out, logs.String())
	}
	l := logs.String()
	if !strings.Contains(l, "async jobs run on this client credential") {
		t.Errorf("sg gw did not say which credential its jobs run on:\n%s", l)
	}
	if strings.Contains(l, "violation") {
		t.Fatalf("a service logged a permissions violation:\n%s", l)
	}
}

// Retry-After flags taken as given are checked before anything starts: a
// floor of 0 would tell async callers to poll again at once.
func TestRetryAfterFlagsAreChecked(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"gw", "--retry-min", "0"}, "--retry-min (SG_RETRY_MIN) 0s: want a positive duration"},
		{[]string{"run", "--retry-min", "0", "--retry-max", "0"}, "--retry-min (SG_RETRY_MIN) 0s"},
		{[]string{"gw", "--retry-min", "5s", "--retry-max", "2s"}, "--retry-max (SG_RETRY_MAX) 2s is below --retry-min (SG_RETRY_MIN) 5s"},
		{[]string{"run", "--retry-nominal-agg", "-1s"}, "--retry-nominal-agg (SG_RETRY_NOMINAL_AGG) -1s"},
		{[]string{"gw", "--retry-safety-margin", "1.5"}, "--retry-safety-margin (SG_RETRY_SAFETY_MARGIN) 1.5"},
	} {
		var out, errb bytes.Buffer
		err := realMain(context.Background(), c.args, &out, &errb)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("sg %s: %v; want an error saying %q", strings.Join(c.args, " "), err, c.want)
		}
	}
}
