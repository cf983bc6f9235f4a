package main

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"
	"github.com/sg-project/sg/services/auth"
	"github.com/sg-project/sg/test/testlog"
)

func sg(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out, errb bytes.Buffer
	err := realMain(context.Background(), args, &out, &errb)
	return out.String() + errb.String(), err
}

func TestAuthCommand(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "auth")
	if out, err := sg(t, "auth", "init", dir); err != nil || !strings.Contains(out, "8 users") {
		t.Fatalf("auth init: %v\n%s", err, out)
	}
	if out, err := sg(t, "auth", "init", "--exist-ok", dir); err != nil || !strings.Contains(out, "already holds 8 users") {
		t.Fatalf("auth init --exist-ok: %v\n%s", err, out)
	}
	if out, err := sg(t, "auth", "add-client", dir, "alice"); err != nil || !strings.Contains(out, "_INBOX.alice") {
		t.Fatalf("add-client: %v\n%s", err, out)
	}
	if out, err := sg(t, "auth", "add", dir, "dap-eu", "--role", "dap", "--id", "dap-eu"); err != nil {
		t.Fatalf("add dap: %v\n%s", err, out)
	}
	out, err := sg(t, "auth", "list", dir)
	if err != nil || !strings.Contains(out, "alice") || !strings.Contains(out, "dap-eu") || !strings.Contains(out, "_SG_INBOX.gw") {
		t.Fatalf("list: %v\n%s", err, out)
	}
	before, _ := os.ReadFile(auth.SeedFile(dir, "alice"))
	if out, err := sg(t, "auth", "rotate", dir, "alice"); err != nil {
		t.Fatalf("rotate: %v\n%s", err, out)
	}
	if after, _ := os.ReadFile(auth.SeedFile(dir, "alice")); bytes.Equal(before, after) {
		t.Error("rotate left alice's seed as it was")
	}
	if out, err := sg(t, "auth", "remove", dir, "alice"); err != nil {
		t.Fatalf("remove: %v\n%s", err, out)
	}
	for _, args := range [][]string{
		{"auth", "init", dir},                       // already there
		{"auth", "add-client", dir, "gw"},           // name taken
		{"auth", "add", dir, "x", "--role", "root"}, // no such role
		{"auth", "add", dir, "x", "--role", "rc", "--id", "rc-1"},
		{"auth", "rotate", dir, "nobody"},
		{"auth", "frobnicate", dir},
		{"auth", "list", filepath.Join(dir, "missing")},
		{"auth"},
		{"auth", "init"},
		{"nats", "--listen", "127.0.0.1:0", "--data", t.TempDir(), "--auth", filepath.Join(dir, "missing")},
		{"nats", "--listen", "127.0.0.1:0", "--data", t.TempDir(), "--tls-cert", "c.pem"},
		{"nats", "--listen", "127.0.0.1:0", "--data", t.TempDir(), "--tls-ca", "ca.pem"},
		{"ping", "--creds", filepath.Join(dir, "missing.nk")},
		{"ping", "--tls-cert", "c.pem"},
	} {
		if out, err := sg(t, args...); err == nil {
			t.Errorf("sg %q: no error\n%s", args, out)
		}
	}
}

