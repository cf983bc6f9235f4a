package test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/sg-project/sg/messages"
	"github.com/sg-project/sg/services/agg"
	"github.com/sg-project/sg/services/auth"
	"github.com/sg-project/sg/services/dap"
	"github.com/sg-project/sg/services/dap/demo"
	"github.com/sg-project/sg/services/gw"
	"github.com/sg-project/sg/services/gw/client"
	"github.com/sg-project/sg/services/rc"
	"github.com/sg-project/sg/subjects"
	"github.com/sg-project/sg/test/natstest"
)

// violations collects the permissions violations the server reports to one
// connection (asynchronously, as it reports them).
type violations struct {
	name string
	mu   sync.Mutex
	errs []error
	more chan struct{} // signalled on every new error
}

func (v *violations) add(err error) {
	v.mu.Lock()
	v.errs = append(v.errs, err)
	v.mu.Unlock()
	select {
	case v.more <- struct{}{}:
	default:
	}
}

func (v *violations) list() []error {
	v.mu.Lock()
	defer v.mu.Unlock()
	return append([]error(nil), v.errs...)
}

// await waits, with a bound, for the server to refuse the publish on (or
// the subscription to) subject with a permissions violation.
func (v *violations) await(t *testing.T, op, subject string) {
	t.Helper()
	want := fmt.Sprintf("Permissions Violation for %s to %q", op, subject)
	bound := time.After(10 * time.Second)
	for {
		for _, err := range v.list() {
			if errors.Is(err, nats.ErrPermissionViolation) && strings.Contains(err.Error(), want) {
				return
			}
		}
		select {
		case <-v.more:
		case <-bound:
			t.Fatalf("%s: no %q within 10s; errors: %v", v.name, want, v.list())
		}
	}
}

// authSystem is the system of system_test.go with authentication on: every
// service connects with the credential of its role, made by sg auth.
type authSystem struct {
	*system
	dir  string
	url  string
	seen map[string]*violations // per connection of a service, by credential name
}

// connectAs connects with the credential called name; the server's
// violations reported to it are in as.seen[name].
func (as *authSystem) connectAs(t *testing.T, name string) *nats.Conn {
	t.Helper()
	nc, v := as.connect(t, name)
	as.seen[name] = v
	return nc
}

// connect connects with the credential called name and records the
// violations the server reports to it.
func (as *authSystem) connect(t *testing.T, name string) (*nats.Conn, *violations) {
	t.Helper()
	opts, err := auth.ConnectOptions(auth.SeedFile(as.dir, name))
	if err != nil {
		t.Fatal(err)
	}
	v := &violations{name: name, more: make(chan struct{}, 1)}
	opts = append(opts, nats.Name("auth-test-"+name), nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { v.add(err) }))
	nc, err := nats.Connect(as.url, opts...)
	if err != nil {
		t.Fatalf("connect as %s: %v", name, err)
	}
	t.Cleanup(nc.Close)
	return nc, v
}

