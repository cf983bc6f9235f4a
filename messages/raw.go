package messages

import (
	"bytes"
	"errors"
	"io"

	"github.com/vmihailenco/msgpack/v5"
)

// RawMsgpack is an embedded msgpack value kept as bytes (a partial result's
// table, an API's arguments, an envelope's payload). It is on the wire exactly
// as msgpack.RawMessage, but decodes in one copy: msgpack.RawMessage walks the
// value element by element and grows its record as it goes, which cost a large
// answer dozens of times its size in allocations at every hop (issue 10).
type RawMsgpack []byte

// EncodeMsgpack writes the value as is (nil when empty).
func (m RawMsgpack) EncodeMsgpack(enc *msgpack.Encoder) error {
	return msgpack.RawMessage(m).EncodeMsgpack(enc)
}

// DecodeMsgpack takes the next value's bytes. Under Decode (a sliceReader) it
// finds the value's end with the scanner that already checked the whole
// message and copies it once; elsewhere it falls back to msgpack.RawMessage.
func (m *RawMsgpack) DecodeMsgpack(dec *msgpack.Decoder) error {
	r, ok := dec.Buffered().(*sliceReader)
	if !ok {
		var raw msgpack.RawMessage
		if err := raw.DecodeMsgpack(dec); err != nil {
			return err
		}
		*m = RawMsgpack(raw)
		return nil
	}
	rest := r.data[r.pos:]
	n, err := msgpackValueLen(rest)
	if err != nil {
		return err
	}
	if r.alias {
		*m = rest[:n:n]
	} else {
		*m = bytes.Clone(rest[:n])
	}
	r.pos += n
	return nil
}

// binView reads the next value, a bin, and returns its bytes for the caller
// to convert at once (a column's numbers, codes, varints): under Decode (a
// sliceReader) a view of the message itself, elsewhere a copy. The view must
// not be kept: decodeColumn reads every bin of a table this way, where
// DecodeBytes copied each first (a fifth of a large answer's allocations at
// the Agg and at the caller).
func binView(dec *msgpack.Decoder) ([]byte, error) {
	n, err := dec.DecodeBytesLen()
	if err != nil || n <= 0 {
		return nil, err
	}
	r, ok := dec.Buffered().(*sliceReader)
	if !ok {
		// Grown as bytes arrive, never by the announced length.
		b, err := io.ReadAll(io.LimitReader(dec.Buffered(), int64(n)))
		if err == nil && len(b) != n {
			err = io.ErrUnexpectedEOF
		}
		return b, err
	}
	if n > r.Len() {
		return nil, io.ErrUnexpectedEOF
	}
	b := r.data[r.pos : r.pos+n : r.pos+n]
	r.pos += n
	return b, nil
}

// sliceReader is the reader Decode gives the msgpack decoder: a bytes.Reader
// whose position RawMsgpack can see and move.
type sliceReader struct {
	data  []byte
	pos   int
	alias bool // RawMsgpack values share data instead of copying it (DecodeValidAliasing)
	coded bool // symbol columns stay dictionary-coded (DecodeCoded)
}

func (r *sliceReader) reset(b []byte) { r.data, r.pos, r.alias, r.coded = b, 0, false, false }

func (r *sliceReader) Len() int { return len(r.data) - r.pos }

func (r *sliceReader) Read(p []byte) (int, error) {
	if r.pos >= len(r.data) {
		if len(p) == 0 {
			return 0, nil
		}
		return 0, io.EOF
	}
	n := copy(p, r.data[r.pos:])
	r.pos += n
	return n, nil
}

func (r *sliceReader) ReadByte() (byte, error) {
	if r.pos >= len(r.data) {
		return 0, io.EOF
	}
	b := r.data[r.pos]
	r.pos++
	return b, nil
}

func (r *sliceReader) UnreadByte() error {
	if r.pos == 0 {
		return errors.New("messages: UnreadByte at the beginning")
	}
	r.pos--
	return nil
}
