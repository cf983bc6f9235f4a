package messages

import (
	"fmt"
	"strconv"
	"strings"
)

// Code is a return code (rc) or an application code (ac). Both come from one
// table, as in the seed: a timeout answers rc=TIMEOUT (45), ac=ERR (10). The
// rc says what happened to the request in sg; the ac says what the API itself
// reported (or ERR when sg failed it). ai carries the text.
type Code uint16

// The codes. OK, APP, ERR, NOT_SUPPORTED and TIMEOUT keep the seed's values;
// sg's own codes take values that none of those use.
const (
	CodeOK             Code = 0  // success
	CodeAccepted       Code = 2  // async request accepted: poll with the request id after Retry-After
	CodeApp            Code = 5  // the API reported an error of its own: see ac and ai
	CodeErr            Code = 10 // generic error: see ai
	CodeNotSupported   Code = 12 // the API or option is not supported by this service or DAP
	CodeBadRequest     Code = 20 // the request is malformed or its arguments are invalid
	CodeUnknownAPI     Code = 21 // no API of that name
	CodeTooLarge       Code = 22 // the request or its answer is above a configured size limit
	CodeUnknownJob     Code = 23 // no async job of that id (never was, or gone past twice its retention)
	CodeNoResources    Code = 30 // no RC or DAP connected for the scope ("No resources connected")
	CodeUnavailable    Code = 31 // the service is shutting down or draining; try another
	CodeRetry          Code = 40 // DAP purview version or reference vintage mismatch: RC retries the label set
	CodeRetryExhausted Code = 41 // more retries than the maximum (KXI_SG_MAX_RETRY): the request fails
	CodeTimeout        Code = 45 // the request did not complete within its timeout
	CodeCancelled      Code = 46 // the caller cancelled the request
	CodeExpired        Code = 47 // the async job's answer was kept for its retention and is gone
	CodeRateLimited    Code = 50 // slow down: a downstream asked for a pause (Retry-After)
	CodeInternal       Code = 60 // a bug in sg: an invariant was broken
)

// CodeInfo is one row of the code table.
type CodeInfo struct {
	Code        Code
	Name        string
	Description string
}

// codeTable is the single source of names and descriptions: Code.String,
// ParseCode and CodesMarkdown all read it, so docs cannot drift from code.
var codeTable = []CodeInfo{
	{CodeOK, "OK", "Success."},
	{CodeAccepted, "ACCEPTED", "Async request accepted; poll with the request id after Retry-After."},
	{CodeApp, "APP", "The API reported an error of its own; see ac and ai."},
	{CodeErr, "ERR", "Generic error; see ai."},
	{CodeNotSupported, "NOT_SUPPORTED", "The API or option is not supported by this service or DAP."},
	{CodeBadRequest, "BAD_REQUEST", "The request is malformed or its arguments are invalid."},
	{CodeUnknownAPI, "UNKNOWN_API", "No API of that name."},
	{CodeTooLarge, "TOO_LARGE", "The request or its answer is above a configured size limit."},
	{CodeUnknownJob, "UNKNOWN_JOB", "No async job of that id (never was, or gone past twice its retention)."},
	{CodeNoResources, "NO_RESOURCES", "No RC or DAP connected for the scope (\"No resources connected\")."},
	{CodeUnavailable, "UNAVAILABLE", "The service is shutting down or draining; try another."},
	{CodeRetry, "RETRY", "DAP purview version or reference vintage mismatch; the RC retries the label set."},
	{CodeRetryExhausted, "RETRY_EXHAUSTED", "More retries than the maximum (KXI_SG_MAX_RETRY); the request fails."},
	{CodeTimeout, "TIMEOUT", "The request did not complete within its timeout."},
	{CodeCancelled, "CANCELLED", "The caller cancelled the request (sg.api.cancel)."},
	{CodeExpired, "EXPIRED", "The async job's answer was kept for its retention (SG_JOB_RETENTION) and is gone."},
	{CodeRateLimited, "RATE_LIMITED", "A downstream asked for a pause; retry after Retry-After."},
	{CodeInternal, "INTERNAL", "A bug in sg: an invariant was broken."},
}

var (
	codeByValue = map[Code]CodeInfo{}
	codeByName  = map[string]Code{}
)

func init() {
	for _, ci := range codeTable {
		if _, dup := codeByValue[ci.Code]; dup {
			panic(fmt.Sprintf("messages: duplicate code value %d", ci.Code))
		}
		codeByValue[ci.Code] = ci
		codeByName[ci.Name] = ci.Code
	}
}

// String returns the code's name, or "CODE_<n>" for a value not in the table
// (a newer peer may send one; it must still print).
func (c Code) String() string {
	if ci, ok := codeByValue[c]; ok {
		return ci.Name
	}
	return "CODE_" + strconv.Itoa(int(c))
}

// Description returns the one-line description, or "" for an unknown code.
func (c Code) Description() string { return codeByValue[c].Description }

// Known reports whether c is in the table.
func (c Code) Known() bool { _, ok := codeByValue[c]; return ok }

// ParseCode accepts a name ("TIMEOUT", case-insensitive) or a decimal value ("45").
func ParseCode(s string) (Code, error) {
	if c, ok := codeByName[strings.ToUpper(strings.TrimSpace(s))]; ok {
		return c, nil
	}
	n, err := strconv.ParseUint(strings.TrimSpace(s), 10, 16)
	if err != nil {
		return 0, fmt.Errorf("%w: code %q is neither a known name nor a number in 0..65535", ErrInvalid, s)
	}
	return Code(n), nil
}

// CodesMarkdown renders the code table as a Markdown table, for the README.
func CodesMarkdown() string {
	var b strings.Builder
	b.WriteString("| value | name | description |\n| ---: | --- | --- |\n")
	for _, ci := range codeTable {
		fmt.Fprintf(&b, "| %d | `%s` | %s |\n", ci.Code, ci.Name, ci.Description)
	}
	return b.String()
}
