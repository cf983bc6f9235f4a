package merge

import (
	"bytes"
	"runtime"
	"testing"
	"time"

	"github.com/sg-project/sg/messages"
)

// FuzzDecodePartial: a partial from the network never panics the decoder or
// the merge, and never allocates more than messages' bound per input byte
// (the pre-scan refuses lengths the bytes do not back). Run with e.g.
//
//	GOMEMLIMIT=1GiB go test -run '^$' -fuzz '^FuzzDecodePartial$' -fuzztime 15s ./services/agg/merge/
func FuzzDecodePartial(f *testing.F) {
	rows := rowsPartial(f, []int64{1, 2}, []int64{10, 20})
	b, err := EncodePartial(rows)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b)
	agg, err := EncodePartial(Partial{Version: PartialVersion, Aggregated: true, Groups: 1,
		Aggs: []AggState{{Name: "n", Func: messages.AggCount, Count: []int64{3}}}})
	if err != nil {
		f.Fatal(err)
	}
	f.Add(agg)
	f.Add([]byte{0x81, 0xa1, 'a', 0xdd, 0xff, 0xff, 0xff, 0xff})            // aggs claiming 4,294,967,295 states
	f.Add([]byte{0x82, 0xa1, 'v', 0x01, 0xa1, 't', 0xdd, 0x00, 0x01, 0x00}) // times claiming 65,536
	for _, elem := range []byte{0xc0, 0x80, 0x01} {                         // 65,535 one-byte aggregation states
		f.Add(append([]byte{0x81, 0xa1, 'a', 0xdc, 0xff, 0xff}, bytes.Repeat([]byte{elem}, 65535)...))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var (
			p   Partial
			err error
		)
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		start := time.Now()
		p, err = DecodePartial(data)
		if d := time.Since(start); d > 5*time.Second {
			t.Fatalf("decoding %d bytes took %v", len(data), d)
		}
		runtime.ReadMemStats(&after)
		if bound := uint64(messages.MaxAllocPerByte*len(data) + messages.MaxAllocSlack); after.TotalAlloc-before.TotalAlloc > bound {
			t.Fatalf("decoding %d bytes allocated %d, bound %d", len(data), after.TotalAlloc-before.TotalAlloc, bound)
		}
		if err != nil {
			return
		}
		// What DecodePartial skips as checked while decoding (its tables'
		// codes, by messages) holds: the full check passes.
		if err := p.Validate(); err != nil {
			t.Fatalf("decoded an invalid partial: %v", err)
		}
		start = time.Now()
		merged, err := Merge(messages.GetDataArgs{Table: "t"}, []Partial{p, p})
		if d := time.Since(start); d > 5*time.Second {
			t.Fatalf("merging a partial of %d bytes took %v", len(data), d)
		}
		if err != nil {
			return
		}
		// The merge of what decoded (its symbols coded) is an answer.
		if _, err := messages.Encode(&merged); err != nil {
			t.Fatalf("the merge of a decoded partial does not encode: %v", err)
		}
		if _, err := merged.MarshalJSON(); err != nil {
			t.Fatalf("the merge of a decoded partial does not marshal: %v", err)
		}
	})
}
