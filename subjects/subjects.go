// Package subjects builds every NATS subject, stream name and micro service
// name that sg uses. No other package writes a subject by hand.
//
// Every subject starts with a deployment prefix (DefaultPrefix "sg"), so two
// deployments can share one NATS account without seeing each other's traffic.
// Below the prefix the tree is split by direction, which keeps NATS
// permissions short:
//
//	<prefix>.api.<api>                     client -> GW (the only thing a client may publish)
//	<prefix>.<service>.<id>.<verb>...      messages addressed TO one process (its inbox)
//	<prefix>.evt.<service>.<id>.<event>    events published BY one process, for all to watch
//	<prefix>.log.* / state.*               JetStream-captured subjects
//
// As in nats-server's jetstream_api.go, each subject has a template constant
// (relative to the prefix, with a comment), a pattern to subscribe with and a
// builder to publish with, side by side; a pattern method exists only where a
// service subscribes to it (a test that watches a family passes "*" as the
// id to its builder). Builders do not validate ids (hot path); ids are
// validated with Validate where they enter sg.
package subjects

import (
	"strings"
)

// DefaultPrefix is the prefix of a deployment that does not choose one.
const DefaultPrefix = "sg"

// API names: the last token of a GW endpoint subject and the micro endpoint
// name. They must stay valid micro names ([A-Za-z0-9_-]+).
const (
	APIGetData = "getData" // table data by label set and time range
	APIPing    = "ping"    // liveness of the whole path GW -> RC -> DAP -> Agg
	APIGetMeta = "getMeta" // tables, columns, DAPs and purviews known to sg
	APISQL     = "sql"     // SQL query, with the SQL retry rules of the seed
)

// APIs lists the GW endpoints in the order they are registered.
var APIs = []string{APIGetData, APIPing, APIGetMeta, APISQL}

// Service kinds, used in micro service names and in the subject tree.
const (
	ServiceGW  = "gw"
	ServiceRC  = "rc"
	ServiceDAP = "dap"
	ServiceAgg = "agg"
)

