package subjects

import (
	"errors"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// ErrInvalidToken is wrapped by every error about an id or prefix that cannot
// be used in a subject, so callers can test for it with errors.Is.
var ErrInvalidToken = errors.New("invalid subject token")

// MaxTokenLen bounds one id: subjects travel in every message header line and
// in permissions, so an unbounded id is a cheap way to hurt the whole bus.
const MaxTokenLen = 128

// Validate checks that id can be used as one token of a subject: not empty,
// at most MaxTokenLen bytes, valid UTF-8, and free of '.', '*', '>' and
// whitespace, which would split the token, turn it into a wildcard or break
// the NATS protocol line. what names the id in the error ("DAP id", "request id").
//
// Builders do not call Validate (they sit on the hot path); ids are validated
// where they enter sg: a DAP registration, an RC announcement, a request.
func Validate(what, id string) error {
	if id == "" {
		return fmt.Errorf("%w: %s is empty", ErrInvalidToken, what)
	}
	if len(id) > MaxTokenLen {
		return fmt.Errorf("%w: %s %.32q... is %d bytes, max %d", ErrInvalidToken, what, id, len(id), MaxTokenLen)
	}
	if !utf8.ValidString(id) {
		return fmt.Errorf("%w: %s %q is not valid UTF-8", ErrInvalidToken, what, id)
	}
	for i, r := range id {
		switch {
		case r == '.':
			return fmt.Errorf("%w: %s %q contains '.' at byte %d (it would split the subject token)", ErrInvalidToken, what, id, i)
		case r == '*' || r == '>':
			return fmt.Errorf("%w: %s %q contains wildcard %q at byte %d", ErrInvalidToken, what, id, r, i)
		case unicode.IsSpace(r):
			return fmt.Errorf("%w: %s %q contains whitespace at byte %d", ErrInvalidToken, what, id, i)
		case unicode.IsControl(r):
			return fmt.Errorf("%w: %s %q contains control character %U at byte %d", ErrInvalidToken, what, id, r, i)
		}
	}
	return nil
}

// ValidatePrefix checks a deployment prefix: one or more tokens separated by
// single dots ("sg", "acme.sg"), each token valid for Validate. A prefix must
// also not start with '$' or '_', which NATS reserves ($SYS, $JS, _INBOX).
func ValidatePrefix(prefix string) error {
	if prefix == "" {
		return fmt.Errorf("%w: prefix is empty", ErrInvalidToken)
	}
	if prefix[0] == '$' || prefix[0] == '_' {
		return fmt.Errorf("%w: prefix %q starts with %q, reserved by NATS", ErrInvalidToken, prefix, prefix[0])
	}
	for tok := range strings.SplitSeq(prefix, ".") {
		if err := Validate("prefix token", tok); err != nil {
			return fmt.Errorf("prefix %q: %w", prefix, err)
		}
	}
	return nil
}
