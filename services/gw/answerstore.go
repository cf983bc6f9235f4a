package gw

import (
	"bytes"
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sg-project/sg/messages"
	"github.com/sg-project/sg/services/defaults"
	"github.com/sg-project/sg/services/streams"
)

// AnswerStore configures the object store where the GW writes an answer above
// the max payload for a caller that has not said it reassembles chunks
// (issue 10: "fetch the answer from a JetStream object store bucket that sg
// writes it to ... which every NATS client can read"). The caller then gets
// one TOO_LARGE message naming the bucket, the key and how long the answer
// stays there, instead of the answer.
type AnswerStore struct {
	Bucket   string        // SG_ANSWER_STORE_BUCKET; "" is subjects.AnswerStore (<PREFIX>_ANSWERS)
	TTL      time.Duration // SG_ANSWER_STORE_TTL: how long an answer can be fetched (default 10 min)
	MaxBytes int64         // SG_ANSWER_STORE_MAX_BYTES: the bucket's size cap (default 1 GiB)
	Replicas int           // of the bucket (default 1)
	Memory   bool          // keep answers in memory
}

// Defaults of AnswerStore.
const (
	DefaultAnswerStoreTTL      = defaults.AnswerStoreTTL
	DefaultAnswerStoreMaxBytes = defaults.AnswerStoreMaxBytes
)

// maxAnswerPuts bounds the answers written to the store at once; past it an
// answer is not stored and its caller's error names the other two ways.
const maxAnswerPuts = 4

// answerPutTimeout bounds one write to the store.
const answerPutTimeout = 30 * time.Second

// answerStore is the open bucket and the writes under way. The writes run
// beside the loop (a large write must not hold up every other request); the
// GW's Run owns them: it cancels them after the loop and waits.
type answerStore struct {
	cfg   AnswerStore
	obj   jetstream.ObjectStore
	ctx   context.Context
	stop  context.CancelFunc
	wg    sync.WaitGroup
	slots chan struct{}
}

func (a AnswerStore) withDefaults(bucket string) AnswerStore {
	if a.Bucket == "" {
		a.Bucket = bucket
	}
	if a.TTL <= 0 {
		a.TTL = DefaultAnswerStoreTTL
	}
	if a.MaxBytes <= 0 {
		a.MaxBytes = DefaultAnswerStoreMaxBytes
	}
	if a.Replicas <= 0 {
		a.Replicas = defaults.JSReplicas
	}
	return a
}

// openAnswerStore creates or binds the bucket.
func (g *GW) openAnswerStore(ctx context.Context) (*answerStore, error) {
	cfg := g.cfg.AnswerStore.withDefaults(g.s.AnswerStore())
	js, err := jetstream.New(g.nc)
	if err != nil {
		return nil, fmt.Errorf("gw: answer store: %w", err)
	}
	storage := jetstream.FileStorage
	if cfg.Memory {
		storage = jetstream.MemoryStorage
	}
	octx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	obj, err := streams.EnsureObjectStore(octx, js, jetstream.ObjectStoreConfig{Bucket: cfg.Bucket,
		Description: "sg answers above the max payload, for callers that do not reassemble chunks",
		TTL:         cfg.TTL, MaxBytes: cfg.MaxBytes, Storage: storage, Replicas: cfg.Replicas})
	if err != nil {
		return nil, fmt.Errorf("gw: answer store %s: %w", cfg.Bucket, err)
	}
	sctx, stop := context.WithCancel(context.Background())
	return &answerStore{cfg: cfg, obj: obj, ctx: sctx, stop: stop, slots: make(chan struct{}, maxAnswerPuts)}, nil
}

// close cancels the writes under way and waits for them.
func (s *answerStore) close() {
	s.stop()
	s.wg.Wait()
}

