package dap

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/sg-project/sg/messages"
	"github.com/sg-project/sg/services/agg/merge"
	"github.com/sg-project/sg/services/dap/engine"
)

// ErrUnknownAPI: the Source does not implement the API (answered NOT_SUPPORTED).
var ErrUnknownAPI = errors.New("API not supported by this DAP")

// CodeError lets a Source choose the return code of its failure.
type CodeError struct {
	Code messages.Code
	Err  error
}

func (e *CodeError) Error() string { return e.Err.Error() }
func (e *CodeError) Unwrap() error { return e.Err }

// badRequest lists the sentinels that mean "the caller asked for something wrong",
// not "the DAP failed": the caller must fix the request, a retry would not help.
var badRequest = []error{
	engine.ErrUnknownTable, engine.ErrUnknownColumn, engine.ErrFilterType,
	merge.ErrAggType, merge.ErrSortColumn,
	messages.ErrInvalid, messages.ErrMalformed, // wrapped by the GetDataArgs sentinels
}

// codeOf maps an execution error to a return code (see the package doc).
func codeOf(err error) messages.Code {
	var ce *CodeError
	switch {
	case errors.As(err, &ce):
		return ce.Code
	case errors.Is(err, context.DeadlineExceeded):
		return messages.CodeTimeout
	case errors.Is(err, ErrUnknownAPI):
		return messages.CodeNotSupported
	}
	for _, s := range badRequest {
		if errors.Is(err, s) {
			return messages.CodeBadRequest
		}
	}
	return messages.CodeErr
}

// statusOf is the status a failed portion reports to the Agg (and through it the caller).
func statusOf(err error) messages.Status {
	return messages.Status{RC: codeOf(err), AC: messages.CodeErr, AI: errText(err)}
}

// errText bounds an error text so that it fits the ai field and a header.
func errText(err error) string {
	s := err.Error()
	const max = 4 << 10
	if len(s) > max {
		// Cut on a rune boundary: ai must stay valid UTF-8.
		s = fmt.Sprintf("%s... (%d bytes)", strings.ToValidUTF8(s[:max], ""), len(s))
	}
	return s
}
