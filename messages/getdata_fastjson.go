package messages

import (
	"encoding/json"
	"strconv"
	"unicode/utf8"
)

// A hand-written parse of the common shape of a JSON caller's getData
// arguments, tried before encoding/json (every service decodes them:
// messages/args.go). encoding/json costs about 4 µs and 29 allocations for a
// small request; this about a tenth.
//
// It is only a shortcut: whatever it is not sure of, it refuses, and
// unmarshalJSON falls back to encoding/json, whose results and errors are the
// contract. The fallback exists because encoding/json's semantics are wider
// than the common shape and subtle to copy: it matches keys
// case-insensitively ("Table" is table) and ignores unknown ones, lets the
// last of duplicate keys win, reads null as "leave unset", replaces invalid
// UTF-8 with U+FFFD, decodes escapes, and reports a type error while still
// filling the other keys. So the fast path accepts only: one object whose keys
// are exactly the canonical names (filter excepted), each at most once;
// strings without a backslash or control byte, in valid UTF-8; lists of such
// strings; agg as a list of such lists; labels as an object of string to
// string or list of strings (each key once); limit as a plain non-negative
// integer of at most 18 digits; scope as any valid JSON value but null, kept
// raw; whitespace anywhere. FuzzGetDataArgsJSONFastPath checks that whatever
// it accepts decodes exactly as encoding/json decodes it.

// fastArgKeys are the keys the fast path reads, one bit each to refuse
// duplicates.
var fastArgKeys = [...]string{"table", "startTS", "endTS", "labels", "columns", "groupBy", "agg", "sortCols", "limit", "scope"}

// parseGetDataArgsJSONFast fills w as json.Unmarshal would, except for the
// labels, which it gives decoded (nil when absent). ok is false when the
// bytes are not of the common shape: the caller must then use encoding/json.
func parseGetDataArgsJSONFast(b []byte) (w getDataArgsJSON, labels LabelSelector, ok bool) {
	s := argsScanner{b: b}
	if !s.next('{') {
		return w, nil, false
	}
	if s.next('}') {
		return w, nil, s.end()
	}
	var seen uint
	for {
		key, ok := s.rawString()
		if !ok || !s.next(':') {
			return w, nil, false
		}
		k := -1
		for i, name := range fastArgKeys {
			if string(key) == name {
				k = i
				break
			}
		}
		if k < 0 || seen&(1<<k) != 0 {
			return w, nil, false // filter, another key, another case or a duplicate
		}
		seen |= 1 << k
		switch fastArgKeys[k] {
		case "table":
			w.Table, ok = s.string()
		case "startTS":
			w.StartTS, ok = s.string()
		case "endTS":
			w.EndTS, ok = s.string()
		case "labels":
			labels, ok = s.labels()
		case "columns":
			w.Columns, ok = s.strings()
		case "groupBy":
			w.GroupBy, ok = s.strings()
		case "agg":
			w.Agg, ok = s.lists()
		case "sortCols":
			w.SortCols, ok = s.strings()
		case "limit":
			w.Limit, ok = s.uint()
		case "scope":
			w.Scope, ok = s.raw()
		}
		if !ok {
			return w, nil, false
		}
		if s.next(',') {
			continue
		}
		if s.next('}') {
			return w, labels, s.end()
		}
		return w, nil, false
	}
}

// argsScanner reads b from i; each method skips the whitespace before what
// it reads and reports false on anything outside the common shape.
type argsScanner struct {
	b []byte
	i int
}

func (s *argsScanner) space() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// next consumes c if it comes next.
func (s *argsScanner) next(c byte) bool {
	s.space()
	if s.i < len(s.b) && s.b[s.i] == c {
		s.i++
		return true
	}
	return false
}

// peek gives the next byte without consuming it (0 at the end).
func (s *argsScanner) peek() byte {
	s.space()
	if s.i < len(s.b) {
		return s.b[s.i]
	}
	return 0
}

// end reports whether only whitespace is left.
func (s *argsScanner) end() bool {
	s.space()
	return s.i == len(s.b)
}

// rawString reads a string that needs no unquoting: the bytes between the
// quotes are its value, as encoding/json would give it.
func (s *argsScanner) rawString() ([]byte, bool) {
	if !s.next('"') {
		return nil, false
	}
	start, ascii := s.i, true
	for ; s.i < len(s.b); s.i++ {
		switch c := s.b[s.i]; {
		case c == '"':
			v := s.b[start:s.i]
			s.i++
			return v, ascii || utf8.Valid(v)
		case c == '\\' || c < ' ':
			return nil, false // an escape to decode, or a control byte JSON refuses
		case c >= utf8.RuneSelf:
			ascii = false
		}
	}
	return nil, false
}

