package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nuid"
	"github.com/rs/zerolog"
	"github.com/sg-project/sg/messages"
	"github.com/sg-project/sg/services/dap/ratelimit"
	"github.com/sg-project/sg/subjects"
)

// Defaults, in one place; a zero Options field takes these.
const (
	// DefaultWait is how long a call waits for its answer when ctx has no
	// deadline: the GW's default timeout and margin, plus a little.
	DefaultWait = 60*time.Second + 30*time.Second + 5*time.Second
	// DefaultMaxInFlight is how many requests one GW endpoint has in flight
	// from this client at once; more wait in its queue.
	DefaultMaxInFlight = 64
	// DefaultMaxAttempts is how many times a request answered RATE_LIMITED
	// is sent, counting the first; then the caller gets the RATE_LIMITED answer.
	DefaultMaxAttempts = 5
	// DefaultMinPause is the pause when RATE_LIMITED comes without Retry-After.
	DefaultMinPause = time.Second
	// DefaultMaxPause caps a Retry-After (it comes from the network).
	DefaultMaxPause = 15 * time.Minute
)

// ErrClosed: the client was closed.
var ErrClosed = errors.New("client closed")

// Options tune a client; the zero value is the defaults.
type Options struct {
	MaxInFlight    int           // per GW endpoint; DefaultMaxInFlight
	MaxAttempts    int           // per request answered RATE_LIMITED; DefaultMaxAttempts
	MinPause       time.Duration // DefaultMinPause
	MaxPause       time.Duration // DefaultMaxPause
	MaxAnswerBytes int64         // bounds a reassembled answer; messages.DefaultChunkLimit (256 MiB)
	// Metrics counts the pauses per GW endpoint (sg_ratelimit_*); nil: none.
	Metrics *ratelimit.Metrics
	Log     zerolog.Logger // zero value: no logs
}

// Client calls one sg deployment. It is safe for concurrent use. Close it
// when done: it stops its actors and its reply subscription.
type Client struct {
	nc   *nats.Conn
	s    subjects.Subjects
	opts Options
	// MaxAnswerBytes bounds a reassembled answer; set it before the first
	// call (Options.MaxAnswerBytes does the same).
	MaxAnswerBytes int64

	stop   context.CancelFunc
	closed atomic.Bool
	once   sync.Once
	err    error // of the first call's setup
	in     *inbox
	reg    *ratelimit.Registry

	mu        sync.Mutex
	endpoints map[string]*gwEndpoint // bounded as reg's actors are
}

// New returns a client of the deployment whose subjects s builds, with the
// default options.
func New(nc *nats.Conn, s subjects.Subjects) *Client { return NewWithOptions(nc, s, Options{}) }

// NewWithOptions returns a client with opts.
func NewWithOptions(nc *nats.Conn, s subjects.Subjects, opts Options) *Client {
	if opts.MaxInFlight <= 0 {
		opts.MaxInFlight = DefaultMaxInFlight
	}
	if opts.MaxAttempts <= 0 {
		opts.MaxAttempts = DefaultMaxAttempts
	}
	if opts.MinPause <= 0 {
		opts.MinPause = DefaultMinPause
	}
	if opts.MaxPause <= 0 {
		opts.MaxPause = DefaultMaxPause
	}
	if opts.MaxAnswerBytes <= 0 {
		opts.MaxAnswerBytes = messages.DefaultChunkLimit
	}
	return &Client{nc: nc, s: s, opts: opts, MaxAnswerBytes: opts.MaxAnswerBytes}
}

// setup starts the reply subscription and the actors on the first call.
func (c *Client) setup() error {
	if c.closed.Load() {
		return ErrClosed
	}
	c.once.Do(func() {
		limit := c.MaxAnswerBytes
		if limit <= 0 {
			limit = messages.DefaultChunkLimit
		}
		in, err := newInbox(c.nc, limit)
		if err != nil {
			c.err = err
			return
		}
		ctx, stop := context.WithCancel(context.Background())
		c.in, c.stop = in, stop
		c.reg = ratelimit.NewRegistry(ctx, ratelimit.Config{
			Slots:       c.opts.MaxInFlight,
			MaxAttempts: c.opts.MaxAttempts,
			MinPause:    c.opts.MinPause,
			MaxPause:    c.opts.MaxPause,
			Metrics:     c.opts.Metrics,
			Log:         c.opts.Log,
		}, 64) // actors are per API subject: a handful
	})
	return c.err
}

