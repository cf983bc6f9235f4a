package subjects

import "testing"

func TestLiveSubjects(t *testing.T) {
	s, _ := New("acme.sg")
	subj := s.Live("trade", "region=eu")
	if subj != "acme.sg.live.trade.region=eu" || s.LivePattern() != "acme.sg.live.*.*" ||
		s.LiveLabelSetPattern("region=eu") != "acme.sg.live.*.region=eu" || s.LiveStream() != "ACME_SG_LIVE" {
		t.Fatalf("%s %s %s %s", subj, s.LivePattern(), s.LiveLabelSetPattern("region=eu"), s.LiveStream())
	}
}
