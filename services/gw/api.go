package gw

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"github.com/nats-io/nuid"
	"github.com/rs/zerolog"
	"github.com/sg-project/sg/messages"
	"github.com/sg-project/sg/services/gw/core"
	"github.com/sg-project/sg/services/limits"
	"github.com/sg-project/sg/services/retryafter"
	"github.com/sg-project/sg/subjects"
)

// endpoint is one API's micro handler. A value, not a closure: micro copies
// it into the endpoint before subscribing, so no captured variable is
// shared with the handler's goroutine.
type endpoint struct {
	g   *GW
	api string
}

func (e endpoint) Handle(r micro.Request) { e.g.handle(e.api, r) }

// handle is the micro handler of the APIs. It never blocks on a request:
// it checks the reply subject, decodes and checks the request (answering a
// bad one at once: nothing is accepted), and hands a good one to the loop,
// whose core admits it or refuses it. Run returns only after every handler
// call has returned (see loop), so nothing is answered after it.
func (g *GW) handle(api string, r micro.Request) {
	msg := &nats.Msg{Subject: r.Subject(), Reply: r.Reply(), Header: nats.Header(r.Headers()), Data: r.Data()}
	received := time.Now()
	// The reply subject is the caller's word: answer only where a client may
	// listen (an inbox), never onto an sg or system subject.
	if err := g.checkReply(msg.Reply); err != nil {
		g.met.refusedReply.Inc()
		g.lim.Warn(&g.log, "refused_reply_request").Err(err).Str("api", api).Str("client_request_id", safeLabel(msg.Header.Get(messages.HdrRequestID))).
			Msg("dropping request: its reply subject is not a client inbox")
		return
	}
	// The request's logger is built only if it is answered here: an
	// accepted request goes to the loop, which builds its own when it logs.
	ri := g.newReqInfoNoLog(api, msg, received)
	req, st := g.check(ri, msg)
	if g.stopped() {
		return // only after a stop that could not wait for its handlers
	}
	if !st.IsOK() {
		ri.log = g.reqLogger(ri)
		g.respondStatus(ri, st)
		return
	}
	if req.header.Opts.Async {
		// The job runs on this decode (jobs.go): never decoded again here.
		ri.log = g.reqLogger(ri)
		g.jobs.serve(func() { g.submitJob(ri, msg, req) })
		return
	}
	sub := g.submission(ri, req)
	// The caller reads the answer as a stream of frames: the Agg sends it so.
	sub.Stream = msg.Header.Get(messages.HdrAcceptStream) == "1"
	g.arrive(ri, sub)
}

// arrive hands a checked request, received as ri, to the loop, whose core
// admits it or refuses it.
func (g *GW) arrive(ri *reqInfo, sub *messages.RCSubmission) {
	// The answer names the caller's id from the start: a chunked one is
	// passed on as it comes, with nothing in it to rewrite (core/relay.go).
	sub.AnswerID = ri.clientID
	g.input(input{ev: core.Arrived{At: ri.received.UnixNano(), Req: core.Request{ID: ri.id, ClientID: ri.clientID,
		Caller: ri.caller, Reply: ri.reply, API: ri.api, Content: ri.content, LogCorr: ri.logCorr, Chunks: ri.chunks, Sub: *sub,
		Received: ri.received.UnixNano(), Deadline: sub.Deadline}}})
}

// stopped reports that the loop has returned: Run is returning, nothing may
// be answered any more.
func (g *GW) stopped() bool {
	select {
	case <-g.loopDone:
		return true
	default:
		return false
	}
}

// cancelEndpoint handles subjects.GWCancel. Every GW gets every cancel (no
// queue group): the one that holds the request answers; the others stay
// silent.
type cancelEndpoint struct{ g *GW }

func (e cancelEndpoint) Handle(r micro.Request) { e.g.handleCancel(r) }

