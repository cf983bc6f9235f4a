package subjects

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/nats-io/nats-server/v2/server"
)

// matches reports whether a literal subject matches a NATS pattern.
func matches(pattern, subject string) bool {
	p := strings.Split(pattern, ".")
	t := strings.Split(subject, ".")
	for i, tok := range p {
		if tok == ">" {
			return len(t) > i
		}
		if i >= len(t) || (tok != "*" && tok != t[i]) {
			return false
		}
	}
	return len(p) == len(t)
}

type pair struct {
	name, pattern, built, want string
}

func pairs(s Subjects) []pair {
	return []pair{
		{"GWAPI", s.GWAPIPattern(), s.GWAPI(APIGetData), "sg.api.getData"},
		{"GWAnswer", s.GWAnswerPattern("gw-1"), s.GWAnswer("gw-1", "req-9"), "sg.gw.gw-1.answer.req-9"},
		{"RCAnnounce", s.RCAnnouncePattern(), s.RCAnnounce("rc-1"), "sg.evt.rc.rc-1.announce"},
		{"RCSubmit", s.rel(RCSubmit), s.RCSubmit("rc-1"), "sg.rc.rc-1.submit"},
		{"RCCompletion", s.rel(RCCompletion), s.RCCompletion("rc-1"), "sg.rc.rc-1.completion"},
		{"RCSecondaryDispatch", s.rel(RCSecondaryDispatch), s.RCSecondaryDispatch("rc-2"), "sg.rc.rc-2.secondary.dispatch"},
		{"RCSecondaryQuery", s.rel(RCSecondaryQuery), s.RCSecondaryQuery("rc-2"), "sg.rc.rc-2.secondary.query"},
		{"RCSecondaryStatus", s.rel(RCSecondaryStatus), s.RCSecondaryStatus("rc-1"), "sg.rc.rc-1.secondary.status"},
		{"DAPRegister", s.rel(DAPRegister), s.DAPRegister("dap-eu-rdb-0"), "sg.evt.dap.dap-eu-rdb-0.register"},
		{"DAPStatus", s.rel(DAPStatus), s.DAPStatus("dap-1"), "sg.evt.dap.dap-1.status"},
		{"DAPVintage", s.rel(DAPVintage), s.DAPVintage("dap-1"), "sg.evt.dap.dap-1.vintage"},
		{"DAPHeartbeat", s.rel(DAPHeartbeat), s.DAPHeartbeat("dap-1"), "sg.evt.dap.dap-1.heartbeat"},
		{"DAPLost", s.rel(DAPLost), s.DAPLost("dap-1"), "sg.evt.dap.dap-1.lost"},
		{"DAPPortion", s.rel(DAPPortion), s.DAPPortion("dap-1"), "sg.dap.dap-1.portion"},
		{"AggExpect", s.rel(AggExpect), s.AggExpect("agg-1"), "sg.agg.agg-1.expect"},
		{"AggPartial", s.rel(AggPartial), s.AggPartial("agg-1"), "sg.agg.agg-1.partial"},
	}
}

func TestBuildersAndPatterns(t *testing.T) {
	ps := pairs(Default())
	for _, p := range ps {
		if p.built != p.want {
			t.Errorf("%s: built %q, want %q", p.name, p.built, p.want)
		}
		if !server.IsValidPublishSubject(p.built) {
			t.Errorf("%s: %q is not a valid publish subject", p.name, p.built)
		}
		if !server.IsValidSubject(p.pattern) {
			t.Errorf("%s: pattern %q is not a valid subject", p.name, p.pattern)
		}
		if !matches(p.pattern, p.built) {
			t.Errorf("%s: %q does not match its pattern %q", p.name, p.built, p.pattern)
		}
		// No subject may be caught by another family's pattern: a DAP must
		// never receive an Agg's expectation because two trees overlap.
		for _, q := range ps {
			if q.name != p.name && matches(q.pattern, p.built) {
				t.Errorf("%s: %q also matches %s pattern %q", p.name, p.built, q.name, q.pattern)
			}
		}
	}
}

func TestAggregatePatterns(t *testing.T) {
	s := Default()
	for ev, build := range map[string]func(string) string{EventRegister: s.DAPRegister, EventStatus: s.DAPStatus,
		EventVintage: s.DAPVintage, EventHeartbeat: s.DAPHeartbeat, EventLost: s.DAPLost} {
		subj := build("dap-1")
		if !matches(s.DAPEventsPattern(), subj) {
			t.Errorf("%q not matched by DAPEventsPattern", subj)
		}
		id, got, ok := s.ParseDAPEvent(subj)
		if !ok || id != "dap-1" || got != ev {
			t.Errorf("ParseDAPEvent(%q) = %q, %q, %v", subj, id, got, ok)
		}
	}
	for _, subj := range []string{s.RCSubmit("rc-1"), s.RCCompletion("rc-1"), s.RCSecondaryDispatch("rc-1"), s.RCSecondaryQuery("rc-1"), s.RCSecondaryStatus("rc-1")} {
		if !matches(s.RCInbox("rc-1"), subj) || matches(s.RCInbox("rc-2"), subj) {
			t.Errorf("RCInbox mismatch for %q", subj)
		}
	}
	for _, bad := range []string{"sg.evt.dap.x", "sg.evt.dap.x.status.y", "other.evt.dap.x.status", "sg.evt.rc.x.announce"} {
		if _, _, ok := s.ParseDAPEvent(bad); ok {
			t.Errorf("ParseDAPEvent(%q) accepted", bad)
		}
	}
}

