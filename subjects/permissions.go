package subjects

import (
	"fmt"
	"slices"
	"strings"
)

// Roles: who a NATS credential speaks for. `sg auth init` makes one
// credential per role; the server enforces what each may publish and
// subscribe to (Permissions), so a leaked client credential cannot pose as a
// DAP, an RC or the Agg, nor read another caller's answers.
type Role string

const (
	RoleClient Role = "client" // a caller: requests on api.>, answers on its own inbox
	RoleGW     Role = "gw"     // a gateway
	RoleRC     Role = "rc"     // a resource coordinator
	RoleDAP    Role = "dap"    // a data access process (any DAP id, or one when the grant names it)
	RoleAgg    Role = "agg"    // an aggregator
	RoleFeed   Role = "feed"   // a writer of the live stream (sg publish, a feed)
	// RoleDemo is RoleDAP and RoleFeed in one: the live demo (sg run, sg live
	// --feed-rate) runs its DAPs and its feed on one connection. Never give it
	// to a production DAP.
	RoleDemo  Role = "demo"
	RoleAdmin Role = "admin" // everything: operators, monitoring, nats CLI
)

// Roles lists every role, in the order of the README table.
var Roles = []Role{RoleClient, RoleGW, RoleRC, RoleDAP, RoleAgg, RoleFeed, RoleDemo, RoleAdmin}

// Valid reports whether r is one of Roles.
func (r Role) Valid() bool { return slices.Contains(Roles, r) }

// Inbox prefixes. A caller's answers arrive on its own inbox below
// CallerInboxRoot (_INBOX.<name>): the GW may publish there and nowhere else
// outside its own subjects, so a reply subject that names an sg subject or a
// service inbox is refused by the server itself. Services keep their inboxes
// (JetStream API replies) below ServiceInboxRoot, out of the GW's reach.
const (
	CallerInboxRoot  = "_INBOX"
	ServiceInboxRoot = "_SG_INBOX"
)

// InboxPrefix is the inbox prefix of the credential called name with role r
// (nats.CustomInboxPrefix): _INBOX.<name> for clients and admins,
// _SG_INBOX.<name> for services. name must be a valid token (Validate).
func InboxPrefix(r Role, name string) string {
	if r == RoleClient || r == RoleAdmin {
		return CallerInboxRoot + "." + name
	}
	return ServiceInboxRoot + "." + name
}

// Flow is one subject family of the templates above: who publishes on it and
// who subscribes to it. Permissions are built from Flows, and a test checks
// that every subject template of this package has its Flow.
type Flow struct {
	Name     string // the template constant's name, e.g. "RCSubmit"
	Template string // the pattern relative to the prefix, e.g. RCSubmit ("rc.*.submit")
	Pub, Sub []Role // the roles that publish it and subscribe to it (admin: always)
	// Owner is the role whose process id the first '*' of Template is: a
	// grant restricted to one id (a per-DAP credential) gets the subject
	// with that id instead of the wildcard.
	Owner Role
}

