package messages

// The seed gives the scope in the request arguments ("scope":{"assembly":...}),
// in whichever encoding the client uses.

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// ScopeFromArgs reads the "scope" key of a request's arguments in encoding
// c. ok is false when the arguments carry no scope (or a null one). A scope
// that is not an object is an error (ErrInvalid) that names what was given,
// so that a request never runs unscoped by mistake. args has been checked
// with the envelope (CheckMsgpack / CheckJSON) before it gets here.
func ScopeFromArgs(c Content, args []byte) (s Scope, ok bool, err error) {
	if len(args) == 0 {
		return s, false, nil
	}
	switch c {
	case ContentJSON:
		var w struct {
			Scope json.RawMessage `json:"scope"`
		}
		if json.Unmarshal(args, &w) != nil {
			return s, false, nil // not an object: the API's decoder says why
		}
		return ScopeFromJSON(w.Scope)
	case ContentMsgpack:
		raw, _ := msgpackScope(args)
		return ScopeFromMsgpack(raw)
	}
	return s, false, fmt.Errorf("%w: content type %q", ErrInvalid, c)
}

// ScopeFromMsgpack reads the raw value of the "scope" key of msgpack
// arguments, as an API's decoder kept it (DecodeGetDataArgsMsgpackScope):
// ScopeFromArgs without a second walk of the arguments. No value (nil) or a
// msgpack nil is no scope.
func ScopeFromMsgpack(raw []byte) (s Scope, ok bool, err error) {
	if len(raw) == 0 || raw[0] == 0xc0 {
		return s, false, nil
	}
	if b := raw[0]; !isMsgpackMap(b) {
		return s, false, invalid("request arguments", "scope must be a map such as {assembly: eu}, got msgpack type 0x%02x", b)
	}
	r := newWireReader(raw, MessageLimits)
	if err := r.scope(&s); err != nil {
		return s, false, invalid("request arguments", "scope: %v", err)
	}
	return s, true, nil
}

// isMsgpackMap reports whether b is the type byte of a msgpack map.
func isMsgpackMap(b byte) bool { return b >= 0x80 && b <= 0x8f || b == 0xde || b == 0xdf }

// argsMapScope walks an API's msgpack arguments b, a map, once, into p:
// field reads the API's own keys (ok false: not one of them), the "scope"
// key's raw value is kept (the last, if given twice) and any other key is
// skipped. With an error there is no scope: the walk may have stopped before
// it.
func argsMapScope[T any](b []byte, p *T, typ string, field func(r *wireReader, k []byte) (ok bool, err error)) (sc []byte, err error) {
	r := newWireReader(b, MessageLimits)
	err = wireFields(&r, p, typ, func(k []byte) error {
		if string(k) == "scope" {
			return r.scopeValue(&sc)
		}
		if ok, err := field(&r, k); ok {
			return err
		}
		return r.skip()
	})
	if n := len(b) - r.pos; err == nil && n > 0 {
		err = fmt.Errorf("%d trailing bytes", n)
	}
	if err != nil {
		return nil, err
	}
	return sc, nil
}

// scopeValue skips the value of an arguments' "scope" key, keeping its raw
// bytes in *sc when sc is not nil (a key given twice: the last).
func (r *wireReader) scopeValue(sc *[]byte) error {
	start := r.pos
	if err := r.skip(); err != nil {
		return err
	}
	if sc != nil {
		*sc = r.b[start:r.pos]
	}
	return nil
}

// ScopeFromJSON reads the raw value of the "scope" key of JSON arguments, as
// an API's decoder kept it (DecodeGetDataArgsJSONScope): ScopeFromArgs
// without a second parse of the arguments.
func ScopeFromJSON(raw json.RawMessage) (s Scope, ok bool, err error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return s, false, nil
	}
	if raw[0] != '{' {
		return s, false, invalid("request arguments", "scope must be an object such as {\"assembly\":\"eu\"}, got %s", jsonKind(raw[0]))
	}
	if fs, ok := parseScopeJSONFast(raw); ok {
		return fs, true, nil
	}
	return scopeFromJSONStd(raw)
}

// scopeFromJSONStd reads a JSON object as the scope with encoding/json: the
// fallback of the fast path, and the reference it must agree with. (Its own
// function: &s escapes, and ScopeFromJSON's result must not, or the fast
// path would pay a heap allocation for it.)
func scopeFromJSONStd(raw []byte) (s Scope, ok bool, err error) {
	if err := json.Unmarshal(raw, &s); err != nil {
		return s, false, invalid("request arguments", "scope: %v", err)
	}
	return s, true, nil
}

// parseScopeJSONFast reads the common shape of a JSON scope, as
// parseGetDataArgsJSONFast reads the arguments' (its comment says why it is
// only a shortcut): one object whose keys are exactly "assembly" and "tier",
// each at most once, with strings needing no unquoting as values. Anything
// else (another case or key, null, an escape, a number) is left to
// encoding/json: ok is false. FuzzScopeJSONFastPath holds it to that.
func parseScopeJSONFast(b []byte) (s Scope, ok bool) {
	r := argsScanner{b: b}
	if !r.next('{') {
		return Scope{}, false
	}
	if r.next('}') {
		return Scope{}, r.end()
	}
	var assembly, tier bool
	for {
		key, ok := r.rawString()
		if !ok || !r.next(':') {
			return Scope{}, false
		}
		switch {
		case string(key) == "assembly" && !assembly:
			assembly = true
			s.Assembly, ok = r.string()
		case string(key) == "tier" && !tier:
			tier = true
			var t string
			t, ok = r.string()
			s.Tier = Tier(t)
		default:
			return Scope{}, false // another key or case, or a duplicate
		}
		if !ok {
			return Scope{}, false
		}
		if r.next(',') {
			continue
		}
		if r.next('}') && r.end() {
			return s, true
		}
		return Scope{}, false
	}
}

// msgpackScope finds the value of the "scope" key of msgpack arguments (the
// last one, if given twice), skipping the rest with the scanner. Arguments
// that are not a map, or not msgpack, carry no scope: the API's decoder
// says why.
func msgpackScope(args []byte) (raw []byte, found bool) {
	r := newWireReader(args, MessageLimits)
	n, err := r.mapLen()
	if err != nil {
		return nil, false
	}
	for range n {
		k, err := r.key()
		if err != nil {
			return nil, false
		}
		start := r.pos
		if err := r.skip(); err != nil {
			return nil, false
		}
		if string(k) == "scope" {
			raw, found = r.b[start:r.pos], true
		}
	}
	if r.pos != len(args) {
		return nil, false // trailing bytes: not one value
	}
	return raw, found
}

func jsonKind(b byte) string {
	switch {
	case b == '"':
		return "a string"
	case b == '[':
		return "a list"
	case b == 't' || b == 'f':
		return "a boolean"
	default:
		return "a number"
	}
}
