package subjects

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/nats-io/nats-server/v2/server"
)

// templateConsts reads every subject template constant of this package from
// its source: a string constant whose value holds a '.' (a subject, not a
// name or a suffix), leaving out the "T" fmt templates, which sit beside their
// pattern.
func templateConsts(t *testing.T) map[string]string {
	t.Helper()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	fset := token.NewFileSet()
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		af, err := parser.ParseFile(fset, f, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(af, func(n ast.Node) bool {
			vs, ok := n.(*ast.ValueSpec)
			if !ok || len(vs.Values) != len(vs.Names) {
				return true
			}
			for i, v := range vs.Values {
				lit, ok := v.(*ast.BasicLit)
				if !ok || lit.Kind != token.STRING {
					continue
				}
				val, err := strconv.Unquote(lit.Value)
				if err != nil || !strings.Contains(val, ".") || strings.Contains(val, "%s") {
					continue
				}
				out[vs.Names[i].Name] = val
			}
			return true
		})
	}
	return out
}

// TestEveryTemplateHasAFlow: a subject added to this package without saying
// who publishes and subscribes it would get no permission at all, and the
// service using it would meet a permissions violation only at run time.
func TestEveryTemplateHasAFlow(t *testing.T) {
	consts := templateConsts(t)
	if len(consts) < 25 {
		t.Fatalf("found only %d subject templates in the source: %v", len(consts), consts)
	}
	for name, val := range consts {
		i := slices.IndexFunc(Flows, func(f Flow) bool { return f.Name == name })
		if i < 0 {
			t.Errorf("subject template %s (%q) has no Flow in permissions.go", name, val)
			continue
		}
		if Flows[i].Template != val {
			t.Errorf("Flow %s: template %q, the constant is %q", name, Flows[i].Template, val)
		}
	}
	for _, f := range Flows {
		if _, ok := consts[f.Name]; !ok {
			t.Errorf("Flow %s names no subject template constant", f.Name)
		}
		if len(f.Pub) == 0 {
			t.Errorf("Flow %s: nobody publishes it", f.Name)
		}
	}
}

// concrete turns a template into a subject a process would use.
func concrete(s Subjects, tmpl string) string {
	return s.rel(strings.ReplaceAll(tmpl, "*", "x1"))
}

// plays reports whether role r takes part as one of roles (the demo role is
// a DAP and a feed).
func plays(r Role, roles []Role) bool {
	if r == RoleAdmin || slices.Contains(roles, r) {
		return true
	}
	return r == RoleDemo && (slices.Contains(roles, RoleDAP) || slices.Contains(roles, RoleFeed))
}

// TestPermissionsFollowFlows: every role may publish and subscribe exactly
// the flows it takes part in, under any prefix.
func TestPermissionsFollowFlows(t *testing.T) {
	for _, prefix := range []string{"sg", "acme.sg"} {
		s, err := New(prefix)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range Roles {
			p, err := s.Permissions(Grant{Role: r, Name: "n1"})
			if err != nil {
				t.Fatal(err)
			}
			for _, pat := range slices.Concat(p.Publish, p.Subscribe) {
				if !server.IsValidSubject(pat) {
					t.Errorf("%s: %q is not a valid subject", r, pat)
				}
			}
			for _, f := range Flows {
				subj := concrete(s, f.Template)
				if got, want := p.Allows(true, subj), plays(r, f.Pub); got != want {
					t.Errorf("%s %s: publish %s allowed=%v, want %v (Flow %s)", prefix, r, subj, got, want, f.Name)
				}
				if got, want := p.Allows(false, subj), plays(r, f.Sub); got != want {
					t.Errorf("%s %s: subscribe %s allowed=%v, want %v (Flow %s)", prefix, r, subj, got, want, f.Name)
				}
			}
			if r == RoleAdmin {
				continue
			}
			// No role but admin reaches another deployment's subjects.
			other, _ := New("other")
			for _, f := range Flows {
				if subj := concrete(other, f.Template); p.Allows(true, subj) || p.Allows(false, subj) {
					t.Errorf("%s %s: reaches %s of another prefix", prefix, r, subj)
				}
			}
		}
	}
}

