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
// (valid JSON, the expected shape) before a byte of it is written, so a bad
// frame stops the document short of its closing bracket: never a valid
// document that is cut.
type JSONStreamWriter struct {
	w       io.Writer
	next    int  // the sequence number of the frame expected next
	rows    bool // a row was written: the next frame's rows need a comma
	written int64
}

// NewJSONStreamWriter writes the document to w.
func NewJSONStreamWriter(w io.Writer) *JSONStreamWriter { return &JSONStreamWriter{w: w} }

// Written is the number of bytes written so far.
func (j *JSONStreamWriter) Written() int64 { return j.written }

// Frame writes frame seq (its data as it came: an envelope for 0, rows after).
func (j *JSONStreamWriter) Frame(seq int, data []byte) error {
	if seq != j.next {
		return fmt.Errorf("%w: stream frame %d where %d was expected", ErrChunk, seq, j.next)
	}
	rows := data
	var head []byte
	if seq == 0 {
		if err := validJSON(data); err != nil {
			return fmt.Errorf("stream frame 0: %w", err)
		}
		var env struct {
			Header  json.RawMessage `json:"header"`
			Payload json.RawMessage `json:"payload"`
		}
		if err := json.Unmarshal(data, &env); err != nil {
			return fmt.Errorf("%w: stream frame 0 is not a response envelope: %w", ErrInvalid, err)
		}
		if len(env.Header) == 0 || env.Header[0] != '{' {
			return fmt.Errorf("%w: stream frame 0 has no header object", ErrInvalid)
		}
		head = make([]byte, 0, len(env.Header)+32)
		head = append(append(append(head, `{"header":`...), env.Header...), `,"payload":[`...)
		rows = env.Payload
	}
	inner, err := jsonRows(rows, seq == 0)
	if err != nil {
		return fmt.Errorf("stream frame %d: %w", seq, err)
	}
	if head != nil {
		if err := j.write(head); err != nil {
			return err
		}
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
// checked says b was validated already (frame 0's payload, a part of a valid
// envelope).
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