// Subject templates, relative to the prefix. A "T" suffix marks the
// fmt template of the pattern above it; "*" in the pattern stands where the
// template has "%s".
const (
	// GWAPIGroup is the micro group of the GW endpoints: the GW registers one
	// endpoint per API under it, so `nats micro info` shows them together.
	GWAPIGroup = "api"
	// GWAPI: client -> GW, request-reply, one subject per API (getData, ping, getMeta, sql).
	GWAPI  = "api.*"
	GWAPIT = "api.%s"

	// GWAnswer: Agg -> GW, the final answer (one message or chunks) of one request, per GW id and request id.
	GWAnswer  = "gw.*.answer.*"
	GWAnswerT = "gw.%s.answer.%s"

	// GWCancel: client -> GW, "I gave up on my request" (the request's id in
	// Sg-Request-Id, the caller known by the reply inbox); a micro endpoint in
	// the api group, so a client still publishes only under api.>.
	GWCancel = "api.cancel"
	// GWJob: client -> GW, request-reply, "where is my async job?" (the job
	// id in Sg-Job-Id, no body); any GW answers from the job store.
	GWJob = "api.job"

	// RCAnnounce: RC -> all GWs, "I exist, this is my assembly and load", per RC id.
	RCAnnounce  = "evt.rc.*.announce"
	RCAnnounceT = "evt.rc.%s.announce"

	// RCSubmit: GW -> RC, a client request to schedule, per RC id.
	RCSubmit  = "rc.*.submit"
	RCSubmitT = "rc.%s.submit"
	// RCCompletion: DAP -> RC, a portion finished (ok, error or RETRY), per RC id;
	// also secondary RC -> primary RC, its DAP's completion of a relayed portion.
	RCCompletion  = "rc.*.completion"
	RCCompletionT = "rc.%s.completion"

	// RCAggDone: Agg -> RC, the request was answered, per RC id.
	RCAggDone  = "rc.*.aggdone"
	RCAggDoneT = "rc.%s.aggdone"
	// RCRefused: DAP or Agg -> RC, "I refused a message of this request"
	// (messages.Refusal; fire-and-forget), per RC id (the message's Sg-Rc-Id);
	// also secondary RC -> primary RC, its DAP's refusal of a relayed portion.
	RCRefused  = "rc.*.refused"
	RCRefusedT = "rc.%s.refused"
	// RCCancel: GW -> RC, cancel a request's drive (drive id in Sg-Request-Id, no body), per RC id.
	RCCancel  = "rc.*.cancel"
	RCCancelT = "rc.%s.cancel"
	// RCPosition: GW -> RC, "where does this request stand"
	// (messages.PositionQuery), per RC id; the RC that holds it answers on
	// GWPosition of the GW the query names (never a subject from the message).
	RCPosition  = "rc.*.position"
	RCPositionT = "rc.%s.position"
	// GWPosition: RC -> GW, a messages.PositionReport, per GW id.
	GWPosition  = "gw.*.position"
	GWPositionT = "gw.%s.position"

	// RCSecondaryDispatch: primary RC -> secondary RC, the label sets the secondary must run, per secondary RC id.
	RCSecondaryDispatch  = "rc.*.secondary.dispatch"
	RCSecondaryDispatchT = "rc.%s.secondary.dispatch"
	// RCSecondaryQuery: primary RC -> secondary RC, "report your status of this request" (timeout message), per secondary RC id.
	RCSecondaryQuery  = "rc.*.secondary.query"
	RCSecondaryQueryT = "rc.%s.secondary.query"
	// RCSecondaryStatus: secondary RC -> primary RC, status report (completed, timed out, status block), per primary RC id.
	RCSecondaryStatus  = "rc.*.secondary.status"
	RCSecondaryStatusT = "rc.%s.secondary.status"

	// DAPEvents: every event of every DAP; RCs subscribe to it with one wildcard.
	DAPEvents = "evt.dap.*.*"
	// DAPRegister: DAP -> RCs, registration (labels, tier, purview, vintage, ...), per DAP id.
	DAPRegister  = "evt.dap.*.register"
	DAPRegisterT = "evt.dap.%s.register"
	// DAPStatus: DAP -> RCs, availability or purview changed (end of interval/day, replay), per DAP id.
	DAPStatus  = "evt.dap.*.status"
	DAPStatusT = "evt.dap.%s.status"
	// DAPVintage: DAP -> RCs, reference vintage changed, per DAP id.
	DAPVintage  = "evt.dap.*.vintage"
	DAPVintageT = "evt.dap.%s.vintage"
	// DAPHeartbeat: DAP -> RCs, periodic liveness, per DAP id.
	DAPHeartbeat  = "evt.dap.*.heartbeat"
	DAPHeartbeatT = "evt.dap.%s.heartbeat"
	// DAPLost: DAP (on shutdown) or a watcher (missed heartbeats) -> RCs, the DAP is gone, per DAP id.
	DAPLost  = "evt.dap.*.lost"
	DAPLostT = "evt.dap.%s.lost"

	// DAPPortion: RC -> DAP, one portion to execute, per DAP id.
	DAPPortion  = "dap.*.portion"
	DAPPortionT = "dap.%s.portion"

	// DAPCancel: RC -> DAP, stop the portions of a request (request id in Sg-Request-Id, no body), per DAP id.
	DAPCancel  = "dap.*.cancel"
	DAPCancelT = "dap.%s.cancel"

	// DAPCredit: Agg -> DAP, flow control of a partial sent in windows (messages.PartialCredit), per DAP id.
	DAPCredit  = "dap.*.credit"
	DAPCreditT = "dap.%s.credit"

	// AggHeartbeat: Agg -> RCs, periodic liveness, per Agg id.
	AggHeartbeat  = "evt.agg.*.heartbeat"
	AggHeartbeatT = "evt.agg.%s.heartbeat"
	// AggCancel: RC -> Agg, drop the partials of a request (request id in Sg-Request-Id, no body), per Agg id.
	AggCancel  = "agg.*.cancel"
	AggCancelT = "agg.%s.cancel"

	// AggExpect: RC -> Agg, which portions (and attempts) to expect for a request, per Agg id.
	AggExpect  = "agg.*.expect"
	AggExpectT = "agg.%s.expect"
	// AggPartial: DAP -> Agg, the partial result of one portion, per Agg id.
	AggPartial  = "agg.*.partial"
	AggPartialT = "agg.%s.partial"
	// AggStart: GW -> Agg, send the rest of an answer stream (messages.StreamStartFrames;
	// drive id in Sg-Request-Id, stream id in Sg-Stream-Id, no body), per Agg id.
	AggStart  = "agg.*.start"
	AggStartT = "agg.%s.start"
)

