package main

import (
	"bytes"
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sg-project/sg/messages"
	"github.com/sg-project/sg/services/dap/live"
	"github.com/sg-project/sg/subjects"
	"github.com/sg-project/sg/test/natstest"
)

// sg publish routes rows by label set, stamps time on rows without it (not on a
// reference table), and the stream holds one update per label set.
func TestPublish(t *testing.T) {
	srv := natstest.Start(t)
	nc := natstest.Connect(t, srv)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	js, _ := jetstream.New(nc)
	st, err := live.EnsureStream(ctx, js, subjects.Default(), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	before := time.Now()
	err = realMain(ctx, []string{"publish", "trade", `[{"sym":"VOD.L","region":"eu","price":1,"size":2},{"sym":"AAPL","region":"us","price":3.5,"size":4}]`,
		"--nats", srv.ClientURL(), "--log-level", "error"}, &out, io.Discard)
	if err != nil || !strings.Contains(out.String(), "published 2 rows of trade in 2 updates") {
		t.Fatalf("%v: %s", err, out.String())
	}
	m, err := st.GetLastMsgForSubject(ctx, subjects.Default().Live("trade", "region=us"))
	if err != nil {
		t.Fatal(err)
	}
	u, err := messages.DecodeValid[messages.LiveUpdate](m.Data)
	if err != nil || u.Rows.NumRows() != 1 || u.Rows.Col("sym").Strings[0] != "AAPL" || u.Rows.Col("time") == nil ||
		u.Rows.Col("time").Ints[0] < before.UnixNano() {
		t.Fatalf("update %+v, %v", u, err)
	}
	out.Reset()
	if err := realMain(ctx, []string{"publish", "instrument", `[{"sym":"VOD.L","region":"eu","lotSize":10}]`, "--nats", srv.ClientURL(), "--log-level", "error"}, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	m, err = st.GetLastMsgForSubject(ctx, subjects.Default().Live("instrument", "region=eu"))
	if err != nil {
		t.Fatal(err)
	}
	if u, err := messages.DecodeValid[messages.LiveUpdate](m.Data); err != nil || u.Rows.Col("time") != nil {
		t.Fatalf("reference update %+v, %v", u, err)
	}
	for _, bad := range [][]string{{"publish", "trade"}, {"publish", "trade", `{"not":"an array"}`}, {"publish", "trade", `[{"sym":"x"}]`}} {
		if err := realMain(ctx, append(bad, "--nats", srv.ClientURL(), "--log-level", "error"), io.Discard, io.Discard); err == nil {
			t.Errorf("%v accepted", bad)
		}
	}
}