// Close stops the client's actors (calls still waiting fail) and its reply
// subscription. The NATS connection stays open: it is the caller's.
func (c *Client) Close() {
	c.closed.Store(true)
	c.once.Do(func() { c.err = ErrClosed })
	if c.stop != nil {
		c.stop()
		c.in.close()
	}
}

// Do calls api with args in msgpack and returns the decoded answer; an
// error answer (rc not OK) is a Response, not an error: err is about
// transport and decoding only. args may be a messages.GetDataArgs, a
// messages.PingArgs, a map, raw JSON ([]byte, json.RawMessage, string) or
// nil. A "scope" key in map or JSON args is the request's scope, as in the
// seed.
func (c *Client) Do(ctx context.Context, api string, args any, opts messages.Opts) (messages.Response, error) {
	return c.DoRequest(ctx, messages.RequestHeader{API: api, Opts: opts}, args)
}

// DoRequest is Do with a full request header (scope, opts).
func (c *Client) DoRequest(ctx context.Context, hdr messages.RequestHeader, args any) (messages.Response, error) {
	body, err := msgpackRequest(hdr, args)
	if err != nil {
		return messages.Response{}, err
	}
	h := nats.Header{}
	messages.SetString(h, messages.HdrContentType, string(messages.ContentMsgpack))
	messages.SetString(h, messages.HdrAcceptChunks, "1") // the inbox reassembles
	rh, data, err := c.RoundTrip(ctx, hdr.API, h, body)
	if err != nil {
		return messages.Response{}, err
	}
	// data is this call's own (a reassembled answer, or the one message's):
	// the payload shares it rather than copying a large answer again.
	resp, err := messages.DecodeResponseAliasing(rh, data)
	if err != nil {
		return messages.Response{}, fmt.Errorf("client: %s answer: %w", hdr.API, err)
	}
	return resp, nil
}

// DoJSON sends args (raw JSON, may be nil) in a JSON envelope and returns the
// JSON envelope of the answer, byte for byte what a plain NATS client gets.
func (c *Client) DoJSON(ctx context.Context, api string, args []byte, opts messages.Opts) ([]byte, error) {
	body, err := jsonRequest(api, args, opts)
	if err != nil {
		return nil, err
	}
	_, data, err := c.RoundTrip(ctx, api, nil, body)
	return data, err
}

// answer is one whole answer: headers and payload.
type answer struct {
	h    nats.Header
	data []byte
}

// RoundTrip sends body (with headers h) to the API's subject and returns
// the answer's headers and payload, reassembled if it came in chunks.
//
// The request goes through the actor of the API's GW endpoint: at most
// MaxInFlight requests in flight, and when the GW answers RATE_LIMITED every
// caller of that endpoint pauses for its Sg-Retry-After, then the request is
// sent again (up to MaxAttempts; then the RATE_LIMITED answer is returned).
// The request carries Sg-Request-Id: h's, or a new one per attempt. When ctx
// ends before the answer, the client tells the GW it gave up (GWCancel).
func (c *Client) RoundTrip(ctx context.Context, api string, h nats.Header, body []byte) (nats.Header, []byte, error) {
	k, err := c.admit(ctx, api)
	if err != nil {
		return nil, nil, err
	}
	defer k.end()
	a, err := attempts(c, k, func(ctx context.Context) (answer, nats.Header, []byte, error) {
		a, err := c.send(ctx, k.subject, h, body)
		return a, a.h, a.data, err
	})
	return a.h, a.data, err
}

