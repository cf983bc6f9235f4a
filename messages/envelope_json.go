package messages

import (
	"bytes"
	"encoding/json"
)

// The JSON envelope as sg writes it, {"header":{...},"payload":...}, read
// without running the payload through encoding/json's decoder, which scans
// and copies it (most of relaying a large JSON answer, issue 10). Anything
// else, or anything this reader is unsure of, goes to the general decoder,
// so the result is always the one it would give.

var (
	jsonEnvelopeHead = []byte(`{"header":`)
	jsonPayloadKey   = []byte(`,"payload":`)
)

// decodeJSONEnvelopeFast returns ok false when data is not in sg's own
// layout or does not decode that way; the caller then decodes it in full.
// data has passed CheckJSON.
func decodeJSONEnvelopeFast[H any](data []byte) (h H, payload []byte, ok bool) {
	if !bytes.HasPrefix(data, jsonEnvelopeHead) || len(data) < len(jsonEnvelopeHead)+2 || data[len(data)-1] != '}' {
		return h, nil, false
	}
	start := len(jsonEnvelopeHead)
	end, ok := jsonObjectEnd(data, start)
	if !ok {
		return h, nil, false
	}
	rest := data[end:]
	switch {
	case len(rest) == 1: // no payload: "payload" is omitted when empty
	case bytes.HasPrefix(rest, jsonPayloadKey):
		payload = bytes.TrimSpace(rest[len(jsonPayloadKey) : len(rest)-1])
		if len(payload) == 0 || !json.Valid(payload) {
			return h, nil, false
		}
		if bytes.Equal(payload, []byte("null")) {
			payload = nil
		}
	default:
		return h, nil, false
	}
	if err := json.Unmarshal(data[start:end], &h); err != nil {
		return h, nil, false
	}
	return h, payload, true
}

// jsonObjectEnd returns the index just after the object that starts at
// data[i] ('{'), minding strings and their escapes; ok false if it does not
// start there or does not close.
func jsonObjectEnd(data []byte, i int) (int, bool) {
	if i >= len(data) || data[i] != '{' {
		return 0, false
	}
	depth, inString := 0, false
	for ; i < len(data); i++ {
		c := data[i]
		if inString {
			switch c {
			case '\\':
				i++ // the escaped byte
			case '"':
				inString = false
			}
			continue
		}
		switch c {
		case '"':
			inString = true
		case '{', '[':
			depth++
		case '}', ']':
			depth--
			if depth == 0 {
				return i + 1, true
			}
		}
	}
	return 0, false
}
