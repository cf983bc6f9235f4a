package client

import (
	"context"
	"fmt"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nuid"

	"github.com/sg-project/sg/messages"
	"github.com/sg-project/sg/subjects"
)

// DefaultStreamPendingBytes bounds the frames of one streamed answer waiting
// for the caller's func: a caller slower than the stream past it loses frames,
// and the read fails (never returns a cut answer as whole).
const DefaultStreamPendingBytes = 32 << 20

// GetDataStream calls getData asking for the answer as a stream of frames
// (Sg-Accept-Stream: 1, messages/stream.go) and calls each with every window
// of rows, in order, as it arrives: the answer is never held whole, here or
// in sg. It returns the answer's header (ids and status) once the last frame
// came; an error answer is an *AnswerError, as GetData's, and a stream that
// breaks after some windows were handed out returns an error (each has seen
// a prefix of the answer: the caller must not take it for the whole). An
// error from each stops the read. Like every call, a stream goes through the
// endpoint's rate-limit actor and counts against its requests in flight.
func (c *Client) GetDataStream(ctx context.Context, q GetDataQuery, each func(messages.Table) error) (messages.ResponseHeader, error) {
	return c.StreamTables(ctx, messages.RequestHeader{API: subjects.APIGetData, Scope: q.Scope, Opts: q.Opts}, q.Args, each)
}

// StreamTables is GetDataStream for any API whose answer is a table (getData,
// sql), with args as Do takes them.
func (c *Client) StreamTables(ctx context.Context, hdr messages.RequestHeader, args any, each func(messages.Table) error) (messages.ResponseHeader, error) {
	body, err := msgpackRequest(hdr, args)
	if err != nil {
		return messages.ResponseHeader{}, err
	}
	var rh messages.ResponseHeader
	err = c.stream(ctx, hdr.API, messages.ContentMsgpack, body, func(ctx context.Context, first *nats.Msg, sub *nats.Subscription) (err error) {
		rh, err = readStream(ctx, first, sub, each)
		return err
	})
	return rh, err
}