// Flows lists every subject family with its publishers and subscribers.
var Flows = []Flow{
	{Name: "GWAPI", Template: GWAPI, Pub: []Role{RoleClient}, Sub: []Role{RoleGW}},
	{Name: "GWCancel", Template: GWCancel, Pub: []Role{RoleClient}, Sub: []Role{RoleGW}},
	{Name: "GWJob", Template: GWJob, Pub: []Role{RoleClient}, Sub: []Role{RoleGW}},
	{Name: "GWAnswer", Template: GWAnswer, Pub: []Role{RoleRC, RoleAgg}, Sub: []Role{RoleGW}, Owner: RoleGW},
	{Name: "GWHeartbeat", Template: GWHeartbeat, Pub: []Role{RoleGW}, Sub: []Role{RoleGW}, Owner: RoleGW},
	{Name: "RequestLogEntry", Template: RequestLogEntry, Pub: []Role{RoleGW}, Owner: RoleGW},

	{Name: "RCAnnounce", Template: RCAnnounce, Pub: []Role{RoleRC}, Sub: []Role{RoleGW, RoleRC, RoleDAP}, Owner: RoleRC},
	{Name: "RCSubmit", Template: RCSubmit, Pub: []Role{RoleGW}, Sub: []Role{RoleRC}, Owner: RoleRC},
	{Name: "RCCancel", Template: RCCancel, Pub: []Role{RoleGW}, Sub: []Role{RoleRC}, Owner: RoleRC},
	{Name: "RCPosition", Template: RCPosition, Pub: []Role{RoleGW}, Sub: []Role{RoleRC}, Owner: RoleRC},
	{Name: "GWPosition", Template: GWPosition, Pub: []Role{RoleRC}, Sub: []Role{RoleGW}, Owner: RoleGW},
	{Name: "RCCompletion", Template: RCCompletion, Pub: []Role{RoleDAP, RoleRC}, Sub: []Role{RoleRC}, Owner: RoleRC},
	{Name: "RCAggDone", Template: RCAggDone, Pub: []Role{RoleAgg}, Sub: []Role{RoleRC}, Owner: RoleRC},
	{Name: "RCRefused", Template: RCRefused, Pub: []Role{RoleDAP, RoleAgg, RoleRC}, Sub: []Role{RoleRC}, Owner: RoleRC},
	{Name: "RCSecondaryDispatch", Template: RCSecondaryDispatch, Pub: []Role{RoleRC}, Sub: []Role{RoleRC}, Owner: RoleRC},
	{Name: "RCSecondaryQuery", Template: RCSecondaryQuery, Pub: []Role{RoleRC}, Sub: []Role{RoleRC}, Owner: RoleRC},
	{Name: "RCSecondaryStatus", Template: RCSecondaryStatus, Pub: []Role{RoleRC}, Sub: []Role{RoleRC}, Owner: RoleRC},

	{Name: "DAPEvents", Template: DAPEvents, Pub: []Role{RoleDAP}, Sub: []Role{RoleRC}, Owner: RoleDAP},
	{Name: "DAPRegister", Template: DAPRegister, Pub: []Role{RoleDAP}, Sub: []Role{RoleRC}, Owner: RoleDAP},
	{Name: "DAPStatus", Template: DAPStatus, Pub: []Role{RoleDAP}, Sub: []Role{RoleRC}, Owner: RoleDAP},
	{Name: "DAPVintage", Template: DAPVintage, Pub: []Role{RoleDAP}, Sub: []Role{RoleRC}, Owner: RoleDAP},
	{Name: "DAPHeartbeat", Template: DAPHeartbeat, Pub: []Role{RoleDAP}, Sub: []Role{RoleRC}, Owner: RoleDAP},
	{Name: "DAPLost", Template: DAPLost, Pub: []Role{RoleDAP}, Sub: []Role{RoleRC}, Owner: RoleDAP},
	{Name: "DAPPortion", Template: DAPPortion, Pub: []Role{RoleRC}, Sub: []Role{RoleDAP}, Owner: RoleDAP},
	{Name: "DAPCancel", Template: DAPCancel, Pub: []Role{RoleRC}, Sub: []Role{RoleDAP}, Owner: RoleDAP},
	{Name: "DAPCredit", Template: DAPCredit, Pub: []Role{RoleAgg}, Sub: []Role{RoleDAP}, Owner: RoleDAP},

	{Name: "AggHeartbeat", Template: AggHeartbeat, Pub: []Role{RoleAgg}, Sub: []Role{RoleRC}, Owner: RoleAgg},
	{Name: "AggExpect", Template: AggExpect, Pub: []Role{RoleRC}, Sub: []Role{RoleAgg}, Owner: RoleAgg},
	{Name: "AggCancel", Template: AggCancel, Pub: []Role{RoleRC}, Sub: []Role{RoleAgg}, Owner: RoleAgg},
	{Name: "AggPartial", Template: AggPartial, Pub: []Role{RoleDAP}, Sub: []Role{RoleAgg}, Owner: RoleAgg},
	{Name: "AggStart", Template: AggStart, Pub: []Role{RoleGW}, Sub: []Role{RoleAgg}, Owner: RoleAgg},

	{Name: "Live", Template: Live, Pub: []Role{RoleFeed}},
}

// serviceTrees are the subject trees addressed TO one process of a role
// (<prefix>.<service>.<id>.>): the role may subscribe to the whole tree of its
// own id (the RC subscribes to RCInbox with one wildcard).
var serviceTrees = map[Role]string{RoleGW: ServiceGW, RoleRC: ServiceRC, RoleDAP: ServiceDAP, RoleAgg: ServiceAgg}

// streams names, per role, the JetStream streams whose API it uses (the suffix of the stream name).
var streams = map[Role][]string{
	RoleGW:   {RequestLogStreamSuffix},
	RoleRC:   {DAPStateStreamSuffix},
	RoleDAP:  {LiveStreamSuffix}, // the rdb DAPs consume the live stream
	RoleFeed: {LiveStreamSuffix},
}

// Grant is one credential's identity: its role, its name (the inbox prefix
// is derived from it) and, for a per-DAP credential, the one DAP id it may
// speak for ("" = any id of its role).
type Grant struct {
	Role Role
	Name string
	ID   string
}

// Permissions are a credential's subject permissions: nats-server allow
// lists; whatever they do not cover is refused.
type Permissions struct {
	Publish   []string
	Subscribe []string
}

