package messages

import (
	"errors"

	"github.com/vmihailenco/msgpack/v5"
	"github.com/vmihailenco/msgpack/v5/msgpcode"
)

// The library decodes a map where it expects one by first skipping an
// extension's header, then reading the map's header from the extension's
// data, and sizes the map by that header (up to a million entries) before
// it reads one entry: the pre-scan (CheckMsgpack) takes an extension's data
// as opaque bytes, so 7 bytes made it allocate 1.5 MB (FuzzMsgpackArgsScope).
// sg's two map types, the only maps in its messages, refuse an extension
// where they are expected: nothing sg sends puts one there.

// errExtForMap: an extension where a map was expected.
var errExtForMap = errors.New("msgpack: an extension where a map is expected")

// DecodeMsgpack is the library's map decoding of a label set, refusing an
// extension (the library would read a map hidden in its data).
func (l *LabelSet) DecodeMsgpack(d *msgpack.Decoder) error {
	if err := refuseExt(d); err != nil {
		return err
	}
	var m map[string]string
	if err := d.Decode(&m); err != nil {
		return err
	}
	*l = m
	return nil
}

// DecodeMsgpack is LabelSet's for a label selector.
func (s *LabelSelector) DecodeMsgpack(d *msgpack.Decoder) error {
	if err := refuseExt(d); err != nil {
		return err
	}
	var m map[string][]string
	if err := d.Decode(&m); err != nil {
		return err
	}
	*s = m
	return nil
}

// refuseExt refuses an extension as the next value.
func refuseExt(d *msgpack.Decoder) error {
	c, err := d.PeekCode()
	if err != nil {
		return err
	}
	if msgpcode.IsExt(c) {
		return errExtForMap
	}
	return nil
}
