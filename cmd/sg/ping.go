package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/sg-project/sg/messages"
	"github.com/sg-project/sg/subjects"
)

// errNoDAPReached: `sg ping` exits non-zero when no DAP answers, so a script
// (or a readiness probe) can tell a gateway with no fleet from a working one.
var errNoDAPReached = errors.New("ping: no DAP reached")

// pingResult is one DAP in the ping answer (rc.PingResult's wire form).
type pingResult struct {
	DAP     string `msgpack:"dap" json:"dap"`
	Reached bool   `msgpack:"reached" json:"reached"`
}

// callPing is call for the ping API, which also checks that some DAP answered.
func callPing(ctx context.Context, q queryFlags, jargs []byte, stdout, stderr io.Writer) error {
	var payload []byte
	var content messages.Content
	q.onAnswer = func(r messages.Response) { payload, content = r.Payload, r.Content }
	if err := call(ctx, q, subjects.APIPing, jargs, stdout, stderr); err != nil {
		return err
	}
	return checkPing(content, payload, stderr)
}

func checkPing(content messages.Content, payload []byte, stderr io.Writer) error {
	var rs []pingResult
	var err error
	if content == messages.ContentJSON {
		if err = messages.CheckJSON(payload, messages.PayloadLimits); err == nil {
			err = json.Unmarshal(payload, &rs)
		}
	} else if len(payload) > 0 {
		err = messages.DecodeLimited(payload, &rs, messages.PayloadLimits)
	}
	if err != nil {
		return fmt.Errorf("ping: undecodable answer: %w", err)
	}
	n := 0
	for _, r := range rs {
		if r.Reached {
			n++
		}
	}
	if n == 0 {
		fmt.Fprintf(stderr, "sg: no DAP reached (%d known)\n", len(rs))
		return errNoDAPReached
	}
	return nil
}
