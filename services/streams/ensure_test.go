package streams_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sg-project/sg/services/streams"
	"github.com/sg-project/sg/test/natstest"
)

// Ensure makes a stream, binds it unchanged when the configuration is the
// same (its data kept), and updates it when the configuration differs, as
// for a stream an older sg made.
func TestEnsure(t *testing.T) {
	nc := natstest.Connect(t, natstest.Start(t))
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cfg := jetstream.StreamConfig{Name: "ENSURE", Subjects: []string{"ensure.>"}, Storage: jetstream.FileStorage, MaxMsgsPerSubject: 1}
	if _, err := streams.Ensure(ctx, js, cfg); err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, "ensure.a", []byte("x")); err != nil {
		t.Fatal(err)
	}
	st, err := streams.Ensure(ctx, js, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if n := st.CachedInfo().State.Msgs; n != 1 {
		t.Fatalf("bound stream holds %d messages, want 1", n)
	}
	cfg.AllowMsgTTL = true
	st, err = streams.Ensure(ctx, js, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if !st.CachedInfo().Config.AllowMsgTTL || st.CachedInfo().State.Msgs != 1 {
		t.Fatalf("updated stream: AllowMsgTTL %v, %d messages; want true, 1", st.CachedInfo().Config.AllowMsgTTL, st.CachedInfo().State.Msgs)
	}
	// A change the server refuses is an error, not a silent bind.
	cfg.Storage = jetstream.MemoryStorage
	if _, err := streams.Ensure(ctx, js, cfg); err == nil {
		t.Fatal("a storage change was accepted")
	}
	// Buckets too.
	if _, err := streams.EnsureKeyValue(ctx, js, jetstream.KeyValueConfig{Bucket: "kv"}); err != nil {
		t.Fatal(err)
	}
	if _, err := streams.EnsureKeyValue(ctx, js, jetstream.KeyValueConfig{Bucket: "kv", History: 2}); err != nil {
		t.Fatal(err)
	}
	if _, err := streams.EnsureObjectStore(ctx, js, jetstream.ObjectStoreConfig{Bucket: "obj"}); err != nil {
		t.Fatal(err)
	}
	if _, err := streams.EnsureObjectStore(ctx, js, jetstream.ObjectStoreConfig{Bucket: "obj", Description: "d"}); err != nil {
		t.Fatal(err)
	}
}