// startAuthSystem starts GW, RC and Agg, each on its role's credential;
// mods adjust the GW's config (with the system's connections at hand).
func startAuthSystem(t *testing.T, mods ...func(*authSystem, *gw.Config)) *authSystem {
	t.Helper()
	dir := t.TempDir()
	if _, err := auth.Init(dir, subjects.DefaultPrefix); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"alice", "bob"} {
		if _, err := auth.Add(dir, name, subjects.RoleClient, ""); err != nil {
			t.Fatal(err)
		}
	}
	// A per-DAP credential: DAP d1 and no other.
	if _, err := auth.Add(dir, "d1", subjects.RoleDAP, "d1"); err != nil {
		t.Fatal(err)
	}
	// The server loads the users from the config file that sg auth wrote,
	// as sg nats --auth and a standalone nats-server do.
	users, err := auth.LoadConf(filepath.Join(dir, auth.ConfFile))
	if err != nil {
		t.Fatal(err)
	}
	srv := natstest.Start(t, func(o *server.Options) { o.Nkeys = users })
	if nc, err := nats.Connect(srv.ClientURL()); err == nil {
		nc.Close()
		t.Fatal("the server admitted a connection without a credential")
	}
	as := &authSystem{dir: dir, url: srv.ClientURL(), seen: map[string]*violations{}}

	s := subjects.Default()
	log := testLogger(t)
	reg := prometheus.NewRegistry()
	ctx, cancel := context.WithCancel(context.Background())
	sys := &system{t: t, nc: as.connectAs(t, "dap"), s: s, reg: reg, ctx: ctx, wg: &sync.WaitGroup{},
		errs: make(chan error, 64), log: log, url: as.url}
	as.system = sys
	t.Cleanup(func() {
		cancel()
		done := make(chan struct{})
		go func() { sys.wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			t.Error("services did not stop within 15s")
		}
		close(sys.errs)
		for err := range sys.errs {
			t.Errorf("service: %v", err)
		}
	})
	// The request log and the DAP state stream are on, so the JetStream
	// permissions of the GW and the RC are exercised too.
	gcfg := gw.Config{ID: "gw-1", NC: as.connectAs(t, "gw"), Subjects: s, Log: log, AnnounceEvery: 20 * time.Millisecond,
		Registry: reg, RequestLog: &gw.Durability{Memory: true}, AnswerStore: &gw.AnswerStore{Memory: true}}
	for _, mod := range mods {
		mod(as, &gcfg)
	}
	g, err := gw.New(gcfg)
	if err != nil {
		t.Fatal(err)
	}
	r, err := rc.New(rc.Config{ID: "rc-1", NC: as.connectAs(t, "rc"), Subjects: s, Log: log, TickEvery: 200 * time.Millisecond,
		AnnounceEvery: 20 * time.Millisecond, AggIDs: []string{"agg-1"}, Registry: reg, JetStream: &rc.Durability{Memory: true}})
	if err != nil {
		t.Fatal(err)
	}
	a, err := agg.New(agg.Config{ID: "agg-1", NC: as.connectAs(t, "agg"), Subjects: s, Log: log})
	if err != nil {
		t.Fatal(err)
	}
	sys.gw = g
	sys.client = client.New(as.connectAs(t, "alice"), s)
	sys.run("agg", a.Run)
	<-a.Ready()
	sys.run("rc", r.Run)
	sys.run("gw", g.Run)
	select {
	case <-g.Ready():
	case <-time.After(10 * time.Second):
		t.Fatal("GW not ready within 10s")
	}
	return as
}

// TestAuthWholeSystem: with authentication on and every service on its
// role's credential, a getData is answered right, and no service meets a
// single permissions violation: the roles' permissions hold every subject
// the services use (JetStream and micro included).
func TestAuthWholeSystem(t *testing.T) {
	as := startAuthSystem(t)
	fleet := as.startDemo(demoFleetConfig(as.system, 2000))
	lay := fleet.Layout
	args := messages.GetDataArgs{Table: demo.Trade, StartTS: lay.IDBStart.Add(-3 * time.Hour), EndTS: lay.End.Add(-10 * time.Minute),
		Labels: messages.LabelSelector{demo.LabelKey: {"eu", "us"}}, GroupBy: []string{"sym"},
		Agg: []messages.AggSpec{{Name: "n", Func: messages.AggCount}, {Name: "volume", Func: messages.AggSum, Column: "size"}}}
	resp, got := as.getData(args, messages.Opts{})
	if !resp.Header.Status.IsOK() {
		t.Fatalf("status %+v", resp.Header.Status)
	}
	sameTable(t, got, expected(t, fleet, args))
	for name, v := range as.seen {
		if errs := v.list(); len(errs) > 0 {
			t.Errorf("%s met permissions violations: %v", name, errs)
		}
	}
}

// TestAuthAsyncJobsOnClientCredential: under authentication a GW's async
// jobs take their answers, as a client, on the client credential sg auth
// made beside the GW's (as `sg gw` finds it): a job submitted by another
// client is answered, and no connection meets a permissions violation. On
// the GW's own credential the job's answer would be refused (a GW may
// publish to caller inboxes only, and its own is a service inbox).
func TestAuthAsyncJobsOnClientCredential(t *testing.T) {
	as := startAuthSystem(t, func(as *authSystem, c *gw.Config) {
		creds := auth.ClientSeedBeside(auth.SeedFile(as.dir, "gw"))
		if creds != auth.SeedFile(as.dir, string(subjects.RoleClient)) {
			t.Fatalf("client credential beside the GW's: %q", creds)
		}
		c.Jobs = &gw.Jobs{Memory: true, NC: as.connectAs(t, strings.TrimSuffix(filepath.Base(creds), auth.SeedExt))}
	})
	src, fleet := engineSource(t, as.system)
	as.startDAP(oneDAP(src, 1))
	as.waitDAPs(1)
	args := messages.GetDataArgs{Table: demo.Trade, StartTS: fleet.Layout.Start, EndTS: fleet.Layout.End,
		Labels: messages.LabelSelector{demo.LabelKey: {"eu"}}, GroupBy: []string{"sym"},
		Agg: []messages.AggSpec{{Name: "n", Func: messages.AggCount}}}
	ctx, cancel := context.WithTimeout(as.ctx, 30*time.Second)
	defer cancel()
	job, err := as.client.Submit(ctx, messages.RequestHeader{API: subjects.APIGetData}, args)
	if err != nil {
		t.Fatalf("submit: %v", err)
	}
	resp, err := as.client.Wait(ctx, job.ID, nil)
	if err != nil || !resp.Header.Status.IsOK() {
		t.Fatalf("job %s: %v %+v", job.ID, err, resp.Header.Status)
	}
	var got messages.Table
	if err := msgpack.Unmarshal(resp.Payload, &got); err != nil {
		t.Fatal(err)
	}
	sameTable(t, got, expected(t, fleet, args))
	for name, v := range as.seen {
		if errs := v.list(); len(errs) > 0 {
			t.Errorf("%s met permissions violations: %v", name, errs)
		}
	}
}