// Await is RoundTrip for request id (its Sg-Request-Id) that deliver hands
// to the GW by other means than a publish on the API's subject: a GW's job
// runner hands the request it decoded once straight to its own core
// (services/gw/jobs.go). deliver gets the reply subject the answer must go
// to, under this client's inbox; the answer is reassembled, limited, paced
// and cancelled at ctx's end as RoundTrip's is.
func (c *Client) Await(ctx context.Context, api, id string, deliver func(reply string) error) (nats.Header, []byte, error) {
	k, err := c.admit(ctx, api)
	if err != nil {
		return nil, nil, err
	}
	defer k.end()
	a, err := attempts(c, k, func(ctx context.Context) (answer, nats.Header, []byte, error) {
		a, err := c.await(ctx, id, deliver)
		return a, a.h, a.data, err
	})
	return a.h, a.data, err
}

// call is one request admitted to its GW endpoint (admit): ctx bounds it,
// and it holds one of the endpoint's MaxInFlight slots until end.
type call struct {
	ctx     context.Context
	subject string
	ep      *gwEndpoint
	cancel  context.CancelFunc // of the DefaultWait bound; nil when ctx had a deadline
}

// admit sets the client up and admits a request to api's GW endpoint: ctx
// bounded by DefaultWait when it has no deadline, and one of the endpoint's
// MaxInFlight slots taken (fast path or not), waiting for one as long as ctx
// allows. Call end when the request is over.
func (c *Client) admit(ctx context.Context, api string) (call, error) {
	return c.admitTo(ctx, c.s.GWAPI(api))
}

// admitTo is admit to any GW subject (a job poll's).
func (c *Client) admitTo(ctx context.Context, subject string) (call, error) {
	if err := c.setup(); err != nil {
		return call{}, err
	}
	k := call{ctx: ctx, subject: subject}
	ep, err := c.endpoint(k.subject)
	if err != nil {
		return call{}, err
	}
	k.ep = ep
	if _, ok := ctx.Deadline(); !ok {
		k.ctx, k.cancel = context.WithTimeout(ctx, DefaultWait)
	}
	select {
	case ep.slots <- struct{}{}:
		return k, nil
	case <-k.ctx.Done():
		err := fmt.Errorf("client: %s: waiting for one of %d requests in flight to finish: %w", k.subject, cap(ep.slots), context.Cause(k.ctx))
		if k.cancel != nil {
			k.cancel()
		}
		return call{}, err
	}
}

// end frees the call's slot and its DefaultWait bound.
func (k call) end() {
	<-k.ep.slots
	if k.cancel != nil {
		k.cancel()
	}
}

// attempts sends k's request with attempt (one send and the wait for the
// answer's first message; it returns the answer and the headers and data a
// rate limit is read from) through the endpoint's rate-limit actor. When
// nobody is paused or waiting, the first attempt goes directly, without the
// actor's goroutine hops, and only a RATE_LIMITED answer goes through it
// (throughActor).
func attempts[T any](c *Client, k call, attempt func(context.Context) (T, nats.Header, []byte, error)) (T, error) {
	var none T
	if !k.ep.actor.Open() {
		return throughActor(c, k, attempt, none, false, nil)
	}
	v, h, data, err := attempt(k.ctx)
	if err != nil {
		return none, c.sendErr(k.subject, err)
	}
	d, limited := c.rateLimited(h, data)
	if !limited {
		return v, nil
	}
	return throughActor(c, k, attempt, v, true, &ratelimit.Error{Endpoint: k.subject, Delay: d})
}

// throughActor sends k's request with attempt through the endpoint's actor:
// a RATE_LIMITED answer pauses every caller of the endpoint, then the
// request is sent again, up to MaxAttempts; then the last RATE_LIMITED
// answer is returned, not an error. replay is the rate limit of a fast-path
// attempt, whose answer is last (got); the actor acts on it first. (Apart
// from attempts so that its state is on the heap only on this path.)
func throughActor[T any](c *Client, k call, attempt func(context.Context) (T, nats.Header, []byte, error), last T, got bool, replay error) (T, error) {
	err := k.ep.actor.Do(k.ctx, func(ctx context.Context, _ int) error {
		if replay != nil {
			err := replay
			replay = nil
			return err
		}
		v, h, data, err := attempt(ctx)
		if err != nil {
			return err
		}
		last, got = v, true
		if d, limited := c.rateLimited(h, data); limited {
			return &ratelimit.Error{Endpoint: k.subject, Delay: d}
		}
		return nil
	})
	// errors.Is first: after a ctx error the actor may still be running the
	// attempt, which writes last and got.
	if err == nil || (errors.Is(err, ratelimit.ErrRateLimited) && got) {
		return last, nil
	}
	var none T
	return none, c.sendErr(k.subject, err)
}