func (g *GW) handleCancel(r micro.Request) {
	msg := &nats.Msg{Subject: r.Subject(), Reply: r.Reply(), Header: nats.Header(r.Headers()), Data: r.Data()}
	if err := g.checkReply(msg.Reply); err != nil {
		g.met.refusedReply.Inc()
		g.lim.Warn(&g.log, "refused_reply_cancel").Err(err).Msg("dropping cancel: its reply subject is not a client inbox")
		return
	}
	if g.stopped() {
		return
	}
	id := msg.Header.Get(messages.HdrRequestID)
	if id == "" || subjects.Validate("request id", id) != nil || len(msg.Data) > 0 {
		// Every GW gets it and each says the same: the caller sees the first.
		ri := &reqInfo{api: APICancel, id: nuid.Next(), clientID: nuid.Next(), reply: msg.Reply, content: messages.ContentJSON,
			received: time.Now(), log: g.log}
		g.respondStatus(ri, bad("A cancel names the request in %s (a valid request id) and has no body", messages.HdrRequestID))
		return
	}
	g.input(input{ev: core.Cancel{At: time.Now().UnixNano(), Caller: callerOf(msg.Reply), ClientID: id, Reply: msg.Reply}})
}

// APICancel is the api name on the answer to a cancel.
const APICancel = "cancel"

// Names of the limits a refusal names in messages.HdrLimit.
const (
	// LimitInFlight: Config.MaxInFlight, requests open at this GW.
	LimitInFlight = core.LimitInFlight
	// LimitInFlightPerCaller: Config.MaxInFlightPerCaller, requests open at
	// this GW for one caller.
	LimitInFlightPerCaller = core.LimitInFlightPerCaller
	// LimitHeldBytes: Config.MaxHeldBytes, answers' bytes this GW holds for
	// all requests together (SG_GW_MAX_HELD_BYTES).
	LimitHeldBytes = core.LimitHeldBytes
)

// retryAfterSeconds is the Sg-Retry-After of a refusal over an in-flight
// limit, by the seed's formula as every refusal (limits.RetryAfter). The GW
// queues nothing: the refused request waits behind no item it can count,
// the next answer frees a slot, so the backlog is 0 and the answer the
// floor, min_seconds (a queue limit at the RC counts its backlog).
func (c Config) retryAfterSeconds() int {
	ra := retryafter.Config{}
	if c.Jobs != nil {
		ra = c.Jobs.RetryAfter
	}
	ra = ra.WithDefaults()
	return limits.RetryAfter(0, retryafter.NominalRate(c.MaxInFlight, ra.NominalExec), ra.Params)
}

// callerOf is the caller a request is counted against: its reply subject
// without the last token, i.e. the inbox prefix of the client's connection
// (nats.go's "_INBOX.<nuid>.<n>" gives "_INBOX.<nuid>"). A client may spread
// its requests over several connections; each is a caller of its own.
func callerOf(reply string) string {
	if i := strings.LastIndexByte(reply, '.'); i > 0 {
		return reply[:i]
	}
	return reply
}

// checkReply accepts a reply subject only under one of
// Config.AllowedReplyPrefixes, and never one under the sg prefix or a
// system ($) subject, whatever the prefixes say.
func (g *GW) checkReply(reply string) error {
	if reply == "" {
		return errors.New("no reply subject: nobody to answer")
	}
	if len(reply) > maxReplySubject {
		return fmt.Errorf("reply subject of %d bytes is above %d", len(reply), maxReplySubject)
	}
	if strings.HasPrefix(reply, "$") || strings.HasPrefix(reply, g.s.Prefix()+".") || reply == g.s.Prefix() {
		return fmt.Errorf("reply subject %q is an sg or system subject", safeLabel(reply))
	}
	if strings.ContainsAny(reply, " \t\r\n*>") {
		return fmt.Errorf("reply subject %q is not a plain subject", safeLabel(reply))
	}
	for _, p := range g.cfg.AllowedReplyPrefixes {
		if strings.HasPrefix(reply, p) && len(reply) > len(p) {
			return nil
		}
	}
	return fmt.Errorf("reply subject %q is not under an allowed prefix %v", safeLabel(reply), g.cfg.AllowedReplyPrefixes)
}

// maxReplySubject bounds a reply subject we keep and log.
const maxReplySubject = 256

// safeLabel bounds a caller-given string for a log line.
func safeLabel(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}