// stream sends body to api's GW subject asking for an answer stream and
// reads the answer from its own inbox with read, which gets the answer's
// first message. A stream counts against the endpoint's requests in flight
// (MaxInFlight) while it runs, and goes through the endpoint's rate-limit
// actor as RoundTrip does: a RATE_LIMITED answer pauses every caller of the
// endpoint, then the request is sent again (up to MaxAttempts; then the
// RATE_LIMITED answer is read). When ctx ends first, the client tells the GW
// it gave up.
func (c *Client) stream(ctx context.Context, api string, content messages.Content, body []byte,
	read func(ctx context.Context, first *nats.Msg, sub *nats.Subscription) error) error {
	k, err := c.admit(ctx, api)
	if err != nil {
		return err
	}
	defer k.end()
	ctx = k.ctx
	inbox := c.nc.NewInbox()
	sub, err := c.nc.SubscribeSync(inbox)
	if err != nil {
		return fmt.Errorf("client: subscribe %s: %w", inbox, err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := sub.SetPendingLimits(-1, DefaultStreamPendingBytes); err != nil {
		return fmt.Errorf("client: pending limits: %w", err)
	}
	var id string
	// One attempt sends the request (a new id each time) and waits for the
	// first message of its answer.
	first, err := attempts(c, k, func(ctx context.Context) (*nats.Msg, nats.Header, []byte, error) {
		id = nuid.Next()
		h := nats.Header{}
		messages.SetString(h, messages.HdrContentType, string(content))
		messages.SetString(h, messages.HdrAcceptStream, "1")
		messages.SetString(h, messages.HdrRequestID, id)
		if err := c.nc.PublishMsg(&nats.Msg{Subject: k.subject, Reply: inbox, Header: h, Data: body}); err != nil {
			return nil, nil, nil, fmt.Errorf("publish: %w", err)
		}
		m, err := sub.NextMsgWithContext(ctx)
		if err != nil {
			if ctx.Err() != nil {
				c.cancel(id)
			}
			return nil, nil, nil, fmt.Errorf("waiting for the answer to request %s: %w", id, err)
		}
		return m, m.Header, m.Data, nil
	})
	if err != nil {
		return err
	}
	if err := read(ctx, first, sub); err != nil {
		if ctx.Err() != nil {
			c.cancel(id)
		}
		return fmt.Errorf("client: %s stream %s: %w", api, id, err)
	}
	return nil
}

// readStream reads one answer from sub: a whole answer (an error, or a
// caller's answer that was not streamed) or the frames of a stream, in order.
func readStream(ctx context.Context, first *nats.Msg, sub *nats.Subscription, each func(messages.Table) error) (messages.ResponseHeader, error) {
	var rh messages.ResponseHeader
	fr := frames{first: first, sub: sub}
	for {
		m, f, whole, err := fr.next(ctx)
		if err != nil {
			return rh, err
		}
		if whole {
			return rh, oneTable(m, each)
		}
		var t messages.Table
		if f.Seq == 0 {
			resp, err := messages.DecodeResponse(m.Header, m.Data)
			if err != nil {
				return rh, err
			}
			rh = resp.Header
			if err := StatusError(resp); err != nil {
				return rh, err
			}
			if err := decodeTable(resp.Payload, &t); err != nil {
				return rh, fmt.Errorf("frame 0: %w", err)
			}
		} else {
			if st, err := messages.ReadStatus(m.Header); err == nil && !st.IsOK() {
				return rh, &AnswerError{Status: st}
			}
			if err := decodeTable(m.Data, &t); err != nil {
				return rh, fmt.Errorf("frame %d: %w", f.Seq, err)
			}
		}
		if err := each(t); err != nil {
			return rh, err
		}
		if f.End {
			return rh, nil
		}
	}
}

// frames reads one answer from sub, first its first message: a whole
// answer, or the frames of one stream in order.
type frames struct {
	first *nats.Msg // returned by the first next
	sub   *nats.Subscription
	n     int    // frames read
	id    string // the stream's
}

// next returns the answer's next message: whole, a message that is not a
// stream frame (only as the first), or frame f of the stream. A lost frame,
// a frame of another stream, a whole answer after frames and NATS's "no
// responders" are errors.
func (r *frames) next(ctx context.Context) (m *nats.Msg, f messages.StreamFrame, whole bool, err error) {
	if m, r.first = r.first, nil; m == nil {
		if m, err = r.sub.NextMsgWithContext(ctx); err != nil {
			if r.n > 0 {
				return nil, f, false, fmt.Errorf("after %d frames: %w", r.n, err)
			}
			return nil, f, false, err
		}
	}
	if len(m.Data) == 0 && m.Header.Get("Status") == "503" {
		return nil, f, false, nats.ErrNoResponders
	}
	if !messages.IsStreamFrame(m.Header) {
		if r.n > 0 {
			return nil, f, false, fmt.Errorf("a whole answer in the middle of a stream, after %d frames", r.n)
		}
		return m, f, true, nil
	}
	if f, err = messages.ReadStreamFrame(m.Header); err != nil {
		return nil, f, false, err
	}
	switch {
	case r.n == 0 && f.Seq != 0:
		return nil, f, false, fmt.Errorf("stream began with frame %d: frames were lost", f.Seq)
	case r.n > 0 && (f.ID != r.id || f.Seq != r.n):
		return nil, f, false, fmt.Errorf("frame %d of stream %q came after frame %d of %q: frames were lost", f.Seq, f.ID, r.n-1, r.id)
	}
	r.id = f.ID
	r.n++
	return m, f, false, nil
}

// oneTable hands a whole answer to each.
func oneTable(m *nats.Msg, each func(messages.Table) error) error {
	resp, err := messages.DecodeResponse(m.Header, m.Data)
	if err != nil {
		return err
	}
	if err := StatusError(resp); err != nil {
		return err
	}
	var t messages.Table
	if err := decodeTable(resp.Payload, &t); err != nil {
		return err
	}
	return each(t)
}

func decodeTable(b []byte, t *messages.Table) error {
	if err := messages.Decode(b, t); err != nil {
		return err
	}
	return t.Validate()
}
