package messages

import (
	"fmt"

	"github.com/vmihailenco/msgpack/v5"
)

// EncodeSizedWith is EncodeSized for a value written by its own hand
// encoder (encode), not by reflection: a DAP's partial (merge.EncodePartial),
// which the reflection encoder cost about 6 allocations on its omitempty
// checks. The bytes are encode's, in a buffer of at least hint bytes.
func EncodeSizedWith(hint int, encode func(enc *msgpack.Encoder) error) ([]byte, error) {
	b, err := encodeInto(hint, encode)
	if err != nil {
		return nil, fmt.Errorf("messages: encode: %w", err)
	}
	return b, nil
}

// DecodeTableCoded decodes the table that b starts with (Table's msgpack
// form), its symbol columns coded as DecodeCoded leaves them, and returns
// the number of bytes it took: for the hand decoder of a message that holds
// tables (merge.DecodePartial), which reads the rest itself. Its bounds are
// DecodeCoded's with lim: the table's own bytes are pre-scanned (a few
// values a column: its payloads are bins, skipped whole) before the table
// decoder reads them, and a panic is an error. Errors wrap ErrMalformed.
func DecodeTableCoded(b []byte, lim Limits) (t Table, n int, err error) {
	defer func() {
		if r := recover(); r != nil {
			t, n, err = Table{}, 0, fmt.Errorf("%w: table: decoder panic: %v", ErrMalformed, r)
		}
	}()
	end, err := scanMsgpack(b, lim)
	if err != nil {
		return Table{}, 0, fmt.Errorf("%w: table: %w", ErrMalformed, err)
	}
	d := decoders.Get().(*decoderState)
	d.rd.reset(b[:end])
	d.rd.coded = true
	d.dec.Reset(&d.rd)
	err = t.DecodeMsgpack(d.dec)
	left := d.rd.Len()
	d.dec.Reset(nil)
	d.rd.reset(nil)
	decoders.Put(d)
	if err == nil && left > 0 {
		err = fmt.Errorf("%d bytes of the table unread", left)
	}
	if err != nil {
		return Table{}, 0, fmt.Errorf("%w: table: %w", ErrMalformed, err)
	}
	return t, end, nil
}
