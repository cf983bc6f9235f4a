package client

import (
	"context"
	"fmt"
	"io"

	"github.com/nats-io/nats.go"

	"github.com/sg-project/sg/messages"
)

// StreamJSON calls api (getData or sql) with args (raw JSON, may be nil) in a
// JSON envelope, asks for the answer as a stream and writes it to w as the one
// JSON envelope a whole answer is (messages.JSONStreamWriter), window by
// window: neither sg nor the client holds it whole. An answer that comes
// whole (an error, an API that does not stream) is written as it came. It
// returns the answer's status; a stream that breaks after some of it was
// written returns an error, and what w got has no closing bracket.
func (c *Client) StreamJSON(ctx context.Context, api string, args []byte, opts messages.Opts, w io.Writer) (messages.Status, error) {
	body, err := jsonRequest(api, args, opts)
	if err != nil {
		return messages.Status{}, err
	}
	var st messages.Status
	err = c.stream(ctx, api, messages.ContentJSON, body, func(ctx context.Context, first *nats.Msg, sub *nats.Subscription) (err error) {
		st, err = readJSONStream(ctx, first, sub, w)
		return err
	})
	return st, err
}

// readJSONStream reads one answer from sub, a whole one or the frames of a
// stream, and writes it to w as one JSON envelope.
func readJSONStream(ctx context.Context, first *nats.Msg, sub *nats.Subscription, w io.Writer) (messages.Status, error) {
	out := messages.NewJSONStreamWriter(w)
	var st messages.Status
	fr := frames{first: first, sub: sub}
	for {
		m, f, whole, err := fr.next(ctx)
		if err != nil {
			return st, err
		}
		if whole {
			resp, err := messages.DecodeResponse(m.Header, m.Data)
			if err != nil {
				return st, err
			}
			if _, err := w.Write(m.Data); err != nil {
				return st, fmt.Errorf("write answer: %w", err)
			}
			return resp.Header.Status, nil
		}
		if s, err := messages.ReadStatus(m.Header); err == nil && !s.IsOK() {
			return s, &AnswerError{Status: s}
		}
		// The writer checks every frame before it writes it, frame 0 as
		// DecodeResponse would: its header is the answer's.
		if err := out.Frame(f.Seq, m.Data); err != nil {
			return st, err
		}
		if f.Seq == 0 {
			st = out.Header().Status
		}
		if f.End {
			return st, out.End()
		}
	}
}
