package messages

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"strings"
	"syscall"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/vmihailenco/msgpack/v5"
)

// hugeTables is the 13-byte message of issue 8: a map whose "tables" field
// claims an array of 4,294,967,295 entries. Before the pre-scan, msgpack
// reserved memory for that length and the failed allocation was fatal.
var hugeTables = []byte{0x81, 0xa6, 't', 'a', 'b', 'l', 'e', 's', 0xdd, 0xff, 0xff, 0xff, 0xff}

// childEnv marks the re-executed test binary that decodes under a hard
// address-space limit, where a fatal out-of-memory kills only the child.
const childEnv = "SG_MESSAGES_DECODE_CHILD"

func TestDecodeHugeLengthInSubprocess(t *testing.T) {
	if os.Getenv(childEnv) == "1" {
		// 4 GiB of address space: far more than any bounded decode needs,
		// far less than 4,294,967,295 table entries.
		lim := syscall.Rlimit{Cur: 4 << 30, Max: 4 << 30}
		if err := syscall.Setrlimit(syscall.RLIMIT_AS, &lim); err != nil {
			t.Fatalf("setrlimit: %v", err)
		}
		debug.SetMemoryLimit(512 << 20)
		var reg DAPRegistration
		err := Decode(hugeTables, &reg)
		if !errors.Is(err, ErrMalformed) {
			t.Fatalf("Decode = %v, want ErrMalformed", err)
		}
		os.Stdout.WriteString("CHILD-OK: " + err.Error() + "\n")
		return
	}
	if len(hugeTables) != 13 {
		t.Fatalf("the message is %d bytes, want 13", len(hugeTables))
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestDecodeHugeLengthInSubprocess$", "-test.count=1")
	cmd.Env = append(os.Environ(), childEnv+"=1")
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "CHILD-OK") {
		t.Fatalf("decoding the 13-byte message in a child process failed (%v):\n%s", err, truncate(string(out), 2000))
	}
	t.Logf("child: %s", strings.TrimSpace(string(out[strings.Index(string(out), "CHILD-OK"):])))
}

// TestDecodeHugeLengthAllocates checks, in process, that decoding the 13-byte
// message allocates a few KiB, not gigabytes.
func TestDecodeHugeLengthAllocates(t *testing.T) {
	var reg DAPRegistration
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	err := Decode(hugeTables, &reg)
	runtime.ReadMemStats(&after)
	if !errors.Is(err, ErrMalformed) {
		t.Fatalf("Decode = %v, want ErrMalformed", err)
	}
	if d := after.TotalAlloc - before.TotalAlloc; d > 64<<10 {
		t.Fatalf("decoding 13 bytes allocated %d bytes", d)
	}
}

// A column whose row count times its width overflows must be refused as
// such, not reach make() (which would panic or, for some counts, allocate).
func TestDecodeTableRowCountOverflow(t *testing.T) {
	for _, c := range []struct {
		typ   ColumnType
		rows  int64
		bytes int
	}{{TypeFloat, 1<<61 + 1, 8}, {TypeSymbol, 1<<62 + 1, 4}} {
		var buf bytes.Buffer
		enc := msgpack.NewEncoder(&buf)
		_ = enc.EncodeArrayLen(2)
		_ = enc.EncodeInt(TableVersion)
		_ = enc.EncodeArrayLen(1)
		_ = enc.EncodeArrayLen(4)
		_ = enc.EncodeString("x")
		_ = enc.EncodeUint8(uint8(c.typ))
		_ = enc.EncodeInt(c.rows)
		if c.typ == TypeSymbol {
			_ = enc.EncodeArrayLen(2)
			dict := make([]string, 1<<16+1) // width 4
			for i := range dict {
				dict[i] = "s"
			}
			_ = enc.Encode(dict)
		}
		_ = enc.EncodeBytes(make([]byte, c.bytes))
		var tb Table
		err := DecodeLimited(buf.Bytes(), &tb, PayloadLimits)
		if !errors.Is(err, ErrMalformed) || strings.Contains(err.Error(), "panic") {
			t.Errorf("%s column of %d rows: %v, want ErrMalformed without a panic", c.typ, c.rows, err)
		}
	}
}

// A 1 MB getMeta request nested 200,000 objects deep used to cost the GW
// 512 MiB of stack; it is refused by the pre-scan at depth 33.
func TestDecodeRequestDeepJSON(t *testing.T) {
	n := (1 << 20) / 6
	body := []byte(`{"header":{"api":"getMeta"},"payload":` + strings.Repeat(`{"a":`, n) + "1" + strings.Repeat("}", n) + "}")
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err := DecodeRequest(nil, body)
	runtime.ReadMemStats(&after)
	if !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), "nested deeper than 32") {
		t.Fatalf("DecodeRequest = %v, want ErrMalformed: nested deeper than 32", err)
	}
	if d := after.TotalAlloc - before.TotalAlloc; d > 64<<10 {
		t.Fatalf("refusing a deep request allocated %d bytes", d)
	}
	if after.StackInuse > before.StackInuse+1<<20 {
		t.Fatalf("stack grew from %d to %d bytes", before.StackInuse, after.StackInuse)
	}
}