// Stream name suffixes; the stream name is the sanitized, upper-cased prefix
// followed by one of these, e.g. SG_REQUEST_LOG.
const (
	RequestLogStreamSuffix = "_REQUEST_LOG" // every accepted request until answered
	DAPStateStreamSuffix   = "_DAP_STATE"   // each DAP's last event of each kind (DAPEventStreamSubjects): its state
)

// DAP event kinds: the last token of a DAP event subject.
const (
	EventRegister  = "register"
	EventStatus    = "status"
	EventVintage   = "vintage"
	EventHeartbeat = "heartbeat"
	EventLost      = "lost"
)

// Subjects builds subjects under one prefix. The zero value is not usable;
// use New or Default. It is a small value type: copy it freely.
type Subjects struct {
	prefix string
}

// New returns the subject builder of a deployment with the given prefix.
func New(prefix string) (Subjects, error) {
	if err := ValidatePrefix(prefix); err != nil {
		return Subjects{}, err
	}
	return Subjects{prefix: prefix}, nil
}

// Default returns the builder for DefaultPrefix.
func Default() Subjects { return Subjects{prefix: DefaultPrefix} }

// Prefix returns the deployment prefix.
func (s Subjects) Prefix() string { return s.prefix }

func (s Subjects) rel(pattern string) string { return s.prefix + "." + pattern }

// build fills each %s of tmpl with the next id, after the prefix. Every
// message an sg service sends or matches names a subject: this runs per
// message, so it is a concatenation into one buffer, not a Sprintf.
func (s Subjects) build(tmpl string, ids ...string) string {
	n := len(s.prefix) + 1 + len(tmpl)
	for _, id := range ids {
		n += len(id)
	}
	var b strings.Builder
	b.Grow(n)
	b.WriteString(s.prefix)
	b.WriteByte('.')
	for _, id := range ids {
		i := strings.Index(tmpl, "%s")
		if i < 0 {
			break
		}
		b.WriteString(tmpl[:i])
		b.WriteString(id)
		tmpl = tmpl[i+2:]
	}
	b.WriteString(tmpl)
	return b.String()
}

// --- GW ---

// GWAPIGroup is the subject of the micro group that holds the GW endpoints.
func (s Subjects) GWAPIGroup() string { return s.rel(GWAPIGroup) }

// GWAPIPattern matches the requests of every API.
func (s Subjects) GWAPIPattern() string { return s.rel(GWAPI) }

// GWAPI is the subject a client requests to call api, e.g. "sg.api.getData".
func (s Subjects) GWAPI(api string) string { return s.build(GWAPIT, api) }

// GWAnswerPattern matches every answer addressed to one GW.
func (s Subjects) GWAnswerPattern(gwID string) string { return s.build("gw.%s.answer.*", gwID) }

// GWAnswer is where the Agg sends the answer of requestID to GW gwID.
func (s Subjects) GWAnswer(gwID, requestID string) string {
	return s.build(GWAnswerT, gwID, requestID)
}