// reqInfo is what the GW knows of a request when it answers it.
type reqInfo struct {
	api string
	// id is the GW's own id of the request, unique (nuid): the key of its
	// log entry and answer subject, and with DriveID the id of each drive at
	// the RC, DAPs and Agg. clientID is the caller's Sg-Request-Id: a label,
	// echoed on the answer and logged, never a key.
	id       string
	clientID string
	caller   string // callerOf(reply): what per-caller limits count
	reply    string
	content  messages.Content
	logCorr  string
	chunks   bool // the caller reassembles chunked answers (Sg-Accept-Chunks: 1)
	received time.Time
	log      zerolog.Logger
}

func (g *GW) newReqInfo(api string, msg *nats.Msg, received time.Time) *reqInfo {
	ri := g.newReqInfoNoLog(api, msg, received)
	ri.log = g.reqLogger(ri)
	return ri
}

// newReqInfoNoLog is newReqInfo with the GW's own logger (reqLogger builds
// the request's).
func (g *GW) newReqInfoNoLog(api string, msg *nats.Msg, received time.Time) *reqInfo {
	ri := &reqInfo{log: g.log, api: api, reply: msg.Reply, caller: callerOf(msg.Reply), received: received, id: g.newID(),
		clientID: msg.Header.Get(messages.HdrRequestID), chunks: msg.Header.Get(messages.HdrAcceptChunks) == "1"}
	if ri.clientID == "" || subjects.Validate("request id", ri.clientID) != nil {
		ri.clientID = ri.id // an invalid given id is reported by prepare; none: the GW's id is the label
	}
	// Answer in the client's encoding; when it cannot be told, JSON is the
	// one a human with a plain NATS client can read.
	c, err := messages.DetectContent(msg.Header, msg.Data)
	if err != nil {
		c = messages.ContentJSON
	}
	ri.content = c
	return ri
}

// reqLogger is the logger of a request: its ids, api and log correlation.
func (g *GW) reqLogger(ri *reqInfo) zerolog.Logger {
	lc := g.log.With().Str("request_id", ri.id).Str("client_request_id", ri.clientID).Str("api", ri.api)
	if ri.logCorr != "" {
		lc = lc.Str("log_corr", ri.logCorr)
	}
	return lc.Logger()
}

// infoReq rebuilds a reqInfo from what the core tells about a request.
func (g *GW) infoReq(i core.Info) *reqInfo {
	ri := g.infoReqNoLog(i)
	ri.log = g.infoLog(i)
	return ri
}

// infoReqNoLog is infoReq without the logger (ri.log is the GW's own), for
// a path that logs only when something goes wrong (infoLog then): building
// it cost allocations on every request.
func (g *GW) infoReqNoLog(i core.Info) *reqInfo {
	return &reqInfo{api: i.API, id: i.ID, clientID: i.ClientID, caller: i.Caller, reply: i.Reply, content: i.Content,
		logCorr: i.LogCorr, received: time.Unix(0, i.Received), chunks: i.Chunks, log: g.log}
}

// infoLog is the logger of a request the core tells about.
func (g *GW) infoLog(i core.Info) zerolog.Logger {
	lc := g.log.With().Str("request_id", i.ID).Str("client_request_id", i.ClientID).Str("api", i.API)
	if i.LogCorr != "" {
		lc = lc.Str("log_corr", i.LogCorr)
	}
	if i.RCID != "" {
		lc = lc.Str("rc_id", i.RCID).Uint32("drive", i.Drive)
	}
	return lc.Logger()
}

func bad(format string, args ...any) messages.Status {
	return messages.Errorf(messages.CodeBadRequest, messages.CodeErr, format, args...)
}

// checkedRequest is a request decoded and checked once at the GW: what its
// submissions to the RC are built of (submission), a sync request's at once,
// an async one's for each run of its job (jobs.go).
type checkedRequest struct {
	header  messages.RequestHeader // the scope lifted from the arguments
	content messages.Content
	// args are the caller's bytes as sent (forwardArgs): never re-encoded.
	args    messages.Args
	timeout time.Duration // opts.timeout, else the GW's
}