// writeCerts writes a CA and a server certificate for 127.0.0.1 signed by it,
// and a client certificate signed by it.
func writeCerts(t *testing.T, dir string) (ca, cert, key, clientCert, clientKey string) {
	t.Helper()
	write := func(name, typ string, der []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	newKey := func() *ecdsa.PrivateKey {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	caKey := newKey()
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "sg test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true,
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, _ := x509.ParseCertificate(caDER)
	leaf := func(n int64, usage x509.ExtKeyUsage, name string) (string, string) {
		k := newKey()
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(n), Subject: pkix.Name{CommonName: name},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
			IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &k.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		kb, err := x509.MarshalECPrivateKey(k)
		if err != nil {
			t.Fatal(err)
		}
		return write(name+".pem", "CERTIFICATE", der), write(name+"-key.pem", "EC PRIVATE KEY", kb)
	}
	ca = write("ca.pem", "CERTIFICATE", caDER)
	cert, key = leaf(2, x509.ExtKeyUsageServerAuth, "server")
	clientCert, clientKey = leaf(3, x509.ExtKeyUsageClientAuth, "client")
	return ca, cert, key, clientCert, clientKey
}

// TestTLSAndCredentials: a server started as sg nats starts it, with --auth
// and mutual TLS, admits a service that connects as connect() does with
// --creds and --tls-*, and refuses a connection without a client certificate
// or without a credential.
func TestTLSAndCredentials(t *testing.T) {
	dir := t.TempDir()
	authDir := filepath.Join(dir, "auth")
	if _, err := auth.Init(authDir, "sg"); err != nil {
		t.Fatal(err)
	}
	ca, cert, key, ccert, ckey := writeCerts(t, dir)
	srv, _, err := startNATSServerWith(natsServerConfig{Listen: "127.0.0.1:0", DataDir: filepath.Join(dir, "js"), AuthDir: authDir,
		TLSCert: cert, TLSKey: key, TLSCA: ca})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
	url := strings.Replace(srv.ClientURL(), "nats://", "tls://", 1)

	c := Common{NATSURL: url, Prefix: "sg", Creds: auth.SeedFile(authDir, "client"), TLSCA: ca, TLSCert: ccert, TLSKey: ckey}
	nc, _, stop, err := connect(c, "tls-test", zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	if err := nc.Flush(); err != nil {
		t.Fatalf("flush over TLS: %v", err)
	}
	if !nc.TLSRequired() || !strings.HasPrefix(nc.NewInbox(), "_INBOX.client.") {
		t.Errorf("TLS required %v, inbox %q", nc.TLSRequired(), nc.NewInbox())
	}
	for name, opts := range map[string][]nats.Option{
		"no client certificate": {nats.RootCAs(ca), must(nats.NkeyOptionFromSeed(auth.SeedFile(authDir, "client")))},
		"no credential":         {nats.RootCAs(ca), nats.ClientCert(ccert, ckey)},
		"no TLS":                {must(nats.NkeyOptionFromSeed(auth.SeedFile(authDir, "client")))},
	} {
		if nc, err := nats.Connect(srv.ClientURL(), append(opts, nats.Timeout(5*time.Second))...); err == nil {
			nc.Close()
			t.Errorf("%s: connected", name)
		}
	}
}

func must(o nats.Option, err error) nats.Option {
	if err != nil {
		panic(err)
	}
	return o
}

// TestRunWithAuth: sg run --auth makes the credentials, runs every part as
// its role without a single permissions violation (the sample query is
// answered), and a caller with the client credential gets answers while one
// with a DAP credential is refused.
func TestRunWithAuth(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the whole system")
	}
	authDir := filepath.Join(t.TempDir(), "auth")
	var logs testlog.Buffer
	text, stop := startRunLogging(t, &logs, "--auth", authDir)
	defer stop()
	if !strings.Contains(text, "made 8 credentials") || !strings.Contains(text, "(6 rows)") {
		t.Fatalf("sg run --auth output:\n%s", text)
	}
	url := regexp.MustCompile(`--nats (\S+)`).FindStringSubmatch(text)
	if url == nil || !strings.Contains(text, "--creds "+auth.SeedFile(authDir, "client")) {
		t.Fatalf("no URL and credential in the serving line:\n%s", text)
	}
	out, err := sg(t, "ping", "--nats", url[1], "--creds", auth.SeedFile(authDir, "client"), "--wait", "20s", "--log-level", "error")
	if err != nil || !strings.Contains(out, "reached") {
		t.Fatalf("ping as client: %v\n%s", err, out)
	}
	// Async within the roles' permissions: the GW runs jobs on sg run's
	// client connection.
	out, err = sg(t, "query", "--async", "--nats", url[1], "--creds", auth.SeedFile(authDir, "client"), "--wait", "30s", "--log-level", "error",
		"getData", `{"table":"trade","labels":{"region":"eu"},"groupBy":["sym"],"agg":[["n","count"]]}`)
	if err != nil || !strings.Contains(out, "(6 rows)") {
		t.Fatalf("query --async as client: %v\n%s", err, out)
	}
	out, err = sg(t, "ping", "--nats", url[1], "--creds", auth.SeedFile(authDir, "dap"), "--wait", "2s", "--log-level", "error")
	if err == nil || !strings.Contains(out, "permissions violation") {
		t.Fatalf("ping as a DAP: %v\n%s", err, out)
	}
	// Every part of sg run, the live demo's DAPs and feed included, worked
	// within its role's permissions.
	if l := logs.String(); strings.Contains(l, "violation") {
		t.Fatalf("sg run --auth logged violations:\n%s", l)
	}
}

// TestReloadAfterRotate: what sg nats does on SIGHUP. After a rotation and a
// reload the old key is refused and its open connection is closed; the new
// seed connects.
func TestReloadAfterRotate(t *testing.T) {
	dir := t.TempDir()
	authDir := filepath.Join(dir, "auth")
	if _, err := auth.Init(authDir, "sg"); err != nil {
		t.Fatal(err)
	}
	srv, opts, err := startNATSServerWith(natsServerConfig{Listen: "127.0.0.1:0", DataDir: filepath.Join(dir, "js"), AuthDir: authDir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
	oldSeed := filepath.Join(dir, "old.nk")
	b, _ := os.ReadFile(auth.SeedFile(authDir, "client"))
	if err := os.WriteFile(oldSeed, b, 0o600); err != nil {
		t.Fatal(err)
	}
	closed := make(chan struct{})
	old, err := nats.Connect(srv.ClientURL(), must(nats.NkeyOptionFromSeed(oldSeed)), nats.NoReconnect(),
		nats.ClosedHandler(func(*nats.Conn) { close(closed) }))
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	if _, err := auth.Rotate(authDir, "client"); err != nil {
		t.Fatal(err)
	}
	if err := reloadAuth(srv, opts, authDir); err != nil {
		t.Fatal(err)
	}
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("the connection on the old key was not closed by the reload")
	}
	if nc, err := nats.Connect(srv.ClientURL(), must(nats.NkeyOptionFromSeed(oldSeed))); err == nil {
		nc.Close()
		t.Fatal("the old key still connects")
	}
	nc, err := nats.Connect(srv.ClientURL(), must(nats.NkeyOptionFromSeed(auth.SeedFile(authDir, "client"))))
	if err != nil {
		t.Fatalf("the new key: %v", err)
	}
	nc.Close()
}
