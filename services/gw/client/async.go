package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sg-project/sg/messages"
)

// Job is an async job as the GW last reported it.
type Job struct {
	ID         string
	Status     messages.JobStatus
	RetryAfter time.Duration // when to poll again (the GW's Retry-After)
}

// Submit sends a request with opts.async: the GW answers at once with the
// job (ACCEPTED). hdr.Opts.IdempotencyKey makes a resubmission return the
// same job. An answer other than ACCEPTED (a bad request, RATE_LIMITED
// after MaxAttempts pauses) is an *AnswerError.
func (c *Client) Submit(ctx context.Context, hdr messages.RequestHeader, args any) (Job, error) {
	hdr.Opts.Async = true
	body, err := msgpackRequest(hdr, args)
	if err != nil {
		return Job{}, err
	}
	h := nats.Header{}
	messages.SetString(h, messages.HdrContentType, string(messages.ContentMsgpack))
	rh, data, err := c.RoundTrip(ctx, hdr.API, h, body)
	if err != nil {
		return Job{}, err
	}
	resp, err := messages.DecodeResponse(rh, data)
	if err != nil {
		return Job{}, fmt.Errorf("client: submit %s: answer: %w", hdr.API, err)
	}
	job, err := jobOf(resp)
	var ae *AnswerError
	if errors.As(err, &ae) && ae.RetryAfter == 0 {
		// Refusals carry when to come back in Sg-Retry-After.
		if secs, ok, herr := messages.LookupUint(rh, messages.HdrRetryAfter); herr == nil && ok {
			ae.RetryAfter = time.Duration(min(secs, uint64(c.opts.MaxPause/time.Second))) * time.Second
		}
	}
	return job, err
}

// Poll asks where job id stands. While it runs: done is false and the Job
// says when to come back. Once it finished: done is true and resp is the
// request's own answer (OK or an error answer), as the sync path would
// have given it. An unknown or expired job is an *AnswerError
// (UNKNOWN_JOB, EXPIRED). A poll holds one of the job endpoint's
// MaxInFlight slots, as any request does.
func (c *Client) Poll(ctx context.Context, id string) (job Job, resp messages.Response, done bool, err error) {
	k, err := c.admitTo(ctx, c.s.GWJob())
	if err != nil {
		return Job{}, messages.Response{}, false, fmt.Errorf("client: poll job %s: %w", id, err)
	}
	defer k.end()
	h := nats.Header{}
	h.Set(messages.HdrJobID, id)
	messages.SetString(h, messages.HdrContentType, string(messages.ContentMsgpack))
	a, err := c.send(k.ctx, k.subject, h, nil)
	if err != nil {
		return Job{}, messages.Response{}, false, fmt.Errorf("client: poll job %s: %w", id, err)
	}
	resp, err = messages.DecodeResponse(a.h, a.data)
	if err != nil {
		return Job{}, messages.Response{}, false, fmt.Errorf("client: poll job %s: %w", id, err)
	}
	switch resp.Header.Status.RC {
	case messages.CodeAccepted:
		job, err = jobOf(resp)
		return job, resp, false, err
	case messages.CodeUnknownJob, messages.CodeExpired:
		return Job{ID: id}, resp, false, StatusError(resp)
	}
	return Job{ID: id}, resp, true, nil
}

// Wait polls job id after each Retry-After until it finished and returns
// its answer; progress (may be nil) sees every status on the way.
func (c *Client) Wait(ctx context.Context, id string, progress func(Job)) (messages.Response, error) {
	for {
		job, resp, done, err := c.Poll(ctx, id)
		if err != nil || done {
			return resp, err
		}
		if progress != nil {
			progress(job)
		}
		pause := min(max(job.RetryAfter, c.opts.MinPause), c.opts.MaxPause)
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return messages.Response{}, context.Cause(ctx)
		case <-t.C:
		}
	}
}

// jobOf reads the JobStatus of an ACCEPTED answer.
func jobOf(resp messages.Response) (Job, error) {
	if resp.Header.Status.RC != messages.CodeAccepted {
		if err := StatusError(resp); err != nil {
			return Job{}, err
		}
		return Job{}, errors.New("client: the gateway answered OK to an async request: it ran it at once")
	}
	var js messages.JobStatus
	var err error
	if resp.Content == messages.ContentJSON {
		err = json.Unmarshal(resp.Payload, &js)
	} else {
		err = messages.Decode(resp.Payload, &js)
	}
	if err != nil {
		return Job{}, fmt.Errorf("client: ACCEPTED answer whose job status does not decode: %w", err)
	}
	if js.JobID == "" {
		return Job{}, errors.New("client: ACCEPTED answer without a job id")
	}
	return Job{ID: js.JobID, Status: js, RetryAfter: time.Duration(js.RetryAfter) * time.Second}, nil
}
