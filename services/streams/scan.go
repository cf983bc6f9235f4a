// Package streams holds what sg does with JetStream streams in one place:
// Ensure makes a stream (or key-value or object store bucket) or binds it,
// and Scan reads what a stream holds now.
package streams

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Record is one stored message.
type Record struct {
	Subject string
	Data    []byte
	Seq     uint64    // stream sequence
	Time    time.Time // when the stream stored it
}

// Options choose what a scan reads.
type Options struct {
	// Filter is the subject filter ("" for the whole stream).
	Filter string
	// LastPerSubject reads only the last record of each subject.
	LastPerSubject bool
}

const (
	// fetchWait bounds one fetch, so a scan notices its context this often.
	fetchWait = time.Second
	// fetchBatch is the most records asked for at once.
	fetchBatch = 256
	// inactive: the server drops a consumer left behind (its reader gone
	// before it could delete it) after this long.
	inactive = 30 * time.Second
	// deleteTimeout bounds the consumer's deletion at the end of a scan.
	deleteTimeout = 2 * time.Second
)

// Scan reads through an ephemeral pull consumer of its own rather than an
// ordered consumer: an ordered consumer's Fetch re-creates its consumer on
// every call and retries a failed creation with a backoff that no context
// cancels (nats.go jetstream/ordered.go, reset). A GW stopping during a
// sweep once waited on that backoff past 30 s. Here every server request
// carries the caller's context and every fetch waits at most fetchWait, so a
// scan ends within about fetchWait of its context. An empty stream is not
// read at all: no consumer is made.
//
// Scan calls fn for each record the stream holds when the scan starts, in
// stream order, until fn returns an error (returned as is), ctx ends
// (ctx.Err()) or every record has been read (nil). Records stored after the
// scan starts may or may not be read.
func Scan(ctx context.Context, js jetstream.JetStream, stream string, o Options, fn func(Record) error) error {
	st, err := js.Stream(ctx, stream)
	if err != nil {
		return fmt.Errorf("stream %s: %w", stream, err)
	}
	if st.CachedInfo().State.Msgs == 0 {
		return nil
	}
	cfg := jetstream.ConsumerConfig{
		AckPolicy:         jetstream.AckNonePolicy,
		DeliverPolicy:     jetstream.DeliverAllPolicy,
		InactiveThreshold: inactive,
		MemoryStorage:     true,
	}
	if o.LastPerSubject {
		cfg.DeliverPolicy = jetstream.DeliverLastPerSubjectPolicy
	}
	switch {
	case o.Filter != "":
		cfg.FilterSubjects = []string{o.Filter}
	case o.LastPerSubject:
		cfg.FilterSubjects = []string{">"} // the server takes last-per-subject only with a filter
	}
	cons, err := js.CreateConsumer(ctx, stream, cfg)
	if err != nil {
		return fmt.Errorf("stream %s: consumer for a scan: %w", stream, err)
	}
	defer func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), deleteTimeout)
		defer cancel()
		// Best effort: InactiveThreshold removes it otherwise.
		_ = js.DeleteConsumer(dctx, stream, cons.CachedInfo().Name)
	}()
	remaining := cons.CachedInfo().NumPending
	for remaining > 0 {
		if err := ctx.Err(); err != nil {
			return err
		}
		batch, err := cons.Fetch(int(min(remaining, fetchBatch)), jetstream.FetchMaxWait(fetchWait))
		if err != nil {
			return fmt.Errorf("stream %s: fetch: %w", stream, err)
		}
		got := uint64(0)
		for m := range batch.Messages() {
			if err := ctx.Err(); err != nil {
				// Leave the rest of the batch: records may be large, and a
				// stopping service must not wait for them.
				return err
			}
			got++
			md, err := m.Metadata()
			if err != nil {
				continue // not a JetStream message: nothing to read
			}
			if err := fn(Record{Subject: m.Subject(), Data: m.Data(), Seq: md.Sequence.Stream, Time: md.Timestamp}); err != nil {
				return err
			}
			if md.NumPending == 0 {
				return nil
			}
		}
		if err := batch.Error(); err != nil && !errors.Is(err, jetstream.ErrNoMessages) && !errors.Is(err, context.DeadlineExceeded) {
			return fmt.Errorf("stream %s: fetch: %w", stream, err)
		}
		if got == 0 {
			// Nothing came within fetchWait: the records counted at the
			// start are gone (aged out, purged, closed by their TTL).
			return ctx.Err()
		}
		remaining -= min(got, remaining)
	}
	return nil
}