func (c *Client) sendErr(subject string, err error) error {
	if errors.Is(err, nats.ErrNoResponders) {
		return fmt.Errorf("client: %s: %w (is the gateway running?)", subject, err)
	}
	return fmt.Errorf("client: %s: %w", subject, err)
}

// gwEndpoint is one GW API subject as the client calls it: its rate-limit
// actor and its bound on requests in flight (MaxInFlight).
type gwEndpoint struct {
	actor *ratelimit.Actor
	slots chan struct{}
}

func (c *Client) endpoint(subject string) (*gwEndpoint, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if ep := c.endpoints[subject]; ep != nil {
		return ep, nil
	}
	actor, err := c.reg.Actor(subject)
	if err != nil {
		return nil, fmt.Errorf("client: %w", err)
	}
	if c.endpoints == nil {
		c.endpoints = map[string]*gwEndpoint{}
	}
	ep := &gwEndpoint{actor: actor, slots: make(chan struct{}, c.opts.MaxInFlight)}
	c.endpoints[subject] = ep
	return ep, nil
}

// send is one attempt: publish, wait for the whole answer or ctx.
func (c *Client) send(ctx context.Context, subject string, h nats.Header, body []byte) (answer, error) {
	hh := make(nats.Header, len(h)+1)
	for k, v := range h {
		hh[k] = v
	}
	id := hh.Get(messages.HdrRequestID)
	if id == "" {
		id = nuid.Next()
		hh.Set(messages.HdrRequestID, id)
	}
	return c.await(ctx, id, func(reply string) error {
		if err := c.nc.PublishMsg(&nats.Msg{Subject: subject, Reply: reply, Header: hh, Data: body}); err != nil {
			return fmt.Errorf("publish: %w", err)
		}
		return nil
	})
}

// await is one attempt of request id, which deliver sends with the reply
// subject it is given: it waits for the whole answer or ctx.
func (c *Client) await(ctx context.Context, id string, deliver func(reply string) error) (answer, error) {
	reply, token, w, err := c.in.reply()
	if err != nil {
		return answer{}, err
	}
	defer c.in.forget(token)
	if err := deliver(reply); err != nil {
		return answer{}, err
	}
	select {
	case <-w.done:
		if w.err != nil {
			return answer{}, fmt.Errorf("answer to request %s: %w", id, w.err)
		}
		return answer{h: w.h, data: w.data}, nil
	case <-ctx.Done():
		c.cancel(id)
		return answer{}, fmt.Errorf("waiting for the answer to request %s: %w", id, context.Cause(ctx))
	}
}

// cancel tells the GW that the caller gave up on request id: a request on
// GWCancel with Sg-Request-Id, whose reply subject is under the same inbox
// as the request's, so the GW knows the caller; its answer is dropped.
func (c *Client) cancel(id string) {
	h := nats.Header{}
	h.Set(messages.HdrRequestID, id)
	err := c.nc.PublishMsg(&nats.Msg{Subject: c.s.GWCancel(), Reply: c.in.subject(), Header: h})
	ev := c.opts.Log.Debug()
	if err != nil {
		ev = c.opts.Log.Warn().Err(err)
	}
	ev.Str("request_id", id).Msg("request cancelled: told the GW")
}