// storeForCaller writes body (the whole answer, headers h) to the answer
// store, then answers the caller TOO_LARGE naming where it is. Without a
// store, with every write slot taken or when the write fails, the caller gets
// the same error naming the other two ways. It returns at once: the write
// runs beside the loop. The request was already closed in the log (the core
// emits an answer only after `answered`), so nothing else answers it.
func (g *GW) storeForCaller(ri *reqInfo, h nats.Header, body []byte) {
	size, maxPayload := len(body), g.nc.MaxPayload()
	s := g.answers
	if s == nil {
		g.respondStatus(ri, tooLargeForCaller(size, maxPayload, nil))
		return
	}
	select {
	case s.slots <- struct{}{}:
	default:
		ri.log.Warn().Int("bytes", size).Msg("answer store busy: the caller is told the other ways")
		g.met.answerStore.WithLabelValues("busy").Inc()
		g.respondStatus(ri, tooLargeForCaller(size, maxPayload, nil))
		return
	}
	s.wg.Go(func() {
		defer func() { <-s.slots }()
		ref := &storedAnswer{Bucket: s.cfg.Bucket, Key: ri.id, TTL: s.cfg.TTL}
		ctx, cancel := context.WithTimeout(s.ctx, answerPutTimeout)
		defer cancel()
		// The object's headers are the answer's: status and ids, as a
		// caller reassembling chunks sees them.
		oh := make(nats.Header, len(h))
		for k, vs := range h {
			oh[k] = vs
		}
		info, err := s.obj.Put(ctx, jetstream.ObjectMeta{Name: ref.Key, Headers: oh,
			Description: "answer to request " + ri.clientID}, bytes.NewReader(body))
		if err != nil {
			ri.log.Warn().Err(err).Int("bytes", size).Str("bucket", ref.Bucket).Msg("answer could not be stored: the caller is told the other ways")
			g.met.answerStore.WithLabelValues("failed").Inc()
			ref = nil
		} else {
			ref.Expires = info.ModTime.Add(ref.TTL)
			g.met.answerStore.WithLabelValues("stored").Inc()
			ri.log.Info().Int("bytes", size).Str("bucket", ref.Bucket).Str("key", ref.Key).Msg("answer stored for a caller that does not reassemble chunks")
		}
		extra := nats.Header{}
		if ref != nil {
			extra.Set(messages.HdrAnswerBucket, ref.Bucket)
			extra.Set(messages.HdrAnswerKey, ref.Key)
			extra.Set(messages.HdrAnswerExpires, strconv.FormatInt(ref.Expires.UnixNano(), 10))
		}
		g.respondStatusWith(ri, tooLargeForCaller(size, maxPayload, ref), extra)
	})
}

// storedAnswer is where an answer was written.
type storedAnswer struct {
	Bucket, Key string
	TTL         time.Duration
	Expires     time.Time
}

// tooLargeForCaller is the answer to a caller that has not said it reassembles
// chunks (Sg-Accept-Chunks: 1) when the whole answer is above the max payload:
// the size and the ways to get it, the object store's among them when the
// answer was written there (ref).
func tooLargeForCaller(size int, maxPayload int64, ref *storedAnswer) messages.Status {
	fetch := "or fetch it from the answer store (not available for this answer)"
	if ref != nil {
		fetch = fmt.Sprintf("or (3) fetch it from the JetStream object store bucket %q, key %q (headers %s, %s), until %s (TTL %s): "+
			"the object is the whole answer, its headers the answer's",
			ref.Bucket, ref.Key, messages.HdrAnswerBucket, messages.HdrAnswerKey, ref.Expires.UTC().Format(time.RFC3339), ref.TTL)
	}
	return messages.Errorf(messages.CodeTooLarge, messages.CodeErr,
		"Answer is %d bytes, above the NATS max payload of %d bytes, and the request did not say it reassembles chunks. Get it: "+
			"(1) send the header %s: 1 and reassemble the %s* messages (README, Large answers), "+
			"(2) page: ask for less with a limit and a narrower time range (or fewer columns), %s; "+
			"or, for getData and sql, send the header %s: 1 and read the answer as a stream of frames (README, Large answers)",
		size, maxPayload, messages.HdrAcceptChunks, "Sg-Chunk-", fetch, messages.HdrAcceptStream)
}