func (s *argsScanner) string() (string, bool) {
	v, ok := s.rawString()
	return string(v), ok
}

// strings reads a list of strings; [] gives an empty, non-nil list, as
// encoding/json does.
func (s *argsScanner) strings() ([]string, bool) { return scanList(s, s.string) }

// lists reads a list of lists of strings (agg).
func (s *argsScanner) lists() ([][]string, bool) { return scanList(s, s.strings) }

// scanList reads a list of elem; [] gives an empty, non-nil list.
func scanList[T any](s *argsScanner, elem func() (T, bool)) ([]T, bool) {
	if !s.next('[') {
		return nil, false
	}
	out := []T{}
	if s.next(']') {
		return out, true
	}
	for {
		v, ok := elem()
		if !ok {
			return nil, false
		}
		out = append(out, v)
		if s.next(']') {
			return out, true
		}
		if !s.next(',') {
			return nil, false
		}
	}
}

// labels reads an object of label key to a string or a list of strings, as
// fromJSON decodes it.
func (s *argsScanner) labels() (LabelSelector, bool) {
	if !s.next('{') {
		return nil, false
	}
	out := LabelSelector{}
	if s.next('}') {
		return out, true
	}
	for {
		k, ok := s.string()
		if !ok || !s.next(':') {
			return nil, false
		}
		if _, dup := out[k]; dup {
			return nil, false // encoding/json keeps the last
		}
		var v []string
		switch s.peek() {
		case '"':
			var one string
			one, ok = s.string()
			v = []string{one}
		case '[':
			v, ok = s.strings()
		default:
			ok = false
		}
		if !ok {
			return nil, false
		}
		out[k] = v
		if s.next('}') {
			return out, true
		}
		if !s.next(',') {
			return nil, false
		}
	}
}

// maxUintDigits: an int of this many decimal digits cannot overflow (18 of
// 64 bits, 9 of 32); a longer one is left to encoding/json, which refuses
// what does not fit.
const maxUintDigits = 18*(strconv.IntSize/64) + 9*(1-strconv.IntSize/64)

// uint reads a non-negative integer without fraction or exponent; a longer
// one than maxUintDigits could overflow, and is left to encoding/json.
func (s *argsScanner) uint() (int, bool) {
	s.space()
	start, n := s.i, 0
	for s.i < len(s.b) && s.b[s.i] >= '0' && s.b[s.i] <= '9' {
		n = n*10 + int(s.b[s.i]-'0')
		s.i++
	}
	digits := s.i - start
	if digits == 0 || digits > maxUintDigits || (digits > 1 && s.b[start] == '0') {
		return 0, false
	}
	// Whatever follows must end the value: '.', 'e' or another byte falls back.
	switch s.peek() {
	case ',', '}':
		return n, true
	}
	return 0, false
}

// raw reads any JSON value but null and gives a copy of its bytes, as
// json.RawMessage does. It finds the value's end by its brackets and strings
// only, then leaves the syntax to json.Valid.
func (s *argsScanner) raw() (json.RawMessage, bool) {
	s.space()
	if s.i >= len(s.b) || s.b[s.i] == 'n' {
		return nil, false
	}
	start := s.i
	s.i = valueEnd(s.b, s.i)
	v := s.b[start:s.i]
	if len(v) == 0 || !json.Valid(v) {
		return nil, false
	}
	return append(json.RawMessage(nil), v...), true
}

// valueEnd gives the index just past the value that starts at b[i].
func valueEnd(b []byte, i int) int {
	depth := 0
	for ; i < len(b); i++ {
		switch b[i] {
		case '"':
			for i++; i < len(b) && b[i] != '"'; i++ {
				if b[i] == '\\' {
					i++ // the escaped byte cannot end the string
				}
			}
			if depth == 0 {
				return min(i+1, len(b))
			}
		case '{', '[':
			depth++
		case '}', ']':
			if depth == 0 {
				return i // the arguments' object closes after a scalar
			}
			if depth--; depth == 0 {
				return i + 1
			}
		case ',', ' ', '\t', '\n', '\r':
			if depth == 0 {
				return i
			}
		}
	}
	return len(b)
}
