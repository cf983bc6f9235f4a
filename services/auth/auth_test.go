package auth

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/sg-project/sg/subjects"
	"github.com/sg-project/sg/test/natstest"
)

func TestInitFilesAndConf(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "auth")
	m, err := Init(dir, "acme.sg")
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Users) != len(subjects.Roles) {
		t.Fatalf("%d users, want one per role (%d)", len(m.Users), len(subjects.Roles))
	}
	for _, u := range m.Users {
		fi, err := os.Stat(SeedFile(dir, u.Name))
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: mode %v, want 0600", fi.Name(), fi.Mode().Perm())
		}
		b, _ := os.ReadFile(SeedFile(dir, u.Name))
		if got := InboxPrefixOf(b); got != u.InboxPrefix() {
			t.Errorf("%s: inbox prefix %q, want %q", u.Name, got, u.InboxPrefix())
		}
	}
	if _, err := Init(dir, "sg"); err == nil {
		t.Error("Init over existing credentials succeeded")
	}
	// The config file, parsed by nats-server, holds exactly the permissions
	// built in code: sg nats and a standalone server enforce the same thing.
	want, err := m.NkeyUsers()
	if err != nil {
		t.Fatal(err)
	}
	got, err := LoadConf(filepath.Join(dir, ConfFile))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Fatalf("conf has %d users, want %d", len(got), len(want))
	}
	for i := range want {
		if got[i].Nkey != want[i].Nkey || !reflect.DeepEqual(got[i].Permissions.Publish.Allow, want[i].Permissions.Publish.Allow) ||
			!reflect.DeepEqual(got[i].Permissions.Subscribe.Allow, want[i].Permissions.Subscribe.Allow) {
			t.Errorf("user %d: conf %+v %+v, want %+v %+v", i, got[i].Permissions.Publish, got[i].Permissions.Subscribe,
				want[i].Permissions.Publish, want[i].Permissions.Subscribe)
		}
	}
}

// connect connects as user name of dir and records async errors.
func connect(t *testing.T, url, dir, name string) (*nats.Conn, chan error) {
	t.Helper()
	opts, err := ConnectOptions(SeedFile(dir, name))
	if err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, 16)
	opts = append(opts, nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		select {
		case errs <- err:
		default:
		}
	}))
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		t.Fatalf("connect as %s: %v", name, err)
	}
	t.Cleanup(nc.Close)
	return nc, errs
}

func violation(t *testing.T, errs chan error, what string) {
	t.Helper()
	select {
	case err := <-errs:
		if !errors.Is(err, nats.ErrPermissionViolation) {
			t.Errorf("%s: error %v, want a permissions violation", what, err)
		}
	case <-time.After(5 * time.Second):
		t.Errorf("%s: no permissions violation within 5s", what)
	}
}

func TestRotateAndRemove(t *testing.T) {
	dir := t.TempDir()
	if _, err := Init(dir, "sg"); err != nil {
		t.Fatal(err)
	}
	if _, err := Add(dir, "alice", subjects.RoleClient, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := Add(dir, "alice", subjects.RoleClient, ""); err == nil {
		t.Error("a second alice was added")
	}
	if _, err := Add(dir, "x", subjects.RoleRC, "rc-1"); err == nil {
		t.Error("an rc restricted to one id was added")
	}
	for _, bad := range []string{"", "a/b", "a.b", "a b", "../x", "x*", strings.Repeat("x", 200)} {
		if _, err := Add(dir, bad, subjects.RoleClient, ""); err == nil {
			t.Errorf("user name %q was accepted", bad)
		}
	}
	old, _ := os.ReadFile(SeedFile(dir, "alice"))
	oldFile := filepath.Join(t.TempDir(), "old.nk")
	if err := os.WriteFile(oldFile, old, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Rotate(dir, "alice"); err != nil {
		t.Fatal(err)
	}
	users, err := LoadConf(filepath.Join(dir, ConfFile))
	if err != nil {
		t.Fatal(err)
	}
	srv := natstest.Start(t, func(o *server.Options) { o.Nkeys = users })
	if nc, _ := connect(t, srv.ClientURL(), dir, "alice"); !nc.IsConnected() {
		t.Fatal("rotated alice not connected")
	}
	opts, err := ConnectOptions(oldFile)
	if err != nil {
		t.Fatal(err)
	}
	if nc, err := nats.Connect(srv.ClientURL(), opts...); err == nil {
		nc.Close()
		t.Error("the seed from before the rotation still connects")
	}
	if err := Remove(dir, "alice"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(SeedFile(dir, "alice")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("removed alice's seed is still there: %v", err)
	}
	if m, _ := Load(dir); strings.Contains(string(must(m.Conf())), "alice") {
		t.Error("removed alice is still in the config")
	}
}

func must(b []byte, err error) []byte {
	if err != nil {
		panic(err)
	}
	return b
}

// TestServerEnforces: the generated config on a real server lets a client
// call the API and read its own inbox, and refuses the rest with a
// permissions violation.
func TestServerEnforces(t *testing.T) {
	dir := t.TempDir()
	if _, err := Init(dir, "sg"); err != nil {
		t.Fatal(err)
	}
	if _, err := Add(dir, "bob", subjects.RoleClient, ""); err != nil {
		t.Fatal(err)
	}
	users, err := LoadConf(filepath.Join(dir, ConfFile))
	if err != nil {
		t.Fatal(err)
	}
	srv := natstest.Start(t, func(o *server.Options) { o.Nkeys = users })
	if _, err := nats.Connect(srv.ClientURL()); err == nil {
		t.Fatal("an anonymous connection was accepted")
	}
	s := subjects.Default()
	gw, _ := connect(t, srv.ClientURL(), dir, "gw")
	sub, err := gw.SubscribeSync(s.GWAPI(subjects.APIPing))
	if err != nil {
		t.Fatal(err)
	}
	if err := gw.Flush(); err != nil {
		t.Fatal(err)
	}
	client, errs := connect(t, srv.ClientURL(), dir, "client")
	inbox := client.NewInbox()
	if !strings.HasPrefix(inbox, "_INBOX.client.") {
		t.Fatalf("client inbox %q, want the _INBOX.client. prefix", inbox)
	}
	if err := client.PublishRequest(s.GWAPI(subjects.APIPing), inbox, []byte("hi")); err != nil {
		t.Fatal(err)
	}
	if m, err := sub.NextMsg(5 * time.Second); err != nil || m.Reply != inbox {
		t.Fatalf("GW got %v, %v; want the request with reply %s", m, err, inbox)
	}
	if err := client.Publish(s.DAPRegister("d1"), []byte("x")); err != nil {
		t.Fatal(err)
	}
	violation(t, errs, "client publishes a DAP registration")
	if _, err := client.SubscribeSync("_INBOX.bob.>"); err != nil {
		t.Fatal(err)
	}
	violation(t, errs, "client subscribes to bob's inbox")
}
