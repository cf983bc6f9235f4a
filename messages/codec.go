package messages

import (
	"bytes"
	"errors"
	"fmt"
	"sync"

	"github.com/vmihailenco/msgpack/v5"
)

// Sentinel errors of the envelopes and internal messages, wrapped with %w so
// callers can map them to return codes (both map to BAD_REQUEST at the GW).
var (
	// ErrMalformed: the bytes do not decode into the expected message.
	ErrMalformed = errors.New("malformed message")
	// ErrInvalid: the message decodes but a field is missing or out of range.
	ErrInvalid = errors.New("invalid message")
	// ErrVersion: the message has a version this build does not know.
	ErrVersion = errors.New("unsupported message version")
)

// Validator is implemented by every message type of this package: Validate
// checks the version and the fields that the receiver relies on.
type Validator interface {
	Validate() error
}

// Encode encodes v with msgpack, the encoding of every internal message.
func Encode(v any) ([]byte, error) {
	hint := 0
	if h, ok := v.(sizeHinter); ok {
		hint = h.encodedSizeHint()
	}
	return encodeSized(v, hint)
}

// sizeHinter is implemented by messages that carry a large payload: the
// encoder's buffer is sized once instead of doubling up to the payload's size.
type sizeHinter interface{ encodedSizeHint() int }

// WithEncoded calls fn with v encoded as Encode encodes it, in a pooled
// buffer that is valid only during the call: for a publish, which copies
// what it sends into the connection's buffer (nats.go), so that the bytes
// need no copy of their own. It returns fn's error, or the encoding's.
func WithEncoded(v any, fn func(data []byte) error) error {
	we, ok := v.(wireEncoder)
	if h, hinted := v.(sizeHinter); !ok || (hinted && h.encodedSizeHint() > maxPooledBuffer) {
		data, err := Encode(v)
		if err != nil {
			return err
		}
		return fn(data)
	}
	w := wireWriters.Get().(*wireWriter)
	w.b = w.b[:0]
	we.appendWire(w)
	err := fn(w.b)
	if cap(w.b) <= maxPooledBuffer {
		wireWriters.Put(w)
	}
	return err
}

// EncodeSized is Encode for a value of about hint bytes (a merged table:
// the sum of its partials), encoded into one buffer of that size.
func EncodeSized(v any, hint int) ([]byte, error) { return encodeSized(v, hint) }

// encodeSized is Encode into a buffer of at least hint bytes.
func encodeSized(v any, hint int) ([]byte, error) {
	if we, ok := v.(wireEncoder); ok {
		return encodeWire(we, hint), nil
	}
	b, err := encodeInto(hint, func(enc *msgpack.Encoder) error { return enc.Encode(v) })
	if err != nil {
		return nil, fmt.Errorf("messages: encode %T: %w", v, err)
	}
	return b, nil
}

// encodeInto returns what encode writes, into a buffer of at least hint
// bytes: a fresh one above maxPooledBuffer, else a pooled encoder's (its
// bytes copied out, unless it grew past maxPooledBuffer: then they are
// kept and the pool does not hold it).
func encodeInto(hint int, encode func(enc *msgpack.Encoder) error) ([]byte, error) {
	if hint > maxPooledBuffer {
		buf := bytes.NewBuffer(make([]byte, 0, hint))
		enc := msgpack.GetEncoder()
		enc.Reset(buf)
		err := encode(enc)
		msgpack.PutEncoder(enc)
		if err != nil {
			return nil, err
		}
		return buf.Bytes(), nil
	}
	e := encoders.Get().(*encoderState)
	e.buf.Reset()
	if err := encode(e.enc); err != nil {
		encoders.Put(e)
		return nil, err
	}
	if e.buf.Cap() > maxPooledBuffer {
		b := e.buf.Bytes()
		e.buf = bytes.Buffer{}
		e.enc.Reset(&e.buf)
		encoders.Put(e)
		return b, nil
	}
	b := bytes.Clone(e.buf.Bytes())
	encoders.Put(e)
	return b, nil
}

