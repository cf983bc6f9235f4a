package messages

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
)

// JSONStreamWriter writes the frames of a JSON answer stream (stream.go) as
// the one response envelope a whole answer would be, {"header":...,
// "payload":[rows...]}, frame by frame: a caller that cannot read frames (an
// HTTP client, a pipe) gets one document while neither sg nor the writer
// holds more than a frame of it.
//
// Frame 0 is an envelope whose payload is a JSON array of rows; frames 1..
// are arrays of rows. Every frame comes from the network and is checked
// (valid JSON, the expected shape; frame 0's header as DecodeResponse checks
// it) before a byte of it is written, so a bad frame stops the document
// short of its closing bracket: never a valid document that is cut. Each
// frame is checked in one pass (CheckJSON, then the syntax of what is not
// the header), not decoded: Header gives frame 0's header, so a reader need
// not decode frame 0 again.
type JSONStreamWriter struct {
	w       io.Writer
	next    int  // the sequence number of the frame expected next
	rows    bool // a row was written: the next frame's rows need a comma
	written int64
	header  ResponseHeader // frame 0's
}

// NewJSONStreamWriter writes the document to w.
func NewJSONStreamWriter(w io.Writer) *JSONStreamWriter { return &JSONStreamWriter{w: w} }

// Written is the number of bytes written so far.
func (j *JSONStreamWriter) Written() int64 { return j.written }

// Header is the response header of frame 0, once Frame took it (decoded and
// validated as DecodeResponse does).
func (j *JSONStreamWriter) Header() ResponseHeader { return j.header }

// rawResponseHeader is a response header decoded from JSON that keeps its
// bytes, so that frame 0's header is written as it came.
type rawResponseHeader struct {
	ResponseHeader
	raw []byte
}

func (h *rawResponseHeader) UnmarshalJSON(b []byte) error {
	// A document with "header" twice decodes it twice: start afresh, so the
	// fields validated are those of the bytes kept (not the first's merged in).
	h.ResponseHeader = ResponseHeader{}
	if err := json.Unmarshal(b, &h.ResponseHeader); err != nil {
		return err
	}
	h.raw = bytes.Clone(b) // a json.Decoder's buffer may move under b
	return nil
}

// Frame writes frame seq (its data as it came: an envelope for 0, rows after).
func (j *JSONStreamWriter) Frame(seq int, data []byte) error {
	if seq != j.next {
		return fmt.Errorf("%w: stream frame %d where %d was expected", ErrChunk, seq, j.next)
	}
	rows := data
	var (
		head []byte
		hdr  rawResponseHeader
	)
	if seq == 0 {
		var err error
		if hdr, rows, err = decodeJSONEnvelope[rawResponseHeader](data, PayloadLimits); err != nil {
			return fmt.Errorf("%w: stream frame 0 is not a response envelope: %w", ErrInvalid, err)
		}
		if len(hdr.raw) == 0 || hdr.raw[0] != '{' {
			return fmt.Errorf("%w: stream frame 0 has no header object", ErrInvalid)
		}
		if err := hdr.Validate(); err != nil {
			return fmt.Errorf("stream frame 0: %w", err)
		}
		head = make([]byte, 0, len(hdr.raw)+32)
		head = append(append(append(head, `{"header":`...), hdr.raw...), `,"payload":[`...)
	}
	inner, err := jsonRows(rows, seq == 0)
	if err != nil {
		return fmt.Errorf("stream frame %d: %w", seq, err)
	}
	if head != nil {
		if err := j.write(head); err != nil {
			return err
		}
		j.header = hdr.ResponseHeader
	}
	if len(inner) > 0 {
		if j.rows {
			if err := j.write([]byte{','}); err != nil {
				return err
			}
		}
		if err := j.write(inner); err != nil {
			return err
		}
		j.rows = true
	}
	j.next++
	return nil
}

// End closes the document after its last frame.
func (j *JSONStreamWriter) End() error {
	if j.next == 0 {
		return fmt.Errorf("%w: stream ended before its first frame", ErrChunk)
	}
	return j.write([]byte("]}"))
}

func (j *JSONStreamWriter) write(b []byte) error {
	n, err := j.w.Write(b)
	j.written += int64(n)
	if err != nil {
		return fmt.Errorf("messages: write JSON stream: %w", err)
	}
	return nil
}

// jsonRows returns the elements of the JSON array b without its brackets.
// checked says b was validated already (frame 0's payload, checked with its
// envelope by decodeJSONEnvelope).
func jsonRows(b []byte, checked bool) ([]byte, error) {
	b = bytes.TrimSpace(b)
	if len(b) < 2 || b[0] != '[' || b[len(b)-1] != ']' {
		return nil, fmt.Errorf("%w: a window of rows must be a JSON array", ErrInvalid)
	}
	if !checked {
		if err := validJSON(b); err != nil {
			return nil, err
		}
	}
	return bytes.TrimSpace(b[1 : len(b)-1]), nil
}

// validJSON checks b's nesting within PayloadLimits, then its syntax.
func validJSON(b []byte) error {
	if err := CheckJSON(b, PayloadLimits); err != nil {
		return err
	}
	if !json.Valid(b) {
		return fmt.Errorf("%w: not valid JSON", ErrInvalid)
	}
	return nil
}
