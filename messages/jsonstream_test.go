package messages

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"
	"time"
)

// jsonFrames cuts t into windows of n rows and encodes them as a JSON answer
// stream: frame 0 an envelope, frames 1.. tables. It also returns the whole
// answer's envelope.
func jsonFrames(t *testing.T, tb Table, n int) (frames [][]byte, whole []byte) {
	t.Helper()
	hdr := ResponseHeader{V: RequestVersion, RequestID: "r1", API: "getData", Status: Status{RC: CodeOK, AC: CodeOK}}
	enc := func(tb Table) []byte {
		b, err := tb.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	whole, err := Response{Header: hdr, Payload: enc(tb), Content: ContentJSON}.Encode()
	if err != nil {
		t.Fatal(err)
	}
	rows := tb.NumRows()
	for lo := 0; lo == 0 || lo < rows; lo += n {
		w := tb.Slice(lo, min(lo+n, rows))
		if lo == 0 {
			b, err := Response{Header: hdr, Payload: enc(w), Content: ContentJSON}.Encode()
			if err != nil {
				t.Fatal(err)
			}
			frames = append(frames, b)
			continue
		}
		frames = append(frames, enc(w))
	}
	return frames, whole
}

func streamTable(t *testing.T, rows int) Table {
	t.Helper()
	tb := NewTable([]ColumnSpec{{Name: "time", Type: TypeTimestamp}, {Name: "sym", Type: TypeSymbol}, {Name: "px", Type: TypeFloat}})
	for i := range rows {
		if err := tb.AppendRow(time.Unix(int64(i), 0), "s\"<"+string(rune('a'+i%26)), float64(i)/3); err != nil {
			t.Fatal(err)
		}
	}
	return tb
}

// The document a JSON stream writes is the whole answer's envelope, byte for
// byte, however the rows were cut into windows (empty windows included).
func TestJSONStreamWriterWritesTheWholeEnvelope(t *testing.T) {
	for _, c := range []struct{ rows, window int }{{0, 4}, {1, 4}, {10, 3}, {10, 10}, {10, 1}, {257, 64}} {
		tb := streamTable(t, c.rows)
		frames, whole := jsonFrames(t, tb, c.window)
		// An empty window between two others must not leave a stray comma.
		if len(frames) > 2 {
			frames = append(frames[:2], append([][]byte{[]byte(" [ ] ")}, frames[2:]...)...)
		}
		var out bytes.Buffer
		j := NewJSONStreamWriter(&out)
		for i, f := range frames {
			if err := j.Frame(i, f); err != nil {
				t.Fatalf("%+v: frame %d: %v", c, i, err)
			}
		}
		if err := j.End(); err != nil {
			t.Fatal(err)
		}
		if h := j.Header(); h.RequestID != "r1" || h.API != "getData" || h.V != RequestVersion || !h.Status.IsOK() {
			t.Fatalf("Header %+v: want frame 0's", h)
		}
		if !bytes.Equal(out.Bytes(), whole) {
			t.Fatalf("%+v: streamed document differs from the whole answer:\n%s\nwant\n%s", c, out.Bytes(), whole)
		}
		if j.Written() != int64(len(whole)) {
			t.Fatalf("Written %d, want %d", j.Written(), len(whole))
		}
		resp, err := DecodeResponse(nil, out.Bytes())
		if err != nil {
			t.Fatal(err)
		}
		got, err := DecodeTableJSON(resp.Payload, nil)
		if err != nil {
			t.Fatal(err)
		}
		if got.NumRows() != c.rows {
			t.Fatalf("%d rows, want %d", got.NumRows(), c.rows)
		}
	}
}

// A frame out of order, a frame that is not JSON, not an array or not an
// envelope stops the document before a byte of that frame is written, and
// never with a closing bracket: the caller cannot take it for whole.
func TestJSONStreamWriterRefusesBadFrames(t *testing.T) {
	tb := streamTable(t, 6)
	frames, _ := jsonFrames(t, tb, 2)
	for name, c := range map[string]struct {
		seq  int
		data []byte
		want error
	}{
		"gap":          {2, frames[2], ErrChunk},
		"not JSON":     {1, []byte(`[{"a":1},`), ErrInvalid},
		"not an array": {1, []byte(`{"a":1}`), ErrInvalid},
		"too deep":     {1, []byte(`[` + strings.Repeat("[", 40) + strings.Repeat("]", 40) + `]`), ErrMalformed},
	} {
		var out bytes.Buffer
		j := NewJSONStreamWriter(&out)
		if err := j.Frame(0, frames[0]); err != nil {
			t.Fatal(err)
		}
		before := out.Len()
		if err := j.Frame(c.seq, c.data); !errors.Is(err, c.want) {
			t.Fatalf("%s: error %v, want %v", name, err, c.want)
		}
		if out.Len() != before || json.Valid(out.Bytes()) {
			t.Fatalf("%s: wrote %q after a bad frame", name, out.Bytes()[before:])
		}
	}
	for name, f0 := range map[string][]byte{
		"rows for an envelope": frames[1],
		"no header":            []byte(`{"payload":[]}`),
		"payload not rows":     []byte(`{"header":{"v":1},"payload":{"a":1}}`),
		"header without v":     []byte(`{"header":{"requestId":"r"},"payload":[]}`),
		"header not an object": []byte(`{"header":[1],"payload":[]}`),
		"a second header":      []byte(`{"header":{"v":1},"header":{"x":1},"payload":[]}`), // the kept bytes' fields are validated
		"payload not JSON":     []byte(`{"header":{"v":1},"payload":[1,}`),
	} {
		var out bytes.Buffer
		if err := NewJSONStreamWriter(&out).Frame(0, f0); !errors.Is(err, ErrInvalid) || out.Len() != 0 {
			t.Fatalf("%s: error %v, wrote %q", name, err, out.Bytes())
		}
	}
	if err := NewJSONStreamWriter(&bytes.Buffer{}).End(); !errors.Is(err, ErrChunk) {
		t.Fatalf("End before frame 0: %v", err)
	}
}

// FuzzJSONStreamWriter: frames from the network never panic the writer, and
// whatever it accepted up to End is one valid JSON document.
func FuzzJSONStreamWriter(f *testing.F) {
	frames, _ := jsonFrames(&testing.T{}, streamTable(&testing.T{}, 3), 2)
	f.Add(frames[0], frames[1])
	f.Add([]byte(`{"header":{},"payload":[]}`), []byte(`[]`))
	f.Add([]byte(`{"header":{"a":[1,2]},"payload":[1,2]}`), []byte(`[[[[[[`))
	f.Fuzz(func(t *testing.T, f0, f1 []byte) {
		var out bytes.Buffer
		j := NewJSONStreamWriter(&out)
		if j.Frame(0, f0) != nil {
			return
		}
		_ = j.Frame(1, f1)
		if err := j.End(); err != nil {
			t.Fatal(err)
		}
		var v struct {
			Header  map[string]any `json:"header"`
			Payload []any          `json:"payload"`
		}
		if err := json.Unmarshal(out.Bytes(), &v); err != nil {
			t.Fatalf("document %q is not an envelope: %v", out.Bytes(), err)
		}
	})
}

// BenchmarkJSONStreamFrame0: checking and writing frame 0 of a JSON answer
// stream (an envelope around a window of about 512 KiB).
func BenchmarkJSONStreamFrame0(b *testing.B) {
	t := &testing.T{}
	frames, _ := jsonFrames(t, streamTable(t, 8000), 8000)
	b.SetBytes(int64(len(frames[0])))
	b.ReportAllocs()
	for b.Loop() {
		if err := NewJSONStreamWriter(io.Discard).Frame(0, frames[0]); err != nil {
			b.Fatal(err)
		}
	}
}
