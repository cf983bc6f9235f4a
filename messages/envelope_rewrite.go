package messages

import (
	"bytes"
	"encoding/json"
)

// ResponseWithRequestID returns the response envelope data with its header's
// request id set to id, touching only the header: the payload's bytes are
// copied as they are, never decoded nor encoded again. This is how the GW
// puts the caller's id in an answer (a large one was decoded and encoded
// whole for it, issue 10). ok false: data is not an envelope in sg's own
// layout, or its header does not decode and validate; decode it in full.
// When the id is already id, data itself is returned.
func ResponseWithRequestID(c Content, data []byte, id string) (out []byte, ok bool) {
	start, end, hdr, ok := responseHeaderSpan(c, data)
	if !ok {
		return nil, false
	}
	if c == ContentJSON {
		// What follows the header is the end, or a payload and the end: the
		// payload is carried over unread, but an empty one is no envelope.
		if tail := data[end:]; string(tail) != "}" {
			const key = `,"payload":`
			if !bytes.HasPrefix(tail, []byte(key)) || len(tail) < len(key)+2 || tail[len(tail)-1] != '}' {
				return nil, false
			}
		}
	}
	if hdr.RequestID == id {
		return data, true
	}
	hdr.RequestID = id
	var hb []byte
	var err error
	if c == ContentMsgpack {
		hb = encodeWire(wireResponseHeader{&hdr}, 0) // as the envelope's own encoder writes it
	} else {
		hb, err = json.Marshal(hdr)
	}
	if err != nil {
		return nil, false
	}
	out = make([]byte, 0, len(data)-(end-start)+len(hb))
	out = append(out, data[:start]...)
	out = append(out, hb...)
	return append(out, data[end:]...), true
}

// ResponseNamesID reports whether head, the beginning of a response envelope
// in sg's own layout (the first chunk of a chunked answer), has a header
// that decodes, validates and names request id: the GW passes such an answer
// on as it comes, with nothing in it to rewrite.
func ResponseNamesID(c Content, head []byte, id string) bool {
	_, _, hdr, ok := responseHeaderSpan(c, head)
	return ok && hdr.RequestID == id
}

// responseHeaderSpan finds the header of a response envelope in sg's own
// layout at the start of data, data[start:end], and decodes and validates
// it; what follows it is not looked at.
func responseHeaderSpan(c Content, data []byte) (start, end int, hdr ResponseHeader, ok bool) {
	defer func() {
		if r := recover(); r != nil {
			ok = false
		}
	}()
	switch c {
	case ContentMsgpack:
		// {"header": {...}, "payload": raw}: a map of one or two entries
		// whose first key is "header".
		const key = "\xa6header"
		if len(data) < 1+len(key) || (data[0] != 0x81 && data[0] != 0x82) || string(data[1:1+len(key)]) != key {
			return 0, 0, hdr, false
		}
		start = 1 + len(key)
		n, err := msgpackValueLen(data[start:])
		if err != nil {
			return 0, 0, hdr, false
		}
		end = start + n
		if decodeWireMessage(data[start:end], wireResponseHeader{&hdr}, MessageLimits) != nil {
			return 0, 0, hdr, false
		}
	case ContentJSON:
		if !bytes.HasPrefix(data, jsonEnvelopeHead) {
			return 0, 0, hdr, false
		}
		start = len(jsonEnvelopeHead)
		var found bool
		if end, found = jsonObjectEnd(data, start); !found {
			return 0, 0, hdr, false
		}
		if CheckJSON(data[start:end], MessageLimits) != nil || json.Unmarshal(data[start:end], &hdr) != nil {
			return 0, 0, hdr, false
		}
	default:
		return 0, 0, hdr, false
	}
	if hdr.Validate() != nil {
		return 0, 0, hdr, false
	}
	return start, end, hdr, true
}

// wireResponseHeader is a response header alone, in the hand codec the
// envelope uses for it.
type wireResponseHeader struct{ h *ResponseHeader }

func (w wireResponseHeader) appendWire(ww *wireWriter)      { ww.responseHeader(*w.h) }
func (w wireResponseHeader) decodeWire(r *wireReader) error { return r.responseHeader(w.h) }
