package httpapi

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/sg-project/sg/messages"
)

// httpStatus maps every return code onto an HTTP status: one table drives
// Status and the README's HTTP table (StatusMarkdown, kept equal by a test).
var httpStatus = []struct {
	code   messages.Code
	status int
}{
	{messages.CodeOK, http.StatusOK},
	{messages.CodeAccepted, http.StatusAccepted},
	{messages.CodeApp, http.StatusUnprocessableEntity},
	{messages.CodeErr, http.StatusInternalServerError},
	{messages.CodeNotSupported, http.StatusNotImplemented},
	{messages.CodeBadRequest, http.StatusBadRequest},
	{messages.CodeUnknownAPI, http.StatusNotFound},
	{messages.CodeTooLarge, http.StatusRequestEntityTooLarge},
	{messages.CodeUnknownJob, http.StatusNotFound},
	{messages.CodeNoResources, http.StatusServiceUnavailable},
	{messages.CodeUnavailable, http.StatusServiceUnavailable},
	{messages.CodeRetry, http.StatusServiceUnavailable},
	{messages.CodeRetryExhausted, http.StatusServiceUnavailable},
	{messages.CodeTimeout, http.StatusGatewayTimeout},
	{messages.CodeExpired, http.StatusGone},
	{messages.CodeRateLimited, http.StatusTooManyRequests},
	{messages.CodeInternal, http.StatusInternalServerError},
}

// Status is the HTTP status of an answer with return code rc; a code this
// build does not know is a 500.
func Status(rc messages.Code) int {
	for _, e := range httpStatus {
		if e.code == rc {
			return e.status
		}
	}
	return http.StatusInternalServerError
}

// StatusMarkdown is the README's table of return codes and HTTP statuses.
func StatusMarkdown() string {
	var b strings.Builder
	b.WriteString("| return code | HTTP status |\n| --- | --- |\n")
	for _, e := range httpStatus {
		fmt.Fprintf(&b, "| `%s` (%d) | %d %s |\n", e.code, uint16(e.code), e.status, http.StatusText(e.status))
	}
	return b.String()
}