// GWCancel is where a client cancels its request.
func (s Subjects) GWCancel() string { return s.rel(GWCancel) }

// --- RC ---

// RCAnnouncePattern matches the announcements of every RC (a GW subscribes).
func (s Subjects) RCAnnouncePattern() string { return s.rel(RCAnnounce) }

// RCAnnounce is where RC rcID announces itself.
func (s Subjects) RCAnnounce(rcID string) string { return s.build(RCAnnounceT, rcID) }

// RCInbox matches everything addressed to RC rcID (submit, completion, secondary).
func (s Subjects) RCInbox(rcID string) string { return s.build("rc.%s.>", rcID) }

// RCSubmit is where a GW submits a request to RC rcID.
func (s Subjects) RCSubmit(rcID string) string { return s.build(RCSubmitT, rcID) }

// RCCompletion is where a DAP reports a finished portion to RC rcID.
func (s Subjects) RCCompletion(rcID string) string { return s.build(RCCompletionT, rcID) }

// RCAggDone is where an Agg tells RC rcID that it answered a request.
func (s Subjects) RCAggDone(rcID string) string { return s.build(RCAggDoneT, rcID) }

// RCRefused is where a DAP or an Agg tells RC rcID that it refused a message of one of its requests.
func (s Subjects) RCRefused(rcID string) string { return s.build(RCRefusedT, rcID) }

// GWJob is where a client polls an async job.
func (s Subjects) GWJob() string { return s.rel(GWJob) }

// GWPosition is where RCs report positions to GW gwID.
func (s Subjects) GWPosition(gwID string) string { return s.build(GWPositionT, gwID) }

// RCPosition is where a GW asks RC rcID for a request's position.
func (s Subjects) RCPosition(rcID string) string { return s.build(RCPositionT, rcID) }

// RCCancel is where a GW cancels a drive on RC rcID.
func (s Subjects) RCCancel(rcID string) string { return s.build(RCCancelT, rcID) }

// RCSecondaryDispatch is where a primary RC hands work to secondary RC rcID.
func (s Subjects) RCSecondaryDispatch(rcID string) string {
	return s.build(RCSecondaryDispatchT, rcID)
}

// RCSecondaryQuery is where a primary RC asks secondary RC rcID for its status.
func (s Subjects) RCSecondaryQuery(rcID string) string { return s.build(RCSecondaryQueryT, rcID) }

// RCSecondaryStatus is where a secondary RC reports to primary RC rcID.
func (s Subjects) RCSecondaryStatus(rcID string) string {
	return s.build(RCSecondaryStatusT, rcID)
}

// --- DAP ---

// DAPEventsPattern matches every event of every DAP: one subscription per RC.
func (s Subjects) DAPEventsPattern() string { return s.rel(DAPEvents) }

// DAPRegister is where DAP dapID registers.
func (s Subjects) DAPRegister(dapID string) string { return s.build(DAPRegisterT, dapID) }

// DAPStatus is where DAP dapID publishes a status update.
func (s Subjects) DAPStatus(dapID string) string { return s.build(DAPStatusT, dapID) }

// DAPVintage is where DAP dapID publishes a reference vintage update.
func (s Subjects) DAPVintage(dapID string) string { return s.build(DAPVintageT, dapID) }

// DAPHeartbeat is where DAP dapID publishes its heartbeat.
func (s Subjects) DAPHeartbeat(dapID string) string { return s.build(DAPHeartbeatT, dapID) }

// DAPLost is where the loss of DAP dapID is announced.
func (s Subjects) DAPLost(dapID string) string { return s.build(DAPLostT, dapID) }

// ParseDAPEvent splits a subject received on DAPEventsPattern into the DAP id
// and the event kind; ok is false for a subject outside that pattern.
func (s Subjects) ParseDAPEvent(subject string) (dapID, event string, ok bool) {
	rest, found := strings.CutPrefix(subject, s.prefix+".evt.dap.")
	if !found {
		return "", "", false
	}
	dapID, event, found = strings.Cut(rest, ".")
	if !found || dapID == "" || event == "" || strings.Contains(event, ".") {
		return "", "", false
	}
	return dapID, event, true
}

