package subjects

import "testing"

func TestLiveSubjects(t *testing.T) {
	s, _ := New("acme.sg")
	subj := s.Live("trade", "region=eu")
	if subj != "acme.sg.live.trade.region=eu" || s.LivePattern() != "acme.sg.live.*.*" ||
		s.LiveLabelSetPattern("region=eu") != "acme.sg.live.*.region=eu" || s.LiveStream() != "ACME_SG_LIVE" {
		t.Fatalf("%s %s %s %s", subj, s.LivePattern(), s.LiveLabelSetPattern("region=eu"), s.LiveStream())
	}
	table, key, ok := s.ParseLive(subj)
	if !ok || table != "trade" || key != "region=eu" {
		t.Fatalf("parse %q: %q %q %v", subj, table, key, ok)
	}
	for _, bad := range []string{"acme.sg.live.trade", "sg.live.trade.region=eu", "acme.sg.live.trade.a.b", "acme.sg.live..x"} {
		if _, _, ok := s.ParseLive(bad); ok {
			t.Errorf("%q parsed", bad)
		}
	}
}
