// Package client calls the sg gateway over NATS: it builds the request
// envelope, sends it to the API's subject, reassembles a chunked answer and
// decodes it.
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/sg-project/sg/messages"
	"github.com/sg-project/sg/subjects"
)

// DefaultWait is how long a call waits for its answer when ctx has no
// deadline: the GW's default timeout and margin, plus a little.
const DefaultWait = 60*time.Second + 30*time.Second + 5*time.Second

// Client calls one sg deployment. It is safe for concurrent use.
type Client struct {
	nc *nats.Conn
	s  subjects.Subjects
	// MaxAnswerBytes bounds a reassembled answer (default 256 MiB).
	MaxAnswerBytes int64
}

// New returns a client of the deployment whose subjects s builds.
func New(nc *nats.Conn, s subjects.Subjects) *Client {
	return &Client{nc: nc, s: s, MaxAnswerBytes: messages.DefaultChunkLimit}
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
	payload, scope, err := encodeArgs(hdr.API, args)
	if err != nil {
		return messages.Response{}, err
	}
	if hdr.Scope == (messages.Scope{}) {
		hdr.Scope = scope
	}
	body, err := messages.Request{Header: hdr, Payload: payload, Content: messages.ContentMsgpack}.Encode()
	if err != nil {
		return messages.Response{}, err
	}
	h := nats.Header{}
	messages.SetString(h, messages.HdrContentType, string(messages.ContentMsgpack))
	rh, data, err := c.RoundTrip(ctx, hdr.API, h, body)
	if err != nil {
		return messages.Response{}, err
	}
	return messages.DecodeResponse(rh, data)
}

// DoJSON sends args (raw JSON, may be nil) in a JSON envelope and returns the
// JSON envelope of the answer, byte for byte what a plain NATS client gets.
func (c *Client) DoJSON(ctx context.Context, api string, args []byte, opts messages.Opts) ([]byte, error) {
	args = bytes.TrimSpace(args)
	if len(args) > 0 && !json.Valid(args) {
		return nil, fmt.Errorf("client: arguments are not valid JSON")
	}
	body, err := messages.Request{Header: messages.RequestHeader{API: api, Opts: opts}, Payload: args, Content: messages.ContentJSON}.Encode()
	if err != nil {
		return nil, err
	}
	_, data, err := c.RoundTrip(ctx, api, nil, body)
	return data, err
}

// RoundTrip sends body (with headers h) to the API's subject and returns
// the answer's headers and payload, reassembled if it came in chunks.
func (c *Client) RoundTrip(ctx context.Context, api string, h nats.Header, body []byte) (nats.Header, []byte, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, DefaultWait)
		defer cancel()
	}
	inbox := c.nc.NewInbox()
	sub, err := c.nc.SubscribeSync(inbox)
	if err != nil {
		return nil, nil, fmt.Errorf("client: subscribe %s: %w", inbox, err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	limit := c.MaxAnswerBytes
	if limit <= 0 {
		limit = messages.DefaultChunkLimit
	}
	// A whole chunked answer must fit in the pending buffer, or chunks are lost.
	if err := sub.SetPendingLimits(-1, int(min(2*limit, 1<<31-1))); err != nil {
		return nil, nil, err
	}
	if err := c.nc.PublishMsg(&nats.Msg{Subject: c.s.GWAPI(api), Reply: inbox, Header: h, Data: body}); err != nil {
		return nil, nil, fmt.Errorf("client: publish %s: %w", c.s.GWAPI(api), err)
	}
	ra := messages.NewReassembler(limit)
	for {
		m, err := sub.NextMsgWithContext(ctx)
		if err != nil {
			return nil, nil, fmt.Errorf("client: waiting for the answer to %s: %w", api, err)
		}
		if len(m.Data) == 0 && m.Header.Get("Status") == "503" {
			return nil, nil, fmt.Errorf("client: %s: %w (is the gateway running?)", c.s.GWAPI(api), nats.ErrNoResponders)
		}
		done, err := ra.Add(m.Header, m.Data)
		if err != nil {
			return nil, nil, fmt.Errorf("client: answer to %s: %w", api, err)
		}
		if done {
			p, err := ra.Payload()
			return ra.Header(), p, err
		}
	}
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
	switch api {
	case subjects.APIGetData:
		a, err := messages.DecodeGetDataArgsJSON(raw)
		if err != nil {
			return nil, w.Scope, err
		}
		b, err := messages.Encode(a)
		return b, w.Scope, err
	case subjects.APIPing:
		a, err := messages.DecodePingArgsJSON(raw)
		if err != nil {
			return nil, w.Scope, err
		}
		b, err := messages.Encode(a)
		return b, w.Scope, err
	}
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		return nil, w.Scope, fmt.Errorf("client: %s arguments: %w", api, err)
	}
	if m, ok := v.(map[string]any); ok {
		delete(m, "scope")
		if len(m) == 0 {
			return nil, w.Scope, nil
		}
	}
	b, err := messages.Encode(v)
	return b, w.Scope, err
}

// ErrAnswer is wrapped by StatusError.
var ErrAnswer = errors.New("error answer")

// StatusError turns an error answer into an error (nil for OK): for callers
// that want Go error handling.
func StatusError(r messages.Response) error {
	if r.Header.Status.IsOK() {
		return nil
	}
	return fmt.Errorf("%w: %s", ErrAnswer, r.Header.Status)
}
