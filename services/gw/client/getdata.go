package client

import (
	"context"
	"fmt"

	"github.com/sg-project/sg/messages"
	"github.com/sg-project/sg/subjects"
)

// GetDataQuery is one getData call: the API's arguments, the scope (which
// assembly; zero: sg chooses) and the request options (timeout, logCorr).
type GetDataQuery struct {
	Args  messages.GetDataArgs
	Scope messages.Scope
	Opts  messages.Opts
}

// GetDataResult is a successful getData answer.
type GetDataResult struct {
	RequestID string // the id sg knows the request by (logs, cancel)
	Table     messages.Table
}

// GetData calls getData and decodes the table. An error answer is an
// *AnswerError (errors.Is(err, ErrAnswer)); RATE_LIMITED is one only after
// the client has paused and tried again MaxAttempts times.
func (c *Client) GetData(ctx context.Context, q GetDataQuery) (GetDataResult, error) {
	resp, err := c.DoRequest(ctx, messages.RequestHeader{API: subjects.APIGetData, Scope: q.Scope, Opts: q.Opts}, q.Args)
	if err != nil {
		return GetDataResult{}, err
	}
	if err := StatusError(resp); err != nil {
		return GetDataResult{RequestID: resp.Header.RequestID}, err
	}
	r := GetDataResult{RequestID: resp.Header.RequestID}
	if err := messages.Decode(resp.Payload, &r.Table); err != nil {
		return r, fmt.Errorf("client: getData answer %s: %w", resp.Header.RequestID, err)
	}
	if err := r.Table.Validate(); err != nil {
		return r, fmt.Errorf("client: getData answer %s: %w", resp.Header.RequestID, err)
	}
	return r, nil
}
