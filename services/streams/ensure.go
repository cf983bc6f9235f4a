package streams

import (
	"context"
	"errors"

	"github.com/nats-io/nats.go/jetstream"
)

// Ensure creates the stream, or binds it when it exists with this
// configuration, and updates it only when its configuration differs (a
// stream an older sg made). CreateOrUpdateStream rewrites the configuration
// on every start; in nats-server 2.15.2 a stream update races a consumer
// being created on the same stream (fileStore.UpdateConfig against
// fileStore.ConsumerStore, seen by -race when one service started while
// another read the stream), and a create with the same configuration writes
// nothing.
func Ensure(ctx context.Context, js jetstream.JetStream, cfg jetstream.StreamConfig) (jetstream.Stream, error) {
	st, err := js.CreateStream(ctx, cfg)
	if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
		return js.UpdateStream(ctx, cfg)
	}
	return st, err
}

// EnsureKeyValue is Ensure for a key-value bucket.
func EnsureKeyValue(ctx context.Context, js jetstream.JetStream, cfg jetstream.KeyValueConfig) (jetstream.KeyValue, error) {
	kv, err := js.CreateKeyValue(ctx, cfg)
	if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
		return js.UpdateKeyValue(ctx, cfg)
	}
	return kv, err
}

// EnsureObjectStore is Ensure for an object store bucket.
func EnsureObjectStore(ctx context.Context, js jetstream.JetStream, cfg jetstream.ObjectStoreConfig) (jetstream.ObjectStore, error) {
	obj, err := js.CreateObjectStore(ctx, cfg)
	if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
		return js.UpdateObjectStore(ctx, cfg)
	}
	return obj, err
}
