package messages

// Messages between RCs for requests that span DAPs owned by several RCs.
// Seed: "For requests spanning multiple RCs, a secondary RC may be the first
// to detect the timeout, in which case it notifies the primary RC."
//
// The primary decides placement (it sees every DAP's events); a secondary
// relays what the primary placed on its own DAPs, forwards their completions
// (as PortionCompletion, on the primary's completion subject) and reports its
// status block for the timeout message.

// PeerPortion: primary RC -> secondary RC (subjects.RCSecondaryDispatch),
// one portion to run on a DAP the secondary owns. Dispatch is exactly what
// the DAP will receive, except RCID, which the secondary sets to itself so
// that the completion comes back through it.
type PeerPortion struct {
	V         uint8           `msgpack:"v"`
	PrimaryID string          `msgpack:"primary"`
	DAPID     string          `msgpack:"dap"`
	Table     string          `msgpack:"table,omitempty"`
	Retries   uint32          `msgpack:"retries,omitempty"`
	QueuedAt  int64           `msgpack:"queued,omitempty"`
	Dispatch  PortionDispatch `msgpack:"dispatch"`
}

// Validate checks the relayed portion.
func (m *PeerPortion) Validate() error {
	const typ = "peer portion"
	if err := checkVersion(typ, m.V, PortionVersion); err != nil {
		return err
	}
	if err := validateID(typ, "primary RC id", m.PrimaryID); err != nil {
		return err
	}
	if err := validateID(typ, "DAP id", m.DAPID); err != nil {
		return err
	}
	if err := validateText(typ, "table", m.Table, maxAPILen*4); err != nil {
		return err
	}
	return m.Dispatch.Validate()
}

// PeerStatusBlock: secondary RC -> primary RC (subjects.RCSecondaryStatus),
// the secondary's [rc=...;status="..."] block of the timeout message, sent
// in answer to a SecondaryQuery or unasked when the secondary sees the
// deadline pass first. The block is rendered by the secondary's scheduler
// from its own facts; the primary places it after its own.
type PeerStatusBlock struct {
	V         uint8  `msgpack:"v"`
	RequestID string `msgpack:"req"`
	RCID      string `msgpack:"rc"`
	Block     string `msgpack:"block"`
}

// Validate checks the status block.
func (m *PeerStatusBlock) Validate() error {
	const typ = "peer status block"
	if err := checkVersion(typ, m.V, PortionVersion); err != nil {
		return err
	}
	if err := validateID(typ, "request id", m.RequestID); err != nil {
		return err
	}
	if err := validateID(typ, "RC id", m.RCID); err != nil {
		return err
	}
	if m.Block == "" {
		return invalid(typ, "empty block")
	}
	return validateText(typ, "block", m.Block, maxMessageLen)
}