// A chunk that claims a transfer of 2^29 chunks and 1 GiB allocates for the
// bytes it brings, not for the claims; claims above the limit are refused.
func TestReassemblerClaimsAllocateNothing(t *testing.T) {
	chunk := func(index, count, total string) nats.Header {
		h := nats.Header{}
		h.Set(HdrChunkStream, "s")
		h.Set(HdrChunkIndex, index)
		h.Set(HdrChunkCount, count)
		h.Set(HdrChunkTotal, total)
		return h
	}
	r := NewReassembler(1 << 30)
	for _, h := range []nats.Header{chunk("0", "536870912", "1073741824"), chunk("536870911", "536870912", "1073741824")} {
		var err error
		if d := allocated(func() { _, err = r.Add(h, []byte("x")) }); d > 64<<10 {
			t.Fatalf("one chunk of a claimed 1 GiB transfer allocated %d bytes", d)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if r.Missing() != 536870910 {
		t.Fatalf("missing %d", r.Missing())
	}
	for _, h := range []nats.Header{chunk("0", "4294967295", "4294967295"), chunk("0", "3", "2"), chunk("5", "2", "10")} {
		if _, err := NewReassembler(1<<30).Add(h, []byte("x")); !errors.Is(err, ErrTooLarge) && !errors.Is(err, ErrChunk) {
			t.Errorf("%v: %v, want ErrTooLarge or ErrChunk", h, err)
		}
	}
}

// An answer may hold more values than any internal message (a string column
// of more rows than MaxElements): the response envelope is decoded with PayloadLimits, in
// both encodings.
func TestDecodeResponseLargeAnswer(t *testing.T) {
	const rows = MaxElements + 100_000
	tb := NewTable([]ColumnSpec{{Name: "s", Type: TypeString}})
	tb.Columns[0].Strings = make([]string, rows)
	for i := range tb.Columns[0].Strings {
		tb.Columns[0].Strings[i] = "x"
	}
	payload, err := Encode(tb)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []Content{ContentMsgpack, ContentJSON} {
		p := payload
		if c == ContentJSON {
			// Each JSON row is two values ('{' and ','): half as many rows do.
			half := tb
			half.Columns = []Column{{Name: "s", Type: TypeString, Strings: tb.Columns[0].Strings[:MaxElements/2+1000]}}
			if p, err = half.MarshalJSON(); err != nil {
				t.Fatal(err)
			}
		}
		b, err := newResponse("r", Request{Header: RequestHeader{API: "getData"}, Content: c}, StatusOK, p).Encode()
		if err != nil {
			t.Fatal(err)
		}
		resp, err := DecodeResponse(nil, b)
		if err != nil {
			t.Fatalf("%s: %v", c, err)
		}
		if len(resp.Payload) != len(p) {
			t.Fatalf("%s: payload of %d bytes, want %d", c, len(resp.Payload), len(p))
		}
	}
	// A request of as many values is refused: requests are internal-sized.
	req, _ := Request{Header: RequestHeader{API: "getData"}, Payload: payload}.Encode()
	if _, err := DecodeRequest(nil, req); !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), "more than") {
		t.Fatalf("request of %d values: %v, want ErrMalformed: more than %d values", rows, err, MaxElements)
	}
}

// sg's slices of structs grow as elements arrive: 65,536 one-byte elements
// in place of table infos cost a few KiB, not 65,536 structs.
func TestStructSlicesGrowAsElementsArrive(t *testing.T) {
	for _, elem := range []byte{0xc0, 0x80, 0x90, 0x01} {
		var buf bytes.Buffer
		enc := msgpack.NewEncoder(&buf)
		_ = enc.EncodeMapLen(1)
		_ = enc.EncodeString("tables")
		_ = enc.EncodeArrayLen(1 << 16)
		buf.Write(bytes.Repeat([]byte{elem}, 1<<16))
		data := buf.Bytes()
		var reg DAPRegistration
		var err error
		if d := allocated(func() { err = Decode(data, &reg) }); d > 64<<10 {
			t.Errorf("element 0x%02x: decoding allocated %d bytes", elem, d)
		}
		if !errors.Is(err, ErrMalformed) {
			t.Errorf("element 0x%02x: %v, want ErrMalformed", elem, err)
		}
	}
	// Valid slices still decode, empty and full.
	for _, tables := range [][]TableInfo{nil, {}, {{Name: "a", Kind: TablePartitioned}, {Name: "b", Kind: TableSharded,
		Columns: []ColumnSpec{{Name: "x", Type: TypeInt}}}}} {
		r := envRegistration()
		r.Tables = tables
		b, _ := Encode(&r)
		got, err := DecodeValid[DAPRegistration](b)
		if err != nil || len(got.Tables) != len(tables) || (len(tables) == 2 && got.Tables[1].Columns[0].Name != "x") {
			t.Errorf("tables %v: got %v, %v", tables, got.Tables, err)
		}
	}
}