func TestClientPermissions(t *testing.T) {
	s := Default()
	p, err := s.Permissions(Grant{Role: RoleClient, Name: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		pub  bool
		subj string
		want bool
	}{
		{true, s.GWAPI(APIGetData), true},
		{true, s.GWCancel(), true},
		{true, s.DAPRegister("d1"), false},
		{true, s.RCAnnounce("rc-1"), false},
		{true, s.AggPartial("agg-1"), false},
		{true, s.RequestLogEntry("gw-1", "r1"), false},
		{true, "_INBOX.bob.x", false}, // no forged answers into another caller's inbox
		{true, "$JS.API.STREAM.DELETE.SG_REQUEST_LOG", false},
		{false, "_INBOX.alice.abc", true},
		{false, "_INBOX.bob.abc", false},
		{false, "_INBOX.>", false},
		{false, s.GWAnswer("gw-1", "r1"), false},
		{false, s.GWAnswerPattern("gw-1"), false},
		{false, ">", false},
	} {
		if got := p.Allows(c.pub, c.subj); got != c.want {
			t.Errorf("client pub=%v %s: allowed=%v, want %v", c.pub, c.subj, got, c.want)
		}
	}
}

// TestGWAnswersOnlyCallers: even a GW that were tricked into answering onto
// a reply subject of the caller's choosing cannot reach an sg subject other
// than its own, a service inbox or the JetStream API of another stream.
func TestGWAnswersOnlyCallers(t *testing.T) {
	s := Default()
	p, err := s.Permissions(Grant{Role: RoleGW, Name: "gw"})
	if err != nil {
		t.Fatal(err)
	}
	for _, subj := range []string{s.DAPLost("d1"), s.DAPPortion("d1"), s.AggPartial("a1"), s.AggExpect("a1"),
		s.RCAnnounce("rc-1"), s.RCCompletion("rc-1"), s.GWAnswer("gw-2", "r1"), s.GWAPI(APIPing),
		InboxPrefix(RoleRC, "rc") + ".x", "$JS.API.STREAM.DELETE." + s.RequestLogStream(),
		"$JS.API.STREAM.PURGE." + s.DAPStateStream(), "$SYS.REQ.SERVER.PING"} {
		if p.Allows(true, subj) {
			t.Errorf("GW may publish on %s", subj)
		}
	}
	for _, subj := range []string{"_INBOX.alice.x1", s.RCSubmit("rc-1"), s.RequestLogEntry("gw-1", "r1")} {
		if !p.Allows(true, subj) {
			t.Errorf("GW may not publish on %s", subj)
		}
	}
}

func TestPerDAPGrant(t *testing.T) {
	s := Default()
	p, err := s.Permissions(Grant{Role: RoleDAP, Name: "dap-eu", ID: "dap-eu"})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		pub  bool
		subj string
		want bool
	}{
		{true, s.DAPRegister("dap-eu"), true},
		{true, s.DAPLost("dap-eu"), true},
		{true, s.DAPRegister("dap-us"), false},
		{true, s.DAPLost("dap-us"), false},
		{true, "sg.state.dap.dap-eu", false}, // the old DAP state subject: nothing publishes there
		{true, s.RCCompletion("rc-1"), true},
		{true, s.AggPartial("agg-1"), true},
		{true, s.Live("trade", "region=eu"), false},
		{false, s.DAPPortion("dap-eu"), true},
		{false, s.DAPCancel("dap-eu"), true},
		{false, s.DAPCredit("dap-eu"), true},
		{false, s.DAPCredit("dap-us"), false},
		{false, s.DAPPortion("dap-us"), false},
		{false, s.DAPPortion("*"), false},
	} {
		if got := p.Allows(c.pub, c.subj); got != c.want {
			t.Errorf("dap-eu pub=%v %s: allowed=%v, want %v", c.pub, c.subj, got, c.want)
		}
	}
	if _, err := s.Permissions(Grant{Role: RoleRC, Name: "rc", ID: "rc-1"}); err == nil {
		t.Error("an rc grant restricted to one id was accepted")
	}
	if _, err := s.Permissions(Grant{Role: RoleDAP, Name: "d", ID: "a.b"}); err == nil {
		t.Error("a DAP id with a dot was accepted")
	}
	if _, err := s.Permissions(Grant{Role: "root", Name: "x"}); err == nil {
		t.Error("an unknown role was accepted")
	}
}

func TestCovers(t *testing.T) {
	for _, c := range []struct {
		a, b string
		want bool
	}{
		{"a.>", "a.b", true}, {"a.>", "a", false}, {"a.*", "a.b", true}, {"a.*", "a.*", true},
		{"a.*", "a.>", false}, {"a.b", "a.*", false}, {"a.*.c", "a.b.c", true}, {">", "a.b", true},
		{"a.*", "a.b.c", false}, {"a.b.c", "a.b", false},
	} {
		if got := Covers(c.a, c.b); got != c.want {
			t.Errorf("Covers(%q, %q) = %v, want %v", c.a, c.b, got, c.want)
		}
	}
}

// TestRCForwardsToPrimary: a secondary RC forwards its DAPs' completions and
// refusals of relayed portions to the primary RC's inbox, which therefore an
// RC credential may publish on; it subscribes to no other RC's inbox.
func TestRCForwardsToPrimary(t *testing.T) {
	s := Default()
	p, err := s.Permissions(Grant{Role: RoleRC, Name: "rc-2"})
	if err != nil {
		t.Fatal(err)
	}
	for _, subj := range []string{s.RCCompletion("rc-1"), s.RCRefused("rc-1"), s.RCSecondaryStatus("rc-1")} {
		if !p.Allows(true, subj) {
			t.Errorf("an RC may not publish on %s", subj)
		}
	}
	if p.Allows(true, s.RCSubmit("rc-1")) {
		t.Errorf("an RC may publish on %s", s.RCSubmit("rc-1"))
	}
}