// check decodes and checks a request; a status that is not OK is the answer.
func (g *GW) check(ri *reqInfo, msg *nats.Msg) (checkedRequest, messages.Status) {
	if n := len(msg.Data); n > g.cfg.MaxRequestBytes {
		return checkedRequest{}, messages.Errorf(messages.CodeTooLarge, messages.CodeErr,
			"Request of %d bytes is above the limit of %d bytes", n, g.cfg.MaxRequestBytes)
	}
	if given := msg.Header.Get(messages.HdrRequestID); given != "" && given != ri.clientID {
		return checkedRequest{}, bad("Header %s: %v", messages.HdrRequestID, subjects.Validate("request id", given))
	}
	req, err := messages.DecodeRequest(msg.Header, msg.Data)
	if err != nil {
		if errors.Is(err, messages.ErrVersion) {
			return checkedRequest{}, messages.Errorf(messages.CodeNotSupported, messages.CodeErr, "Request: %v", err)
		}
		return checkedRequest{}, bad("Malformed request: %v", err)
	}
	ri.content = req.Content
	if req.Header.Opts.LogCorr != "" {
		ri.logCorr = req.Header.Opts.LogCorr // in ri.log once it is built (reqLogger)
	}
	if !slices.Contains(subjects.APIs, req.Header.API) {
		return checkedRequest{}, messages.Errorf(messages.CodeUnknownAPI, messages.CodeErr,
			"Unknown API %q: the gateway serves %s", req.Header.API, strings.Join(subjects.APIs, ", "))
	}
	if req.Header.API != ri.api {
		return checkedRequest{}, bad("Request names api %q but was sent to the %s endpoint (%s)", req.Header.API, ri.api, msg.Subject)
	}
	if req.Header.Opts.Async && g.jobs == nil {
		return checkedRequest{}, messages.Errorf(messages.CodeNotSupported, messages.CodeErr, "opts.async: this gateway keeps no job store (sg gw --jobs)")
	}
	// One parse of the arguments: the API's decoder also gives their
	// "scope" key, whose error is named before the arguments'.
	args, rawScope, argsSt := g.decodeArgs(&req)
	// Seed: the scope is given in the request arguments, in either
	// encoding; lift it into the header. A header scope wins.
	var sc messages.Scope
	var scoped bool
	switch {
	case req.Content == messages.ContentJSON:
		sc, scoped, err = messages.ScopeFromJSON(rawScope)
	case argsSt.IsOK():
		sc, scoped, err = messages.ScopeFromMsgpack(rawScope)
	default:
		// Refused msgpack arguments: the decoder may have stopped before
		// the scope, which a walk of its own finds, to name a bad one
		// first, as for JSON (whose parse goes on past a bad value).
		sc, scoped, err = g.scopeWalk(req.Content, req.Payload)
	}
	if err != nil {
		return checkedRequest{}, bad("%v", err)
	} else if scoped && req.Header.Scope == (messages.Scope{}) {
		req.Header.Scope = sc
		if err := req.Header.Validate(); err != nil {
			return checkedRequest{}, bad("Malformed request: %v", err)
		}
	}
	// scope.tier narrows an assembly to one tier; alone it names nothing.
	if req.Header.Scope.Tier != "" && req.Header.Scope.Assembly == "" {
		return checkedRequest{}, bad("scope.tier is valid only with scope.assembly")
	}
	if !argsSt.IsOK() {
		return checkedRequest{}, argsSt
	}
	timeout := g.cfg.Timeout
	if ms := req.Header.Opts.TimeoutMS; ms > 0 {
		timeout = time.Duration(ms) * time.Millisecond
	}
	if g.cfg.RequestLog != nil && timeout+g.cfg.TimeoutMargin >= g.cfg.RequestLog.MaxAge {
		return checkedRequest{}, bad("Timeout %s plus the margin %s is not below the request log's retention %s",
			timeout, g.cfg.TimeoutMargin, g.cfg.RequestLog.MaxAge)
	}
	return checkedRequest{header: req.Header, content: req.Content, args: args, timeout: timeout}, messages.StatusOK
}