// TestAuthClientReadsAnswerStore: a client credential's plain request for an
// answer above the max payload is told where the GW stored it, and reads it
// from there, without a permissions violation on either side.
func TestAuthClientReadsAnswerStore(t *testing.T) {
	as := startAuthSystem(t)
	as.startDemo(demoFleetConfig(as.system, 10000))
	nc, v := as.connect(t, "bob")
	m, _, size, _ := plainLargeRequest(t, nc, as.s)
	bucket, key := m.Header.Get(messages.HdrAnswerBucket), m.Header.Get(messages.HdrAnswerKey)
	if bucket != as.s.AnswerStore() || key == "" {
		t.Fatalf("headers %v: want the answer store %s and a key", m.Header, as.s.AnswerStore())
	}
	if data := fetchStoredAnswer(t, nc, bucket, key); len(data) != size {
		t.Fatalf("stored answer is %d bytes, the error said %d", len(data), size)
	}
	for name, v := range as.seen {
		if errs := v.list(); len(errs) > 0 {
			t.Errorf("%s met permissions violations: %v", name, errs)
		}
	}
	if errs := v.list(); len(errs) > 0 {
		t.Errorf("the client met permissions violations: %v", errs)
	}
}

// TestAuthPerDAPCredential: a DAP on a credential restricted to its id
// registers, serves portions and sends partials without a violation, and
// cannot speak for, or listen as, another DAP.
func TestAuthPerDAPCredential(t *testing.T) {
	as := startAuthSystem(t)
	src, fleet := engineSource(t, as.system)
	cfg := oneDAP(src, 1)
	cfg.NC, cfg.Subjects, cfg.Log = as.connectAs(t, "d1"), as.s, as.log
	d, err := dap.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	as.run("dap d1", d.Run)
	as.waitDAPs(1)
	args := messages.GetDataArgs{Table: demo.Trade, StartTS: fleet.Layout.Start, EndTS: fleet.Layout.End,
		Labels: messages.LabelSelector{demo.LabelKey: {"eu"}}, GroupBy: []string{"sym"},
		Agg: []messages.AggSpec{{Name: "n", Func: messages.AggCount}}}
	resp, got := as.getData(args, messages.Opts{})
	if !resp.Header.Status.IsOK() {
		t.Fatalf("status %+v", resp.Header.Status)
	}
	sameTable(t, got, expected(t, fleet, args))
	if errs := as.seen["d1"].list(); len(errs) > 0 {
		t.Fatalf("DAP d1 met permissions violations: %v", errs)
	}

	nc, v := as.connect(t, "d1")
	s := as.s
	for _, subject := range []string{s.DAPRegister("d2"), s.DAPLost("d2")} {
		if err := nc.Publish(subject, []byte{0x80}); err != nil {
			t.Fatal(err)
		}
		v.await(t, "Publish", subject)
	}
	for _, subject := range []string{s.DAPPortion("d2"), s.DAPPortion("*")} {
		if _, err := nc.SubscribeSync(subject); err != nil {
			t.Fatal(err)
		}
		v.await(t, "Subscription", subject)
	}
}

