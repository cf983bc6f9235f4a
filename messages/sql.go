package messages

// SQLArgs are the arguments of the sql API. JSON: {"query": "SELECT ..."} or
// the statement as a bare string; msgpack: {"query": "..."} or a string. The
// RC plans them: they reach it as the caller sent them, in either encoding
// (Args.SQL), and the plan goes on to the DAPs and the Agg as getData
// arguments in msgpack.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
)

// MaxSQLBytes bounds a statement (the planner's own limit is the same).
const MaxSQLBytes = 64 << 10

// SQLArgs: see the top of the file.
type SQLArgs struct {
	Query string `msgpack:"query" json:"query"`
}

// Validate checks that there is a statement, within MaxSQLBytes.
func (a *SQLArgs) Validate() error {
	if strings.TrimSpace(a.Query) == "" {
		return invalid("sql arguments", "query is empty: send {\"query\": \"SELECT ...\"}")
	}
	if len(a.Query) > MaxSQLBytes {
		return invalid("sql arguments", "query of %d bytes is above the limit of %d", len(a.Query), MaxSQLBytes)
	}
	return nil
}

// DecodeSQLArgs decodes sql arguments in encoding c (checked with the
// envelope) and validates them. It never panics.
func DecodeSQLArgs(c Content, b []byte) (SQLArgs, error) {
	a, _, err := DecodeSQLArgsScope(c, b)
	return a, err
}

// DecodeSQLArgsScope is DecodeSQLArgs that also gives the raw "scope" key of
// the arguments in encoding c, as DecodeGetDataArgsJSONScope and
// DecodeGetDataArgsMsgpackScope do.
func DecodeSQLArgsScope(c Content, b []byte) (a SQLArgs, sc []byte, err error) {
	defer func() {
		if r := recover(); r != nil {
			a, sc, err = SQLArgs{}, nil, fmt.Errorf("%w: sql arguments: decoder panic: %v", ErrMalformed, r)
		}
	}()
	switch c {
	case ContentJSON:
		if err := CheckJSON(b, MessageLimits); err != nil {
			return a, nil, fmt.Errorf("%w: sql arguments: %w", ErrMalformed, err)
		}
		t := bytes.TrimSpace(b)
		if len(t) > 0 && t[0] == '"' {
			err = json.Unmarshal(t, &a.Query)
		} else {
			var w struct {
				Query string          `json:"query"`
				Scope json.RawMessage `json:"scope"`
			}
			err = json.Unmarshal(t, &w)
			a.Query, sc = w.Query, w.Scope
		}
	case ContentMsgpack:
		switch {
		case len(b) > 0 && (b[0]&0xe0 == 0xa0 || b[0] == 0xd9 || b[0] == 0xda || b[0] == 0xdb):
			err = DecodeLimited(b, &a.Query, MessageLimits)
		case len(b) > 0 && isMsgpackMap(b[0]):
			// The documented form, in one walk with its scope (as the
			// library reads it).
			sc, err = a.decodeMsgpackMap(b)
		default:
			err = DecodeLimited(b, &a, MessageLimits) // nil, or the library's struct as an array
		}
	default:
		return a, nil, fmt.Errorf("%w: content type %q", ErrInvalid, c)
	}
	if err != nil {
		return SQLArgs{}, sc, fmt.Errorf("%w: sql arguments: want {\"query\": \"SELECT ...\"}: %v", ErrMalformed, err)
	}
	return a, sc, a.Validate()
}

// decodeMsgpackMap reads sql arguments that are a msgpack map, and the raw
// value of their "scope" key.
func (a *SQLArgs) decodeMsgpackMap(b []byte) (sc []byte, err error) {
	return argsMapScope(b, a, "sql arguments", func(r *wireReader, k []byte) (bool, error) {
		if string(k) == "query" {
			return true, r.string(&a.Query)
		}
		return false, nil
	})
}