// rateLimited reads a RATE_LIMITED answer's pause: Sg-Retry-After in whole
// seconds, else the envelope's retryAfter (ms); 0 when neither says (the
// actor then pauses MinPause).
func (c *Client) rateLimited(h nats.Header, data []byte) (time.Duration, bool) {
	st, err := messages.ReadStatus(h)
	if err != nil || st.RC != messages.CodeRateLimited {
		return 0, false
	}
	maxSecs := uint64(c.opts.MaxPause / time.Second)
	if secs, ok, err := messages.LookupUint(h, messages.HdrRetryAfter); err == nil && ok {
		return time.Duration(min(secs, maxSecs+1)) * time.Second, true
	}
	if resp, err := messages.DecodeResponse(h, data); err == nil && resp.Header.RetryAfterMS > 0 {
		return time.Duration(min(resp.Header.RetryAfterMS, c.opts.MaxPause.Milliseconds()+1)) * time.Millisecond, true
	}
	return 0, true
}

// msgpackRequest encodes a request to hdr.API with args (as Do takes them)
// in msgpack; a scope among args is the request's unless hdr names one.
func msgpackRequest(hdr messages.RequestHeader, args any) ([]byte, error) {
	payload, scope, err := encodeArgs(hdr.API, args)
	if err != nil {
		return nil, err
	}
	if hdr.Scope == (messages.Scope{}) {
		hdr.Scope = scope
	}
	body, err := messages.Request{Header: hdr, Payload: payload, Content: messages.ContentMsgpack}.Encode()
	if err != nil {
		return nil, fmt.Errorf("client: encode %s request: %w", hdr.API, err)
	}
	return body, nil
}

// jsonRequest encodes a request to api with args (raw JSON, may be nil) in
// a JSON envelope.
func jsonRequest(api string, args []byte, opts messages.Opts) ([]byte, error) {
	args = bytes.TrimSpace(args)
	if len(args) > 0 && !json.Valid(args) {
		return nil, fmt.Errorf("client: %s arguments are not valid JSON", api)
	}
	body, err := messages.Request{Header: messages.RequestHeader{API: api, Opts: opts}, Payload: args, Content: messages.ContentJSON}.Encode()
	if err != nil {
		return nil, fmt.Errorf("client: encode %s request: %w", api, err)
	}
	return body, nil
}

// encodeArgs turns args into the msgpack payload of api and finds a scope
// given among them.
func encodeArgs(api string, args any) ([]byte, messages.Scope, error) {
	var raw []byte
	switch a := args.(type) {
	case nil:
		return nil, messages.Scope{}, nil
	case messages.GetDataArgs:
		b, err := messages.Encode(a)
		return b, messages.Scope{}, err
	case *messages.GetDataArgs:
		b, err := messages.Encode(a)
		return b, messages.Scope{}, err
	case messages.PingArgs:
		b, err := messages.Encode(a)
		return b, messages.Scope{}, err
	case []byte:
		raw = a
	case json.RawMessage:
		raw = a
	case string:
		raw = []byte(a)
	default:
		b, err := json.Marshal(a)
		if err != nil {
			return nil, messages.Scope{}, fmt.Errorf("client: encode %s arguments: %w", api, err)
		}
		raw = b
	}
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return nil, messages.Scope{}, nil
	}
	var w struct {
		Scope messages.Scope `json:"scope"`
	}
	_ = json.Unmarshal(raw, &w) // a scope is optional; the API decoder reports bad JSON
	var (
		v   any
		err error
	)
	switch api {
	case subjects.APIGetData:
		v, err = messages.DecodeGetDataArgsJSON(raw)
	case subjects.APIPing:
		v, err = messages.DecodePingArgsJSON(raw)
	default:
		err = json.Unmarshal(raw, &v)
		if m, ok := v.(map[string]any); ok && err == nil {
			delete(m, "scope")
			if len(m) == 0 {
				return nil, w.Scope, nil
			}
		}
	}
	if err != nil {
		return nil, w.Scope, fmt.Errorf("client: %s arguments: %w", api, err)
	}
	b, err := messages.Encode(v)
	if err != nil {
		return nil, w.Scope, fmt.Errorf("client: encode %s arguments: %w", api, err)
	}
	return b, w.Scope, nil
}