// TestAuthClientCannotForge: a client credential cannot pose as a DAP, an
// RC, an Agg or a GW, nor read another caller's answers; the server refuses
// every attempt with a permissions violation, and none of them reaches a
// subscriber.
func TestAuthClientCannotForge(t *testing.T) {
	as := startAuthSystem(t)
	fleet := as.startDemo(demoFleetConfig(as.system, 500))
	s := as.s
	spy, _ := as.connect(t, "admin")
	spied := natstest.Subscribe(t, spy, ">")

	mallory, v := as.connect(t, "alice")
	forgery := []byte("forged by alice")
	forged := []struct{ what, subject string }{
		{"a DAP event", s.DAPRegister(fleet.Shards[0].Config.ID)},
		{"a DAP loss", s.DAPLost(fleet.Shards[0].Config.ID)},
		{"an RC announcement", s.RCAnnounce("rc-evil")},
		{"a partial result", s.AggPartial("agg-1")},
		{"a completion", s.RCCompletion("rc-1")},
		{"a request-log entry", s.RequestLogEntry("gw-1", "forged")},
		{"an answer to the GW", s.GWAnswer("gw-1", "forged")},
		{"an answer into bob's inbox", subjects.InboxPrefix(subjects.RoleClient, "bob") + ".forged"},
		{"a JetStream API call", "$JS.API.STREAM.DELETE." + s.RequestLogStream()},
	}
	for _, f := range forged {
		t.Run("publish "+f.what, func(t *testing.T) {
			if err := mallory.Publish(f.subject, forgery); err != nil {
				t.Fatal(err)
			}
			v.await(t, "Publish", f.subject)
		})
	}
	for _, subject := range []string{
		subjects.InboxPrefix(subjects.RoleClient, "bob") + ".>", // another caller's inbox
		"_INBOX.>",
		s.GWAnswerPattern("gw-1"),
		s.GWAnswer("*", "*"),
		s.DAPPortion("*"),
		s.Prefix() + ".>", // the whole deployment
	} {
		t.Run("subscribe "+subject, func(t *testing.T) {
			if _, err := mallory.SubscribeSync(subject); err != nil {
				t.Fatal(err)
			}
			v.await(t, "Subscription", subject)
		})
	}

	// Bob's answer still reaches bob, and only bob.
	bobNC, _ := as.connect(t, "bob")
	bob := client.New(bobNC, s)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := bob.Do(ctx, subjects.APIPing, nil, messages.Opts{})
	if err != nil || !resp.Header.Status.IsOK() {
		t.Fatalf("bob's ping: %v %+v", err, resp.Header.Status)
	}
	// Every forged publish was dropped by the server: the spy, subscribed to
	// everything before they were sent, saw none of them.
	if err := spy.Flush(); err != nil {
		t.Fatal(err)
	}
	for {
		m, err := spied.NextMsg(0)
		if err != nil {
			break
		}
		for _, f := range forged {
			if m.Subject == f.subject && bytes.Equal(m.Data, forgery) {
				t.Errorf("%s on %s reached a subscriber", f.what, f.subject)
			}
		}
	}
}

// TestAuthGWAnswersOnlyCallers: a reply subject is the caller's to choose,
// so the GW's own credential may publish answers to caller inboxes only. A
// ping whose reply subject is a DAP's loss subject cannot make the RC drop
// that DAP, and the GW's credential itself is refused every sg subject a GW
// does not own.
func TestAuthGWAnswersOnlyCallers(t *testing.T) {
	as := startAuthSystem(t)
	fleet := as.startDemo(demoFleetConfig(as.system, 500))
	s := as.s
	victim := fleet.Shards[0].Config.ID

	spy, _ := as.connect(t, "admin")
	lost := natstest.Subscribe(t, spy, s.DAPLost(victim))
	mallory, _ := as.connect(t, "alice")
	body, err := messages.Request{Header: messages.RequestHeader{API: subjects.APIPing}, Content: messages.ContentMsgpack}.Encode()
	if err != nil {
		t.Fatal(err)
	}
	if err := mallory.PublishRequest(s.GWAPI(subjects.APIPing), s.DAPLost(victim), body); err != nil {
		t.Fatal(err)
	}
	// A ping from a proper inbox, sent after the forged one on the same
	// connection, reaches every DAP: the victim was not dropped.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := client.New(mallory, s).Do(ctx, subjects.APIPing, nil, messages.Opts{})
	if err != nil || !resp.Header.Status.IsOK() {
		t.Fatalf("ping: %v %+v", err, resp.Header.Status)
	}
	var reached []rc.PingResult
	if err := messages.Decode(resp.Payload, &reached); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, r := range reached {
		if r.Reached {
			n++
		}
	}
	if n != len(fleet.Shards) {
		t.Errorf("ping reached %d DAPs, want %d: %+v", n, len(fleet.Shards), reached)
	}
	if m, err := lost.NextMsg(0); err == nil {
		t.Errorf("a message on %s reached the RCs' subject: %q", m.Subject, m.Data)
	}
	as.waitDAPs(len(fleet.Shards))

	// Whatever the GW's code does with a reply subject, its credential
	// cannot publish on another service's subjects.
	gwc, v := as.connect(t, "gw")
	for _, subject := range []string{s.DAPLost(victim), s.DAPPortion(victim), s.AggPartial("agg-1"), s.AggExpect("agg-1"),
		s.RCAnnounce("rc-evil"), s.RCCompletion("rc-1"), s.GWAPI(subjects.APIPing),
		subjects.InboxPrefix(subjects.RoleRC, "rc") + ".x", "$JS.API.STREAM.DELETE." + s.RequestLogStream(),
		"$JS.API.STREAM.PURGE." + s.DAPStateStream()} {
		if err := gwc.Publish(subject, []byte("x")); err != nil {
			t.Fatal(err)
		}
		v.await(t, "Publish", subject)
	}
	// The running GW, if it tried to answer the forged ping, was refused too.
	for _, err := range as.seen["gw"].list() {
		if !strings.Contains(err.Error(), s.DAPLost(victim)) {
			t.Errorf("the GW met an unexpected violation: %v", err)
		}
		t.Logf("the server refused the GW: %v", err)
	}
}

