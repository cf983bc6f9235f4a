package gw

import "github.com/sg-project/sg/services/gw/core"

// HoldAnsweredAcks has g's `answered` writes ask for their acknowledgement
// on prefix + the reply subject the GW listens on, so a test sees each one
// before the GW does and passes it on itself. Before Run.
func (g *GW) HoldAnsweredAcks(prefix string) {
	g.divertAck = func(w core.WriteLog, reply string) string {
		if w.Op == "answered" {
			return prefix + reply
		}
		return reply
	}
}
