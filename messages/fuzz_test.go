package messages

import (
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
)

// Decoding bytes from the network must never panic. Run one target with e.g.
//
//	go test -run '^$' -fuzz '^FuzzDecodeInternal$' -fuzztime 15s ./messages/

// FuzzDecodeInternal feeds every internal message decoder (DecodeValid of
// each type, chosen by the first byte) with arbitrary bytes.
func FuzzDecodeInternal(f *testing.F) {
	ss := envSamples()
	for i, s := range ss {
		b, err := Encode(s)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(byte(i), b)
		f.Add(byte(i), b[:len(b)/2])
	}
	f.Add(byte(0), []byte{0xdf, 0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, sel byte, data []byte) {
		s := ss[int(sel)%len(ss)]
		v, err := envDecodeAs(s, data)
		if err != nil {
			return
		}
		// Whatever decodes and validates must encode again.
		if _, err := Encode(v); err != nil {
			t.Fatalf("%T decoded but does not encode: %v", v, err)
		}
	})
}

// FuzzDecodeRequest covers content detection and both envelope encodings.
func FuzzDecodeRequest(f *testing.F) {
	f.Add("", []byte(`{"header":{"api":"getData","opts":{"timeout":5},"scope":{"assembly":"eu","tier":"rdb"}},"payload":{"table":"t"}}`))
	f.Add("json", []byte(`{"header":{"api":"ping"}}`))
	mp, _ := Request{Header: RequestHeader{V: 1, API: "sql"}, Payload: envArgs(), Content: ContentMsgpack}.Encode()
	f.Add("", mp)
	f.Add("msgpack", mp)
	f.Add("xml", []byte("<a/>"))
	f.Fuzz(func(t *testing.T, ct string, data []byte) {
		h := nats.Header{}
		if ct != "" {
			h.Set(HdrContentType, ct)
		}
		r, err := DecodeRequest(h, data)
		if err != nil {
			return
		}
		if _, err := r.Encode(); err != nil && r.Content == ContentMsgpack {
			t.Fatalf("decoded request does not encode: %v", err)
		}
	})
}

// FuzzDecodeResponse covers the response envelope.
func FuzzDecodeResponse(f *testing.F) {
	j, _ := NewResponse("r", Request{Header: RequestHeader{API: "getData"}, Content: ContentJSON}, StatusOK, []byte(`[1]`)).Encode()
	m, _ := NewResponse("r", Request{Header: RequestHeader{API: "getData"}}, Errorf(CodeTimeout, CodeErr, "x"), envArgs()).Encode()
	f.Add(j)
	f.Add(m)
	f.Fuzz(func(t *testing.T, data []byte) {
		_, _ = DecodeResponse(nil, data)
	})
}

// parseHeaderLines turns "k: v" lines into a header, so the fuzzer can
// shape headers freely.
func parseHeaderLines(s string) nats.Header {
	h := nats.Header{}
	for line := range strings.SplitSeq(s, "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok {
			h.Add(strings.TrimSpace(k), strings.TrimSpace(v))
		}
	}
	return h
}

// FuzzReadHeaders covers ReadRouting, ReadStatus and Deadline.
func FuzzReadHeaders(f *testing.F) {
	f.Add("Sg-Attempt: 3\nSg-Deadline: 17\nSg-Rc: 45\nSg-Ac: ERR\nSg-Content-Type: json")
	f.Add("Sg-Purview-Version: 18446744073709551616\nSg-Rc: -1")
	f.Fuzz(func(t *testing.T, s string) {
		h := parseHeaderLines(s)
		r, err := ReadRouting(h)
		if err == nil {
			h2 := nats.Header{}
			r.Write(h2)
			if r2, err := ReadRouting(h2); err != nil || r2 != r {
				t.Fatalf("routing does not round trip: %+v -> %+v, %v", r, r2, err)
			}
		}
		if st, err := ReadStatus(h); err == nil {
			h2 := nats.Header{}
			st.Write(h2)
			if _, err := ReadStatus(h2); err != nil {
				t.Fatalf("status does not round trip: %+v: %v", st, err)
			}
		}
		_, _, _ = Deadline(h)
	})
}

// FuzzReassembler feeds arbitrary chunk headers and data, then checks that
// whatever completes has exactly the announced size.
func FuzzReassembler(f *testing.F) {
	payload := randomPayload(3000, 7)
	msgs, _ := SplitChunks("s", nil, payload, 1000)
	var seed strings.Builder
	for k, v := range msgs[0].Header {
		seed.WriteString(k + ": " + v[0] + "\n")
	}
	f.Add(seed.String(), msgs[0].Data, "Sg-Chunk-Index: 1\nSg-Chunk-Count: 2\nSg-Chunk-Total: 3", []byte("abc"))
	f.Add("Sg-Chunk-Index: 0\nSg-Chunk-Count: 2\nSg-Chunk-Total: 3", []byte("a"), "Sg-Chunk-Index: 1\nSg-Chunk-Count: 2\nSg-Chunk-Total: 3", []byte("bc"))
	f.Fuzz(func(t *testing.T, h1 string, d1 []byte, h2 string, d2 []byte) {
		r := NewReassembler(1 << 16)
		for _, c := range []struct {
			h string
			d []byte
		}{{h1, d1}, {h2, d2}, {h1, d1}} {
			done, err := r.Add(parseHeaderLines(c.h), c.d)
			if err != nil {
				return
			}
			if done {
				p, err := r.Payload()
				if err != nil || int64(len(p)) != r.total {
					t.Fatalf("done with %d bytes, announced %d: %v", len(p), r.total, err)
				}
			}
		}
	})
}