// DAPPortion is where an RC dispatches a portion to DAP dapID.
func (s Subjects) DAPPortion(dapID string) string { return s.build(DAPPortionT, dapID) }

// DAPCancel is where an RC tells DAP dapID to stop a request's portions.
func (s Subjects) DAPCancel(dapID string) string { return s.build(DAPCancelT, dapID) }

// DAPCredit is where an Agg grants DAP dapID more windows of a partial, or
// tells it to stop sending them.
func (s Subjects) DAPCredit(dapID string) string { return s.build(DAPCreditT, dapID) }

// --- Agg ---

// AggHeartbeatPattern matches the heartbeats of every Agg (an RC subscribes).
func (s Subjects) AggHeartbeatPattern() string { return s.rel(AggHeartbeat) }

// AggHeartbeat is where Agg aggID publishes its heartbeat.
func (s Subjects) AggHeartbeat(aggID string) string { return s.build(AggHeartbeatT, aggID) }

// AggCancel is where an RC tells Agg aggID to drop a request's partials.
func (s Subjects) AggCancel(aggID string) string { return s.build(AggCancelT, aggID) }

// AggExpect is where an RC tells Agg aggID which portions to expect.
func (s Subjects) AggExpect(aggID string) string { return s.build(AggExpectT, aggID) }

// AggPartial is where a DAP sends a partial result to Agg aggID.
func (s Subjects) AggPartial(aggID string) string { return s.build(AggPartialT, aggID) }

// AggStart is where a GW tells Agg aggID to send the rest of an answer
// stream (messages.StreamStartFrames).
func (s Subjects) AggStart(aggID string) string { return s.build(AggStartT, aggID) }

// --- JetStream ---

// JobsBucket is the JetStream KV bucket of async jobs' states, e.g. SG_JOBS.
func (s Subjects) JobsBucket() string { return s.streamName("_JOBS") }

// JobResultsStore is the JetStream object store of async jobs' answers,
// e.g. SG_JOB_RESULTS.
func (s Subjects) JobResultsStore() string { return s.streamName("_JOB_RESULTS") }

// AnswerStore is the default JetStream object store of answers above the max
// payload for callers that do not reassemble chunks, e.g. SG_ANSWERS
// (services/defaults.AnswerStoreBucket names another).
func (s Subjects) AnswerStore() string { return s.streamName("_ANSWERS") }

// RequestLogStream is the name of the request log stream, e.g. SG_REQUEST_LOG.
func (s Subjects) RequestLogStream() string { return s.streamName(RequestLogStreamSuffix) }

// DAPStateStream is the name of the DAP state stream, e.g. SG_DAP_STATE.
func (s Subjects) DAPStateStream() string { return s.streamName(DAPStateStreamSuffix) }

// streamName derives a JetStream stream name from the prefix: stream names
// may not contain '.', so "acme.sg" becomes "ACME_SG".
func (s Subjects) streamName(suffix string) string {
	return strings.ToUpper(sanitizeName(s.prefix, '_')) + suffix
}

// ServiceName is the micro service name of a service kind, e.g. "sg-gw".
// Two deployments on one NATS get distinct names, so discovery
// ($SRV.INFO.<name>) never mixes them. Micro names allow only [A-Za-z0-9_-].
func (s Subjects) ServiceName(service string) string {
	return sanitizeName(s.prefix, '-') + "-" + sanitizeName(service, '_')
}

// sanitizeName keeps [A-Za-z0-9_-], turns '.' into dot and anything else into '_'.
func sanitizeName(in string, dot rune) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '_', r == '-':
			return r
		case r == '.':
			return dot
		default:
			return '_'
		}
	}, in)
}
