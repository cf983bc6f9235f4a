package rc

import (
	"strconv"

	"github.com/sg-project/sg/messages"
	"github.com/sg-project/sg/services/rc/core"
)

// The core numbers a request's portions (uint64, core.PortionRef.ID); the
// wire names them by that number in decimal (messages.PortionRef.PortionID,
// the Sg-Portion-Id header). These are the shell's only conversions between
// the two.

// wirePortionID is portion id as the wire names it.
func wirePortionID(id uint64) string { return strconv.FormatUint(id, 10) }

// corePortionID is the core's number of a portion the wire names; an error
// for a name this RC never issued.
func corePortionID(s string) (uint64, error) { return strconv.ParseUint(s, 10, 64) }

// wireRef is a core portion reference as the wire names it.
func wireRef(p core.PortionRef) messages.PortionRef {
	return messages.PortionRef{PortionID: wirePortionID(p.ID), Attempt: uint32(p.Attempt)}
}
