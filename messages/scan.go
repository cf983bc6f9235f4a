package messages

// The pre-scans of limits.go. Both walk the bytes iteratively with a fixed
// stack: they allocate nothing (but an error), whatever the input claims.

import (
	"encoding/binary"
	"fmt"
)

// scanError is a pre-scan's refusal. It is ErrMalformed (errors.Is) but its
// text leaves the word to the caller, who prefixes what was being decoded.
type scanError struct{ msg string }

func (e *scanError) Error() string { return e.msg }
func (e *scanError) Unwrap() error { return ErrMalformed }

// CheckMsgpack reports whether data is exactly one msgpack value within lim
// (see limits.go): every length fits in the bytes left, nesting and element
// count are within bounds, and nothing follows the value. The error is
// ErrMalformed (errors.Is) and says what is wrong and at which byte offset.
func CheckMsgpack(data []byte, lim Limits) error {
	end, err := scanMsgpack(data, lim)
	if err == nil && end != len(data) {
		return &scanError{fmt.Sprintf("msgpack at byte %d of %d: %d trailing bytes after the value", end, len(data), len(data)-end)}
	}
	return err
}

// msgpackValueLen is the length of the msgpack value data starts with.
func msgpackValueLen(data []byte) (int, error) { return scanMsgpack(data, Limits{}) }

// scanMsgpack checks the msgpack value data starts with and returns where it
// ends.
func scanMsgpack(data []byte, lim Limits) (int, error) {
	end, _, err := scanMsgpackCount(data, lim.depth(), uint64(lim.MaxElements))
	return end, err
}

// scanMsgpackCount is scanMsgpack with the depth as given (0: scalars only,
// at most maxScanDepth) and the element cap (0: none); it also returns the
// values it saw, the value itself included.
func scanMsgpackCount(data []byte, maxDepth int, maxElems uint64) (int, uint64, error) {
	var (
		stack    [maxScanDepth + 1]uint64 // values still to read in each open container
		depth    = 0                      // stack[0] is the top level: one value
		pending  = uint64(1)              // sum of stack: each needs at least one byte
		elements = uint64(1)
		pos      = 0
		n        = uint64(len(data))
	)
	maxDepth = min(max(maxDepth, 0), maxScanDepth)
	stack[0] = 1
	bad := func(format string, args ...any) error {
		return &scanError{fmt.Sprintf("msgpack at byte %d of %d: ", pos, len(data)) + fmt.Sprintf(format, args...)}
	}
	// need reports whether k more bytes are present after pos.
	need := func(k uint64) bool { return k <= n-uint64(pos) }
	// be reads a big-endian length of w bytes at pos+1.
	be := func(w int) uint64 {
		b := data[pos+1 : pos+1+w]
		switch w {
		case 1:
			return uint64(b[0])
		case 2:
			return uint64(binary.BigEndian.Uint16(b))
		}
		return uint64(binary.BigEndian.Uint32(b))
	}
	for depth >= 0 {
		if stack[depth] == 0 {
			depth--
			continue
		}
		stack[depth]--
		pending--
		if pos >= len(data) {
			return 0, 0, bad("truncated: %d more values announced", pending+1)
		}
		c := data[pos]
		var (
			head      uint64 // bytes of the type byte and the length field
			body      uint64 // bytes after head (str, bin, ext, fixed-size numbers)
			items     uint64 // values in a container (a map entry is two)
			container bool
			lenWidth  int // width of a length field to read, 0: none
		)
		switch {
		case c <= 0x7f || c >= 0xe0: // positive and negative fixint
			head = 1
		case c <= 0x8f: // fixmap
			head, items, container = 1, 2*uint64(c&0x0f), true
		case c <= 0x9f: // fixarray
			head, items, container = 1, uint64(c&0x0f), true
		case c <= 0xbf: // fixstr
			head, body = 1, uint64(c&0x1f)
		}
		switch c {
		case 0xc0, 0xc2, 0xc3: // nil, false, true
			head = 1
		case 0xc1:
			return 0, 0, bad("byte 0xc1 is never used in msgpack")
		case 0xc4, 0xc5, 0xc6: // bin 8/16/32
			lenWidth = 1 << (c - 0xc4)
		case 0xc7, 0xc8, 0xc9: // ext 8/16/32: length, then a type byte
			lenWidth = 1 << (c - 0xc7)
			body = 1
		case 0xca, 0xcb: // float 32/64
			head, body = 1, 4<<(c-0xca)
		case 0xcc, 0xcd, 0xce, 0xcf: // uint 8..64
			head, body = 1, 1<<(c-0xcc)
		case 0xd0, 0xd1, 0xd2, 0xd3: // int 8..64
			head, body = 1, 1<<(c-0xd0)
		case 0xd4, 0xd5, 0xd6, 0xd7, 0xd8: // fixext 1..16: a type byte and the data
			head, body = 1, 1+1<<(c-0xd4)
		case 0xd9, 0xda, 0xdb: // str 8/16/32
			lenWidth = 1 << (c - 0xd9)
		case 0xdc, 0xdd: // array 16/32
			lenWidth, container = 2<<(c-0xdc), true
		case 0xde, 0xdf: // map 16/32
			lenWidth, container = 2<<(c-0xde), true
		}
		if lenWidth > 0 {
			head = 1 + uint64(lenWidth)
			if !need(head) {
				return 0, 0, bad("truncated length field of type 0x%02x", c)
			}
			l := be(lenWidth)
			switch {
			case c == 0xde || c == 0xdf:
				items = 2 * l
			case container:
				items = l
			default:
				body += l
			}
		}
		if head == 0 {
			return 0, 0, bad("unknown type byte 0x%02x", c) // unreachable: every byte is covered
		}
		if !need(head + body) {
			return 0, 0, bad("type 0x%02x announces %d bytes, %d are left", c, head+body, n-uint64(pos))
		}
		pos += int(head + body)
		if !container {
			continue
		}
		if depth+1 > maxDepth {
			return 0, 0, bad("nested deeper than %d", maxDepth)
		}
		if items == 0 {
			continue
		}
		// Each announced value needs at least one byte: a length that the
		// bytes left cannot hold is a lie, refused before anyone allocates.
		if pending+items > n-uint64(pos) {
			return 0, 0, bad("a container announces %d values, only %d bytes are left for them and %d values pending", items, n-uint64(pos), pending)
		}
		elements += items
		if maxElems > 0 && elements > maxElems {
			return 0, 0, bad("more than %d values in one message", maxElems)
		}
		depth++
		stack[depth] = items
		pending += items
	}
	return pos, elements, nil
}