// Permissions returns what a credential with grant g may publish and
// subscribe to in this deployment. Everything not listed is refused by the
// server and reported to the connection as a permissions violation.
func (s Subjects) Permissions(g Grant) (Permissions, error) {
	if !g.Role.Valid() {
		return Permissions{}, fmt.Errorf("unknown role %q", g.Role)
	}
	if err := Validate("credential name", g.Name); err != nil {
		return Permissions{}, err
	}
	if g.ID != "" {
		if g.Role != RoleDAP {
			return Permissions{}, fmt.Errorf("role %s: only a dap credential can be restricted to one id", g.Role)
		}
		if err := Validate("DAP id", g.ID); err != nil {
			return Permissions{}, err
		}
	}
	if g.Role == RoleAdmin {
		return Permissions{Publish: []string{">"}, Subscribe: []string{">"}}, nil
	}
	var p Permissions
	roles := []Role{g.Role}
	if g.Role == RoleDemo {
		roles = []Role{RoleDAP, RoleFeed}
	}
	for _, r := range roles {
		for _, f := range Flows {
			t := f.Template
			if g.ID != "" && f.Owner == r {
				t = strings.Replace(t, "*", g.ID, 1)
			}
			if slices.Contains(f.Pub, r) {
				p.Publish = append(p.Publish, s.rel(t))
			}
			if slices.Contains(f.Sub, r) {
				p.Subscribe = append(p.Subscribe, s.rel(t))
			}
		}
		if tree, ok := serviceTrees[r]; ok {
			id := "*"
			if g.ID != "" {
				id = g.ID
			}
			p.Subscribe = append(p.Subscribe, s.build("%s.%s.>", tree, id))
		}
		for _, suffix := range streams[r] {
			p.Publish = append(p.Publish, jetStreamAPI(s.streamName(suffix))...)
		}
	}
	switch g.Role {
	case RoleClient:
		// A client publishes under api.> (the API group: every API and cancel).
		p.Publish = []string{s.build("%s.>", GWAPIGroup)}
		// And reads the answer store: an answer above the max payload that
		// the GW wrote there for it (services/gw/answerstore.go).
		p.Publish = append(p.Publish, jetStreamReadAPI("OBJ_"+s.AnswerStore())...)
	case RoleGW:
		// Answers go to caller inboxes only: never to an sg subject (the GW
		// publishes no DAP, Agg or RC event) and never to a service inbox.
		p.Publish = append(p.Publish, CallerInboxRoot+".>")
		// The async job store: a KV bucket and an object store (jobs.go).
		p.Publish = append(p.Publish, jetStreamAPI("KV_"+s.JobsBucket())...)
		p.Publish = append(p.Publish, jetStreamAPI("OBJ_"+s.JobResultsStore())...)
		p.Publish = append(p.Publish, "$KV."+s.JobsBucket()+".>", "$O."+s.JobResultsStore()+".>")
		// The answer store: answers above the max payload for callers that
		// do not reassemble chunks (services/gw/answerstore.go).
		p.Publish = append(p.Publish, jetStreamAPI("OBJ_"+s.AnswerStore())...)
		p.Publish = append(p.Publish, "$O."+s.AnswerStore()+".>")
		// Micro discovery ($SRV.PING|INFO|STATS[.name[.id]]) of the GW service.
		name := s.ServiceName(ServiceGW)
		p.Subscribe = append(p.Subscribe, "$SRV.*", "$SRV.*."+name, "$SRV.*."+name+".*")
	}
	p.Subscribe = append(p.Subscribe, InboxPrefix(g.Role, g.Name)+".>")
	p.Publish = compact(p.Publish)
	p.Subscribe = compact(p.Subscribe)
	return p, nil
}

// jetStreamAPI is the JetStream API of one stream that sg's services use:
// stream create/update/info/purge, message get/delete, consumers (ordered and
// durable pull consumers) and acks. Not stream delete, and no other stream.
func jetStreamAPI(stream string) []string {
	return []string{
		"$JS.API.INFO",
		"$JS.API.STREAM.CREATE." + stream,
		"$JS.API.STREAM.UPDATE." + stream,
		"$JS.API.STREAM.INFO." + stream,
		"$JS.API.STREAM.PURGE." + stream,
		"$JS.API.STREAM.MSG.GET." + stream,
		"$JS.API.STREAM.MSG.DELETE." + stream,
		"$JS.API.DIRECT.GET." + stream,
		"$JS.API.DIRECT.GET." + stream + ".>",
		"$JS.API.CONSUMER.CREATE." + stream,
		"$JS.API.CONSUMER.CREATE." + stream + ".>",
		"$JS.API.CONSUMER.DURABLE.CREATE." + stream + ".*",
		"$JS.API.CONSUMER.INFO." + stream + ".*",
		"$JS.API.CONSUMER.DELETE." + stream + ".*",
		"$JS.API.CONSUMER.MSG.NEXT." + stream + ".*",
		"$JS.ACK." + stream + ".>",
	}
}