func TestPrefixIsolatesDeployments(t *testing.T) {
	a, err := New("acme.sg")
	if err != nil {
		t.Fatal(err)
	}
	b := Default()
	if got := a.DAPPortion("d"); got != "acme.sg.dap.d.portion" {
		t.Errorf("got %q", got)
	}
	for _, p := range pairs(b) {
		if matches(p.pattern, a.DAPPortion("d")) || matches(b.rel(">"), a.GWAPI(APIPing)) {
			t.Errorf("prefix sg pattern %q catches acme.sg traffic", p.pattern)
		}
	}
	if got := a.RequestLogStream(); got != "ACME_SG_REQUEST_LOG" {
		t.Errorf("RequestLogStream = %q", got)
	}
	if got := b.DAPStateStream(); got != "SG_DAP_STATE" {
		t.Errorf("DAPStateStream = %q", got)
	}
	if got := a.ServiceName(ServiceGW); got != "acme-sg-gw" {
		t.Errorf("ServiceName = %q", got)
	}
	microName := regexp.MustCompile(`^[A-Za-z0-9\-_]+$`)
	for _, svc := range []string{ServiceGW, ServiceRC, ServiceDAP, ServiceAgg} {
		if n := a.ServiceName(svc); !microName.MatchString(n) {
			t.Errorf("ServiceName %q is not a valid micro name", n)
		}
	}
	for _, api := range APIs {
		if !microName.MatchString(api) {
			t.Errorf("API %q is not a valid micro endpoint name", api)
		}
	}
}

func TestValidate(t *testing.T) {
	good := []string{"dap-eu-rdb-0", "rc_1", "A1B2", "réseau", "x"}
	for _, id := range good {
		if err := Validate("DAP id", id); err != nil {
			t.Errorf("Validate(%q) = %v", id, err)
		}
	}
	bad := map[string]string{
		"":                                 "empty",
		"a.b":                              "'.'",
		"a*":                               "wildcard",
		"a>":                               "wildcard",
		"a b":                              "whitespace",
		"a\tb":                             "whitespace",
		"a\u00a0b":                         "whitespace",
		"a\x00b":                           "control",
		"\xff":                             "UTF-8",
		strings.Repeat("x", MaxTokenLen+1): "bytes",
	}
	for id, want := range bad {
		err := Validate("DAP id", id)
		if err == nil {
			t.Errorf("Validate(%q) accepted", id)
			continue
		}
		if !errors.Is(err, ErrInvalidToken) {
			t.Errorf("Validate(%q) = %v, not ErrInvalidToken", id, err)
		}
		if !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "DAP id") {
			t.Errorf("Validate(%q) = %q, want mention of %q and the id kind", id, err, want)
		}
	}
}

func TestValidatePrefix(t *testing.T) {
	for _, p := range []string{"sg", "acme.sg", "sg-prod"} {
		if _, err := New(p); err != nil {
			t.Errorf("New(%q) = %v", p, err)
		}
	}
	for _, p := range []string{"", ".", "sg.", ".sg", "a..b", "$SYS", "_INBOX", "sg.*", "sg.>", "s g"} {
		if _, err := New(p); !errors.Is(err, ErrInvalidToken) {
			t.Errorf("New(%q) = %v, want ErrInvalidToken", p, err)
		}
	}
}

// build fills templates exactly as fmt.Sprintf would, for every template and
// for one id, two ids, and ids that themselves look like verbs.
func TestBuildMatchesSprintf(t *testing.T) {
	s := Default()
	tmpls := []string{LiveT, GWHeartbeatT, RequestLogEntryT, GWAPIT, GWAnswerT, RCAnnounceT, RCSubmitT,
		RCCompletionT, RCAggDoneT, RCCancelT, RCPositionT, GWPositionT, RCSecondaryDispatchT, RCSecondaryQueryT,
		RCSecondaryStatusT, DAPRegisterT, DAPStatusT, DAPVintageT, DAPHeartbeatT, DAPLostT, DAPPortionT, DAPCancelT, DAPCreditT,
		AggHeartbeatT, AggCancelT, AggExpectT, AggPartialT, AggStartT, "%s.%s.>"}
	for _, tmpl := range tmpls {
		for _, ids := range [][]string{{"a"}, {"rc-1", "r%s1"}, {"", "x"}} {
			n := strings.Count(tmpl, "%s")
			args := make([]any, n)
			for i := range n {
				args[i] = ids[i%len(ids)]
			}
			strs := make([]string, n)
			for i, a := range args {
				strs[i] = a.(string)
			}
			want := s.prefix + "." + fmt.Sprintf(tmpl, args...)
			if got := s.build(tmpl, strs...); got != want {
				t.Errorf("build(%q, %q) = %q, want %q", tmpl, strs, got, want)
			}
		}
	}
}
