package messages

// Args: an API's arguments as they travel through sg, in the encoding the
// caller sent them (issue 10: "arguments decoded once per service and never
// re-encoded by the GW"). A msgpack caller's bytes go in the messages' Args
// field, as before; a JSON caller's bytes go, as sent, in ArgsJSON
// (msgpack key "argsj", a bin): msgpack.RawMessage is written verbatim, so
// JSON cannot go in Args. Exactly one of the two is set (neither: no
// arguments, as for getMeta). The services downstream decode them with the
// decoder the GW checked them with (DecodeGetDataArgsJSON, ...), which bounds
// hostile bytes as the GW does (CheckJSON within MessageLimits).
//
// Versions: RCSubmission, PortionDispatch and AggExpectation carrying ArgsJSON
// name ArgsJSONVersion (2), so a reader that predates the field refuses them
// (ErrVersion) rather than running the request without its arguments; without
// it they stay at version 1 (RCVersion, PortionVersion), so what an older
// writer sent (a request log entry written before an upgrade) and what a
// current one sends for a msgpack caller read alike everywhere. The messages
// that embed them (LogEntry, PeerPortion) keep their own version: their
// validation checks the embedded message's.

import "github.com/vmihailenco/msgpack/v5"

// ArgsJSONVersion is the version of an RCSubmission, PortionDispatch or
// AggExpectation that carries JSON arguments (ArgsJSON): one above RCVersion
// and PortionVersion, which the same messages name without them.
const ArgsJSONVersion = 2

// Args are an API's arguments in the encoding they came in: see the top of
// the file.
type Args struct {
	Msgpack msgpack.RawMessage // a msgpack caller's bytes, or arguments sg made (the RC's sql plan)
	JSON    []byte             // a JSON caller's bytes, as sent
}

// MsgpackArgs are arguments in msgpack.
func MsgpackArgs(b []byte) Args { return Args{Msgpack: b} }

// JSONArgs are arguments in JSON.
func JSONArgs(b []byte) Args { return Args{JSON: b} }

// Content is the arguments' encoding: JSON when JSON bytes are set, else
// msgpack (no arguments read as an empty msgpack body).
func (a Args) Content() Content {
	if len(a.JSON) > 0 {
		return ContentJSON
	}
	return ContentMsgpack
}

// Bytes are the arguments' bytes in their encoding (Content).
func (a Args) Bytes() []byte {
	if len(a.JSON) > 0 {
		return a.JSON
	}
	return a.Msgpack
}

// GetData decodes getData arguments (not validated: Validate them).
func (a Args) GetData() (GetDataArgs, error) {
	if len(a.JSON) > 0 {
		return DecodeGetDataArgsJSON(a.JSON)
	}
	return DecodeGetDataArgsMsgpack(a.Msgpack)
}

// Ping decodes ping arguments; none is no selector.
func (a Args) Ping() (PingArgs, error) {
	if len(a.JSON) > 0 {
		return DecodePingArgsJSON(a.JSON)
	}
	return DecodePingArgsMsgpack(a.Msgpack)
}

// SQL decodes and validates sql arguments.
func (a Args) SQL() (SQLArgs, error) { return DecodeSQLArgs(a.Content(), a.Bytes()) }

// version is the version of a message carrying a, whose version without JSON
// arguments is base.
func (a Args) version(base uint8) uint8 {
	if len(a.JSON) > 0 {
		return ArgsJSONVersion
	}
	return base
}

// checkArgs checks a message's version against its arguments: at most
// ArgsJSONVersion, JSON arguments only from it on, and never both encodings.
func checkArgs(typ string, v uint8, a Args) error {
	if err := checkVersion(typ, v, ArgsJSONVersion); err != nil {
		return err
	}
	switch {
	case len(a.JSON) > 0 && len(a.Msgpack) > 0:
		return invalid(typ, "arguments in both msgpack (args) and JSON (argsj)")
	case len(a.JSON) > 0 && v < ArgsJSONVersion:
		return invalid(typ, "JSON arguments (argsj) in a v%d message: they come with v%d", v, ArgsJSONVersion)
	}
	return nil
}

// Arguments are the submission's arguments.
func (m *RCSubmission) Arguments() Args { return Args{Msgpack: m.Args, JSON: m.ArgsJSON} }

// SetArguments sets the submission's arguments and the version that carries them.
func (m *RCSubmission) SetArguments(a Args) {
	m.Args, m.ArgsJSON, m.V = a.Msgpack, a.JSON, a.version(RCVersion)
}

// Arguments are the dispatch's arguments.
func (m *PortionDispatch) Arguments() Args { return Args{Msgpack: m.Args, JSON: m.ArgsJSON} }

// SetArguments sets the dispatch's arguments and the version that carries them.
func (m *PortionDispatch) SetArguments(a Args) {
	m.Args, m.ArgsJSON, m.V = a.Msgpack, a.JSON, a.version(PortionVersion)
}

// Arguments are the expectation's arguments.
func (m *AggExpectation) Arguments() Args { return Args{Msgpack: m.Args, JSON: m.ArgsJSON} }

// SetArguments sets the expectation's arguments and the version that carries them.
func (m *AggExpectation) SetArguments(a Args) {
	m.Args, m.ArgsJSON, m.V = a.Msgpack, a.JSON, a.version(PortionVersion)
}