// Every hop encodes and decodes several messages per request: the encoder,
// its buffer, the decoder and its reader are reused instead of allocated and
// grown each time (msgpack.Marshal grows a fresh buffer from zero).
type encoderState struct {
	buf bytes.Buffer
	enc *msgpack.Encoder
}

type decoderState struct {
	rd  sliceReader
	dec *msgpack.Decoder
}

// maxPooledBuffer: a buffer that grew past this is not kept in the pool.
const maxPooledBuffer = 64 << 10

// envelopeSlack is room for a message's fields around its payload (a size hint).
const envelopeSlack = 4 << 10

var (
	encoders = sync.Pool{New: func() any {
		e := &encoderState{}
		e.enc = msgpack.NewEncoder(&e.buf)
		return e
	}}
	decoders = sync.Pool{New: func() any {
		return &decoderState{dec: msgpack.NewDecoder(nil)}
	}}
)

// Decode decodes msgpack data into v. It never panics on bytes from the
// network, and never lets the library allocate from a length the bytes do
// not back: CheckMsgpack runs first, with MessageLimits (or the type's own,
// see limiter); a type with a hand decoder (wire.go) checks the same limits
// itself as it reads, without the pre-scan. A panic inside the third-party decoder becomes ErrMalformed,
// so one bad message cannot stop a service. Trailing bytes are an error,
// because a truncated or concatenated message must not pass as a valid one.
func Decode(data []byte, v any) error {
	lim := MessageLimits
	if l, ok := v.(limiter); ok {
		lim = l.decodeLimits()
	}
	return DecodeLimited(data, v, lim)
}

// limiter is implemented by the messages that may be as large as an answer
// (partial results, live updates): they are decoded with their own limits.
type limiter interface{ decodeLimits() Limits }

// DecodeLimited is Decode with explicit limits, for payloads that are not
// internal messages (answers, partials, local snapshots).
func DecodeLimited(data []byte, v any, lim Limits) (err error) {
	return decodeLimited(data, v, lim, sliceReader{})
}

// DecodeCoded is DecodeLimited leaving the symbol columns of v's tables
// dictionary-coded (Column.Coded), their dictionaries checked for repeated
// values: for a receiver that merges and re-encodes them (the Agg), which
// then never makes a string per row.
func DecodeCoded(data []byte, v any, lim Limits) error {
	return decodeLimited(data, v, lim, sliceReader{coded: true})
}

// decodeLimited is DecodeLimited in mode's alias and coded modes (sliceReader).
func decodeLimited(data []byte, v any, lim Limits, mode sliceReader) error {
	if wd, ok := v.(wireDecoder); ok {
		// A hand decoder keeps the pre-scan's bounds itself (wire.go): one pass.
		return decodeWireGuarded(data, lim, mode.alias, v, wd.decodeWire)
	}
	return guardDecode(data, v, func() error { return decodeReflect(data, v, lim, mode) })
}

// decodeReflect is decodeLimited's path for a type without a hand decoder:
// the pre-scan, then the library's decoder.
func decodeReflect(data []byte, v any, lim Limits, mode sliceReader) error {
	if err := CheckMsgpack(data, lim); err != nil {
		return fmt.Errorf("%w: %T: %w", ErrMalformed, v, err)
	}
	// A decoder that panicked is not put back (guardDecode's recover
	// returns before the Put): its state is unknown.
	d := decoders.Get().(*decoderState)
	d.rd.reset(data)
	d.rd.alias, d.rd.coded = mode.alias, mode.coded
	d.dec.Reset(&d.rd)
	err := d.dec.Decode(v)
	n := d.rd.Len()
	d.dec.Reset(nil)
	d.rd.reset(nil)
	decoders.Put(d)
	if err != nil {
		return fmt.Errorf("%w: %T: %v", ErrMalformed, v, err)
	}
	if n > 0 {
		return fmt.Errorf("%w: %T: %d trailing bytes", ErrMalformed, v, n)
	}
	return nil
}