// TestAuthStandaloneServer: a nats-server process started on the config
// that sg auth writes (nats-server -js -c nats-server.conf) enforces the same
// permissions as sg nats --auth.
func TestAuthStandaloneServer(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and starts a nats-server process")
	}
	dir := t.TempDir()
	if _, err := auth.Init(filepath.Join(dir, "auth"), subjects.DefaultPrefix); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "nats-server")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, "github.com/nats-io/nats-server/v2").CombinedOutput(); err != nil {
		t.Fatalf("build nats-server: %v\n%s", err, out)
	}
	srv := exec.Command(bin, "-c", filepath.Join(dir, "auth", auth.ConfFile), "-a", "127.0.0.1", "-p", "-1", "-js",
		"-sd", filepath.Join(dir, "js"), "-l", "/dev/stderr")
	stderr, err := srv.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Process.Kill(); _ = srv.Wait() })
	found := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if m := regexp.MustCompile(`Listening for client connections on (\S+:\d+)`).FindStringSubmatch(sc.Text()); m != nil {
				found <- "nats://" + m[1]
				break
			}
		}
		_, _ = io.Copy(io.Discard, stderr)
	}()
	as := &authSystem{dir: filepath.Join(dir, "auth"), seen: map[string]*violations{}}
	select {
	case as.url = <-found:
	case <-time.After(30 * time.Second):
		t.Fatal("nats-server did not report its client port within 30s")
	}
	if nc, err := nats.Connect(as.url); err == nil {
		nc.Close()
		t.Fatal("the standalone server admitted a connection without a credential")
	}
	s := subjects.Default()
	gwc, _ := as.connect(t, "gw")
	sub := natstest.Subscribe(t, gwc, s.GWAPI(subjects.APIPing))
	cl, v := as.connect(t, "client")
	if err := cl.PublishRequest(s.GWAPI(subjects.APIPing), cl.NewInbox(), []byte("hi")); err != nil {
		t.Fatal(err)
	}
	if _, err := sub.NextMsg(10 * time.Second); err != nil {
		t.Fatalf("the GW did not get the client's request: %v", err)
	}
	if err := cl.Publish(s.AggPartial("agg-1"), []byte("x")); err != nil {
		t.Fatal(err)
	}
	v.await(t, "Publish", s.AggPartial("agg-1"))
}

const (
	rolesBegin = "<!-- roles:begin (generated from subjects.PermissionsMarkdown; a test keeps it true) -->"
	rolesEnd   = "<!-- roles:end -->"
)

// The README's table of roles is the permissions the server enforces. Run
// with SG_UPDATE_README=1 to rewrite it.
func TestREADMERolesTable(t *testing.T) {
	data, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	s := string(data)
	i, j := strings.Index(s, rolesBegin), strings.Index(s, rolesEnd)
	if i < 0 || j < i {
		t.Fatal("README.md lacks the roles markers")
	}
	table, err := subjects.Default().PermissionsMarkdown()
	if err != nil {
		t.Fatal(err)
	}
	want := rolesBegin + "\n" + table + rolesEnd
	if s[i:j+len(rolesEnd)] == want {
		return
	}
	if os.Getenv("SG_UPDATE_README") != "" {
		if err := os.WriteFile("../README.md", []byte(s[:i]+want+s[j+len(rolesEnd):]), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Fatal("README.md's roles table differs from subjects.PermissionsMarkdown(); run SG_UPDATE_README=1 go test ./test -run READMERoles")
}
