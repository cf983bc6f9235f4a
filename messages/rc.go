package messages

// RC events for GWs: the announcement. Seed (scope and
// assemblies): "RCs configured with an assembly are considered assembly RCs
// ... RCs without an assembly label, or whose assembly name is empty ("")
// are considered global RCs."

import "github.com/vmihailenco/msgpack/v5"

// RCVersion is the version of the RC event messages.
const RCVersion = 1

// RCAnnouncement tells GWs that an RC exists, which assembly it serves and
// how loaded it is, so a GW can pick one by scope. It is sent on start, on a
// GW's request and whenever the assembly or draining state changes.
type RCAnnouncement struct {
	V           uint8  `msgpack:"v"`
	RCID        string `msgpack:"rc"`
	Assembly    string `msgpack:"asm,omitempty"` // "" = global RC
	Addr        string `msgpack:"addr,omitempty"`
	Outstanding int    `msgpack:"out"`                // requests in progress
	Queued      int    `msgpack:"queued"`             // portions in its queue
	DAPs        int    `msgpack:"daps"`               // DAPs registered with it
	Draining    bool   `msgpack:"draining,omitempty"` // shutting down: send it nothing new
	StartedAt   int64  `msgpack:"started"`            // unix nanoseconds: a new value means a restart
	// Labels are the RC's metadata labels (seed: "An RC can be labelled as
	// belonging to an assembly using ... metadata labels"); a GW told the
	// assembly key (SG_ASSEMBLY_KEY) reads the assembly from them.
	Labels LabelSet `msgpack:"labels,omitempty"`
	// Warming: the RC's fleet view is not warm yet (services/rc/warm.go): it
	// would only hold what it gets. It announces again once warm. Absent (an
	// RC that predates it): warm.
	Warming bool `msgpack:"warming,omitempty"`
}

// AssemblyFor is the RC's assembly as a GW configured with the assembly key
// sees it: the value of the label key when key is set, else Assembly, the
// RC's own name for it (KXI_ASSEMBLY_NAME). An assembly is a subject token:
// a label value that is not one is an error.
func (m *RCAnnouncement) AssemblyFor(key string) (string, error) {
	if key == "" {
		return m.Assembly, nil
	}
	a := m.Labels[key]
	if err := validateOptionalID("RC announcement", "assembly label "+key, a); err != nil {
		return "", err
	}
	return a, nil
}

// Global reports whether the RC serves requests without an assembly scope.
func (m *RCAnnouncement) Global() bool { return m.Assembly == "" }

// Validate checks the announcement.
func (m *RCAnnouncement) Validate() error {
	const typ = "RC announcement"
	if err := checkVersion(typ, m.V, RCVersion); err != nil {
		return err
	}
	if err := validateID(typ, "RC id", m.RCID); err != nil {
		return err
	}
	if err := validateOptionalID(typ, "assembly", m.Assembly); err != nil {
		return err
	}
	if err := validateText(typ, "addr", m.Addr, maxAddrLen); err != nil {
		return err
	}
	if err := validateLabels(typ, m.Labels); err != nil {
		return err
	}
	if m.Outstanding < 0 || m.Queued < 0 || m.DAPs < 0 {
		return invalid(typ, "negative load (outstanding %d, queued %d, daps %d)", m.Outstanding, m.Queued, m.DAPs)
	}
	return nil
}

// RCSubmission is a request that a GW hands to an RC: the client's request
// with its arguments as the caller sent them (Args for a msgpack caller,
// ArgsJSON for a JSON caller: args.go), plus what the GW decided (id,
// deadline, where the answer goes).
type RCSubmission struct {
	V          uint8              `msgpack:"v"`
	RequestID  string             `msgpack:"req"`
	GWID       string             `msgpack:"gw"`
	Header     RequestHeader      `msgpack:"header"`
	Args       msgpack.RawMessage `msgpack:"args,omitempty"`   // the API's arguments, msgpack
	ArgsJSON   []byte             `msgpack:"argsj,omitempty"`  // or in JSON, as a JSON caller sent them (ArgsJSONVersion)
	ReplyTo    string             `msgpack:"reply"`            // subjects.GWAnswer(gw, request)
	Content    Content            `msgpack:"content"`          // encoding the client wants the answer in
	Deadline   int64              `msgpack:"deadline"`         // unix nanoseconds
	ReceivedAt int64              `msgpack:"rcvd"`             // unix nanoseconds, at the GW
	Stream     bool               `msgpack:"stream,omitempty"` // the caller reads the answer as a stream of frames (AggExpectation.Stream)
	AnswerID   string             `msgpack:"aid,omitempty"`    // the id the answer's envelope names (AggExpectation.AnswerID)
	// StreamStart: the GW sends start signals for the answer's stream
	// (AggExpectation.StreamStart); an older GW leaves it out.
	StreamStart bool `msgpack:"sstart,omitempty"`
}

// Validate checks the submission.
func (m *RCSubmission) Validate() error {
	const typ = "RC submission"
	if err := checkArgs(typ, m.V, m.Arguments()); err != nil {
		return err
	}
	if err := validateID(typ, "request id", m.RequestID); err != nil {
		return err
	}
	if err := validateID(typ, "GW id", m.GWID); err != nil {
		return err
	}
	if err := m.Header.Validate(); err != nil {
		return err
	}
	if m.ReplyTo == "" || len(m.ReplyTo) > maxReplyLen {
		return invalid(typ, "reply subject must be 1..%d bytes", maxReplyLen)
	}
	if m.Content != ContentMsgpack && m.Content != ContentJSON {
		return invalid(typ, "content %q: want msgpack or json", truncate(string(m.Content), 16))
	}
	if m.Deadline <= 0 {
		return invalid(typ, "deadline %d: want positive unix nanoseconds", m.Deadline)
	}
	return validateOptionalID(typ, "answer id", m.AnswerID)
}
