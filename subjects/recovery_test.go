package subjects

import "testing"

func TestRecoverySubjects(t *testing.T) {
	s := Default()
	for _, p := range []pair{
		{"GWHeartbeat", s.GWHeartbeatPattern(), s.GWHeartbeat("gw-1"), "sg.evt.gw.gw-1.heartbeat"},
		{"RequestLogEntry", s.RequestLogEntryPattern(), s.RequestLogEntry("gw-1", "req-9"), "sg.log.req.gw-1.req-9"},
	} {
		if p.built != p.want {
			t.Errorf("%s: built %q, want %q", p.name, p.built, p.want)
		}
		if !matches(p.pattern, p.built) {
			t.Errorf("%s: pattern %q does not match %q", p.name, p.pattern, p.built)
		}
	}
	// The DAP state stream captures every DAP event and nothing of the RCs.
	subj := s.DAPEventStreamSubjects()
	if len(subj) != 1 || !matches(subj[0], s.DAPHeartbeat("d1")) || matches(subj[0], s.RCAnnounce("rc-1")) {
		t.Errorf("DAP state stream subjects %v", subj)
	}
}
