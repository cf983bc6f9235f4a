package client

import (
	"errors"
	"fmt"
	"time"

	"github.com/sg-project/sg/messages"
)

// ErrAnswer is matched (errors.Is) by every *AnswerError.
var ErrAnswer = errors.New("error answer")

// AnswerError is an error answer from sg as a Go error: the typed calls
// (GetData) return it, StatusError makes one from a Response.
type AnswerError struct {
	API        string
	RequestID  string
	Status     messages.Status
	RetryAfter time.Duration // with RATE_LIMITED (or ACCEPTED): when to try again
}

func (e *AnswerError) Error() string { return fmt.Sprintf("%v: %s", ErrAnswer, e.Status) }

// Is makes errors.Is(err, ErrAnswer) true.
func (e *AnswerError) Is(target error) bool { return target == ErrAnswer }

// StatusError turns an error answer into an *AnswerError (nil for OK): for
// callers that want Go error handling.
func StatusError(r messages.Response) error {
	if r.Header.Status.IsOK() {
		return nil
	}
	return &AnswerError{API: r.Header.API, RequestID: r.Header.RequestID, Status: r.Header.Status,
		RetryAfter: time.Duration(r.Header.RetryAfterMS) * time.Millisecond}
}