// decodeWireGuarded is decodeLimited's path for a hand decoder (decode,
// the message's decodeWire; alias: RawMsgpack fields share data). typ is
// the message, or a nil pointer of its type (DecodeAggExpectation: so that
// its message is not moved to the heap through an interface), for errors.
func decodeWireGuarded(data []byte, lim Limits, alias bool, typ any, decode func(*wireReader) error) error {
	return guardDecode(data, typ, func() error {
		if err := decodeWireWith(data, lim, alias, decode); err != nil {
			return fmt.Errorf("%w: %T: %w", ErrMalformed, typ, err)
		}
		return nil
	})
}

// guardDecode runs decode on data, a message of typ's type: an empty body
// is ErrMalformed, and so is a panic (in the third-party decoder, or a bug
// in a hand one), so that one bad message cannot stop a service.
func guardDecode(data []byte, typ any, decode func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%w: %T: decoder panic: %v", ErrMalformed, typ, r)
		}
	}()
	if len(data) == 0 {
		return fmt.Errorf("%w: %T: empty body", ErrMalformed, typ)
	}
	return decode()
}

// DecodeValid decodes msgpack data into a T and validates it: the one call a
// receiver makes for an internal message, e.g.
//
//	reg, err := messages.DecodeValid[messages.DAPRegistration](msg.Data)
func DecodeValid[T any, P interface {
	*T
	Validator
}](data []byte) (T, error) {
	var v T
	if err := Decode(data, &v); err != nil {
		return v, err
	}
	if err := P(&v).Validate(); err != nil {
		var zero T
		return zero, err
	}
	return v, nil
}

// DecodeValidAliasing is DecodeValid for a receiver that owns data and never
// changes it (a NATS message's, a reassembled transfer's): the RawMsgpack
// and msgpack.RawMessage fields (a partial result's table, an expectation's
// arguments) share data instead of copying it, which for a large partial is
// a copy of it less.
func DecodeValidAliasing[T any, P interface {
	*T
	Validator
}](data []byte) (T, error) {
	var v T
	lim := MessageLimits
	if l, ok := any(&v).(limiter); ok {
		lim = l.decodeLimits()
	}
	if err := decodeLimited(data, &v, lim, sliceReader{alias: true}); err != nil {
		return v, err
	}
	if err := P(&v).Validate(); err != nil {
		var zero T
		return zero, err
	}
	return v, nil
}

// DecodeAggExpectation is DecodeValidAliasing[AggExpectation], and
// DecodePartialResult DecodeValidAliasing[PartialResult], for the Agg's
// path: the same decoding, errors and validation, with the hand decoder
// called directly, not through an interface, so that the message is not
// moved to the heap on its way (an allocation per message).
func DecodeAggExpectation(data []byte) (AggExpectation, error) {
	var v AggExpectation
	if err := decodeWireGuarded(data, MessageLimits, true, (*AggExpectation)(nil), v.decodeWire); err != nil {
		return AggExpectation{}, err
	}
	if err := v.Validate(); err != nil {
		return AggExpectation{}, err
	}
	return v, nil
}

// DecodePartialResult: see DecodeAggExpectation.
func DecodePartialResult(data []byte) (PartialResult, error) {
	var v PartialResult
	if err := decodeWireGuarded(data, v.decodeLimits(), true, (*PartialResult)(nil), v.decodeWire); err != nil {
		return PartialResult{}, err
	}
	if err := v.Validate(); err != nil {
		return PartialResult{}, err
	}
	return v, nil
}

// checkVersion checks the V field of an internal message: 0 means the sender
// forgot it (or sent something else entirely), above max a newer sender.
func checkVersion(typ string, v, max uint8) error {
	switch {
	case v == 0:
		return fmt.Errorf("%w: %s: missing version (v)", ErrInvalid, typ)
	case v > max:
		return fmt.Errorf("%w: %s v%d, this build knows up to v%d", ErrVersion, typ, v, max)
	}
	return nil
}

func invalid(typ, format string, args ...any) error {
	return fmt.Errorf("%w: %s: %s", ErrInvalid, typ, fmt.Sprintf(format, args...))
}