// submission is the RC's submission of a checked request received (or run,
// for a job) as ri.
func (g *GW) submission(ri *reqInfo, req checkedRequest) *messages.RCSubmission {
	sub := &messages.RCSubmission{
		RequestID: ri.id, GWID: g.cfg.ID, Header: req.header,
		ReplyTo: g.s.GWAnswer(g.cfg.ID, ri.id), Content: req.content, ReceivedAt: ri.received.UnixNano(),
		Deadline: ri.received.Add(req.timeout).UnixNano(),
	}
	sub.SetArguments(req.args) // and the version that carries them
	return sub
}

// decodeArgs decodes the API's arguments in the client's encoding and checks
// them; the RC gets them as the caller sent them (forwardArgs). Their "scope"
// key comes back raw, in that encoding, from the same parse (ScopeFromJSON or
// ScopeFromMsgpack reads it).
func (g *GW) decodeArgs(req *messages.Request) (messages.Args, []byte, messages.Status) {
	switch req.Header.API {
	case subjects.APISQL:
		// The RC plans the statement: it knows the fleet's label keys.
		_, sc, err := messages.DecodeSQLArgsScope(req.Content, req.Payload)
		return checked(req, sc, err)
	case subjects.APIGetData:
		if len(req.Payload) == 0 {
			return messages.Args{}, nil, bad("getData needs arguments: at least a table")
		}
		a, sc, err := decodeIn(req, messages.DecodeGetDataArgsJSONScope, messages.DecodeGetDataArgsMsgpackScope)
		if err == nil {
			err = a.Validate()
		}
		return checked(req, sc, err)
	case subjects.APIPing:
		a, sc, err := decodeIn(req, messages.DecodePingArgsJSONScope, messages.DecodePingArgsMsgpackScope)
		if err == nil {
			err = a.Validate()
		}
		return checked(req, sc, err)
	case subjects.APIGetMeta:
		// A scope key is an argument too: getMeta takes none.
		if !emptyArgs(req.Content, req.Payload) {
			return messages.Args{}, nil, bad("getMeta takes no arguments")
		}
		return messages.Args{}, nil, messages.StatusOK
	}
	return messages.Args{}, nil, messages.Errorf(messages.CodeUnknownAPI, messages.CodeErr, "Unknown API %q", req.Header.API)
}

// decodeIn decodes an API's arguments with its decoder for the client's
// encoding; their raw scope comes from the same parse. (The caller
// validates: through a type parameter the arguments would escape to the
// heap.)
func decodeIn[A any](req *messages.Request, fromJSON func([]byte) (A, json.RawMessage, error), fromMsgpack func([]byte) (A, []byte, error)) (A, []byte, error) {
	if req.Content == messages.ContentJSON {
		return fromJSON(req.Payload)
	}
	return fromMsgpack(req.Payload)
}

// checked answers decodeArgs for arguments decoded and checked with err:
// refused naming the API, or forwarded as sent. The raw scope goes back
// either way (its error is named first).
func checked(req *messages.Request, sc []byte, err error) (messages.Args, []byte, messages.Status) {
	if err != nil {
		return messages.Args{}, sc, bad("Bad %s arguments: %v", req.Header.API, err)
	}
	return forwardArgs(req), sc, messages.StatusOK
}

// forwardArgs is what goes to the RC of checked arguments: the caller's own
// bytes, in the caller's encoding (messages/args.go). Every service decodes
// them with the decoder the GW just used, so they mean the same there; the GW
// never re-encodes them.
func forwardArgs(req *messages.Request) messages.Args {
	if req.Content == messages.ContentJSON {
		return messages.JSONArgs(req.Payload)
	}
	return messages.MsgpackArgs(req.Payload)
}

// emptyArgs accepts no payload, null, or an empty map.
func emptyArgs(c messages.Content, p []byte) bool {
	if len(p) == 0 {
		return true
	}
	var v any
	if c == messages.ContentJSON {
		if json.Unmarshal(p, &v) != nil {
			return false
		}
	} else if messages.Decode(p, &v) != nil {
		return false
	}
	switch v := v.(type) {
	case nil:
		return true
	case map[string]any:
		return len(v) == 0
	}
	return false
}
