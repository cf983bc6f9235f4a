package messages

// PingArgs are the arguments of the ping API: which label sets to reach. The
// GW checks them in the client's encoding and hands them to the RC as sent
// (RCSubmission.Args or ArgsJSON), which decodes them the same way (Args.Ping).
//
// JSON: {"labels": {"region": ["eu","us"], "desk": "fx"}} (a single value may
// be a plain string, as in getData); msgpack: {"labels": {"region": ["eu"]}}.

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// PingArgs: see the top of the file. An empty selector pings every label set.
type PingArgs struct {
	Labels LabelSelector `msgpack:"labels,omitempty" json:"labels,omitempty"`
}

// Validate checks the selector.
func (a *PingArgs) Validate() error {
	for key, vals := range a.Labels {
		if key == "" {
			return invalid("ping arguments", "empty label key")
		}
		if len(vals) == 0 {
			return invalid("ping arguments", "label %q has no values", key)
		}
	}
	return nil
}

// DecodePingArgsJSON decodes ping arguments from JSON; an empty body or null
// is no selector. It never panics.
func DecodePingArgsJSON(b []byte) (PingArgs, error) {
	a, _, err := DecodePingArgsJSONScope(b)
	return a, err
}

// DecodePingArgsJSONScope is DecodePingArgsJSON that also gives the raw
// "scope" key, as DecodeGetDataArgsJSONScope does.
func DecodePingArgsJSONScope(b []byte) (a PingArgs, sc json.RawMessage, err error) {
	defer func() {
		if r := recover(); r != nil {
			a, sc, err = PingArgs{}, nil, fmt.Errorf("%w: ping arguments: decoder panic: %v", ErrMalformed, r)
		}
	}()
	b = bytes.TrimSpace(b)
	if len(b) == 0 || bytes.Equal(b, []byte("null")) {
		return PingArgs{}, nil, nil
	}
	if err := CheckJSON(b, MessageLimits); err != nil {
		return PingArgs{}, nil, fmt.Errorf("%w: ping arguments: %w", ErrMalformed, err)
	}
	var w struct {
		Labels map[string]json.RawMessage `json:"labels"`
		Scope  json.RawMessage            `json:"scope"`
	}
	if err := json.Unmarshal(b, &w); err != nil {
		// A value of the wrong type still leaves the scope read.
		return PingArgs{}, w.Scope, fmt.Errorf("%w: ping arguments: %v", ErrMalformed, err)
	}
	sc = w.Scope
	if len(w.Labels) > 0 {
		labels, k, ok := labelsFromJSON(w.Labels)
		if !ok {
			return PingArgs{}, sc, fmt.Errorf("%w: ping arguments: label %q: want a string or a list of strings", ErrMalformed, k)
		}
		a.Labels = labels
	}
	return a, sc, nil
}

// DecodePingArgsMsgpack decodes ping arguments from msgpack; an empty body is
// no selector. It never panics.
func DecodePingArgsMsgpack(b []byte) (PingArgs, error) {
	a, _, err := DecodePingArgsMsgpackScope(b)
	return a, err
}

// DecodePingArgsMsgpackScope is DecodePingArgsMsgpack that also gives the raw
// "scope" key, as DecodeGetDataArgsMsgpackScope does. A map, the form sg
// documents, is read in one walk by the wire reader, as the library reads
// it; anything else (nil, or the library's struct as an array) carries no
// scope and is left to the library.
func DecodePingArgsMsgpackScope(b []byte) (a PingArgs, sc []byte, err error) {
	if len(b) == 0 {
		return a, nil, nil
	}
	if !isMsgpackMap(b[0]) {
		if err := Decode(b, &a); err != nil {
			return PingArgs{}, nil, err
		}
		return a, nil, nil
	}
	defer func() {
		if r := recover(); r != nil {
			a, sc, err = PingArgs{}, nil, fmt.Errorf("%w: ping arguments: decoder panic: %v", ErrMalformed, r)
		}
	}()
	sc, err = argsMapScope(b, &a, "ping arguments", func(r *wireReader, k []byte) (bool, error) {
		if string(k) == "labels" {
			return true, r.selector(&a.Labels)
		}
		return false, nil
	})
	if err != nil {
		return PingArgs{}, nil, fmt.Errorf("%w: ping arguments: %w", ErrMalformed, err)
	}
	return a, sc, nil
}