// jetStreamReadAPI is what a client needs to read one object store's stream
// with nats.go: stream info, message get (object info), an ordered consumer
// (create, delete) and its flow control replies. Nothing that writes.
func jetStreamReadAPI(stream string) []string {
	return []string{
		"$JS.API.INFO",
		"$JS.API.STREAM.INFO." + stream,
		"$JS.API.STREAM.MSG.GET." + stream,
		"$JS.API.DIRECT.GET." + stream,
		"$JS.API.DIRECT.GET." + stream + ".>",
		"$JS.API.CONSUMER.CREATE." + stream,
		"$JS.API.CONSUMER.CREATE." + stream + ".>",
		"$JS.API.CONSUMER.DELETE." + stream + ".*",
		"$JS.FC." + stream + ".>",
	}
}

// compact drops duplicates and patterns that another pattern of the list
// already covers, keeping the order.
func compact(in []string) []string {
	var out []string
	for i, p := range in {
		covered := false
		for j, q := range in {
			if i != j && Covers(q, p) && (q != p || j < i) {
				covered = true
				break
			}
		}
		if !covered {
			out = append(out, p)
		}
	}
	return out
}

// Covers reports whether every subject that pattern b matches is also
// matched by pattern a (NATS wildcards: '*' one token, '>' the rest).
func Covers(a, b string) bool {
	at, bt := strings.Split(a, "."), strings.Split(b, ".")
	for i, tok := range at {
		if tok == ">" {
			return len(bt) > i
		}
		if i >= len(bt) {
			return false
		}
		switch {
		case bt[i] == ">":
			return false
		case tok == "*":
		case tok != bt[i]:
			return false
		}
	}
	return len(at) == len(bt)
}

// Allows reports whether a publish on subject, or a subscription to it
// (pub false), is allowed: an allow pattern covers it. It mirrors the
// server's check, for tests and docs.
func (p Permissions) Allows(pub bool, subject string) bool {
	allow := p.Subscribe
	if pub {
		allow = p.Publish
	}
	for _, a := range allow {
		if Covers(a, subject) {
			return true
		}
	}
	return false
}

// RoleSummaries says in one line what each role is for, for PermissionsMarkdown.
var RoleSummaries = map[Role]string{
	RoleClient: "a caller: calls the APIs and reads its own answers",
	RoleGW:     "a gateway",
	RoleRC:     "a resource coordinator",
	RoleDAP:    "a data access process; with `--id` only that DAP's own subjects",
	RoleAgg:    "an aggregator",
	RoleFeed:   "a writer of the live stream (`sg publish`, a feed)",
	RoleDemo:   "dap and feed on one connection: the live demo of `sg run` and `sg live --feed-rate`",
	RoleAdmin:  "operators and monitoring (`nats` CLI, `$SRV` discovery): everything",
}

// PermissionsMarkdown is the README's table of roles: what each may publish
// and subscribe to, for a credential called NAME, with the JetStream API of
// a stream in one line.
func (s Subjects) PermissionsMarkdown() (string, error) {
	var b strings.Builder
	b.WriteString("| role | for | may publish | may subscribe to |\n| --- | --- | --- | --- |\n")
	for _, r := range Roles {
		p, err := s.Permissions(Grant{Role: r, Name: "NAME"})
		if err != nil {
			return "", err
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s |\n", r, RoleSummaries[r], markdownList(p.Publish), markdownList(p.Subscribe))
	}
	return b.String(), nil
}

// markdownList lists subjects, each stream's JetStream API as one item.
func markdownList(subjects []string) string {
	var items []string
	for _, subj := range subjects {
		if stream, ok := strings.CutPrefix(subj, "$JS.API.STREAM.CREATE."); ok {
			items = append(items, "JetStream API of stream `"+stream+"`")
			continue
		}
		// Reading a stream without writing it (jetStreamReadAPI).
		if stream, ok := strings.CutPrefix(subj, "$JS.API.STREAM.INFO."); ok && !slices.Contains(subjects, "$JS.API.STREAM.CREATE."+stream) {
			items = append(items, "JetStream reads of stream `"+stream+"`")
			continue
		}
		if strings.HasPrefix(subj, "$JS.") {
			continue // in its stream's item
		}
		items = append(items, "`"+subj+"`")
	}
	return strings.Join(items, ", ")
}