// CheckJSON reports whether data nests arrays and objects at most
// lim.MaxDepth deep, holds at most lim.MaxElements values (counted at each
// opening bracket and separator) and closes every bracket and string it
// opens. It does not check the rest of the syntax: the decoder that follows
// does, with recursion now bounded. The error is ErrMalformed (errors.Is).
func CheckJSON(data []byte, lim Limits) error {
	var (
		depth    = 0
		elements = 1
		maxDepth = lim.depth()
		inString = false
		// open records the opening bracket of each level, so that "[}" fails.
		open [maxScanDepth + 1]byte
	)
	bad := func(i int, format string, args ...any) error {
		return &scanError{fmt.Sprintf("JSON at byte %d of %d: ", i, len(data)) + fmt.Sprintf(format, args...)}
	}
	for i := 0; i < len(data); i++ {
		c := data[i]
		if inString {
			switch c {
			case '\\':
				i++ // the escaped byte cannot end the string
			case '"':
				inString = false
			}
			continue
		}
		switch c {
		case '"':
			inString = true
		case '[', '{':
			if depth+1 > maxDepth {
				return bad(i, "nested deeper than %d", maxDepth)
			}
			depth++
			open[depth] = c
			elements++
		case ']', '}':
			if depth == 0 || open[depth] != c-2 { // '[' + 2 == ']', '{' + 2 == '}'
				return bad(i, "unbalanced %q", c)
			}
			depth--
		case ',':
			elements++
		default:
			continue
		}
		if lim.MaxElements > 0 && elements > lim.MaxElements {
			return bad(i, "more than %d values", lim.MaxElements)
		}
	}
	switch {
	case inString:
		return bad(len(data), "unterminated string")
	case depth > 0:
		return bad(len(data), "%d unclosed brackets", depth)
	}
	return nil
}
