package gw

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"github.com/nats-io/nuid"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"github.com/sg-project/sg/messages"
	"github.com/sg-project/sg/subjects"
	"github.com/vmihailenco/msgpack/v5"
)

// GW is one gateway process. Create it with New and start it with Run.
type GW struct {
	cfg Config
	log zerolog.Logger
	nc  *nats.Conn
	s   subjects.Subjects
	rcs *rcRegistry
	met *metrics
	sem chan struct{} // one slot per request in flight

	mu      sync.Mutex
	pending map[string]*pending // by the GW's request id, until answered
	callers map[string]int      // requests in flight per caller (callerOf)
	closing bool                // Run is stopping: refuse new requests
	wg      sync.WaitGroup      // requests in flight
	// handlers counts micro handler calls under way (see handle).
	handlers sync.WaitGroup

	startupUntil time.Time     // set in Run before the endpoints exist
	abort        chan struct{} // closed when the shutdown grace ends
	ready        chan struct{} // closed when the endpoints are registered
	runOnce      sync.Once

	startedAt int64       // this incarnation, in GW heartbeats and log entries
	rlog      *requestLog // nil without Config.RequestLog
	peers     gwPeers
	sweeps    chan string // GW ids whose open log entries to examine ("" = all)
}

// pending is one request waiting for its answer.
type pending struct {
	id      string
	done    chan answer                      // capacity 1: the first answer wins
	streams map[string]*messages.Reassembler // chunked transfers, touched only by onAnswer
}

type answer struct {
	header nats.Header
	data   []byte
	err    error // the answer arrived but cannot be forwarded (too large, broken)
}

// maxStreamsPerRequest bounds the chunked transfers buffered for one request
// (a duplicate answer may overlap the first one; more is abuse).
const maxStreamsPerRequest = 4

// New checks cfg and builds a GW; it does not touch NATS until Run.
func New(cfg Config) (*GW, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	g := &GW{
		cfg:     cfg,
		log:     cfg.Log.With().Str("service", subjects.ServiceGW).Str("gw_id", cfg.ID).Logger(),
		nc:      cfg.NC,
		s:       cfg.Subjects,
		rcs:     newRCRegistry(cfg.AnnounceEvery, cfg.DeadAfter),
		sem:     make(chan struct{}, cfg.MaxInFlight),
		pending: map[string]*pending{},
		callers: map[string]int{},
		abort:   make(chan struct{}),
		ready:   make(chan struct{}),
		peers:   gwPeers{m: map[string]*gwPeer{}, gone: map[string]int64{}},
		sweeps:  make(chan string, 64),
	}
	reg := cfg.Registry
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	if g.met, err = newMetrics(reg, func() int { return len(g.rcs.List(time.Now())) }); err != nil {
		return nil, fmt.Errorf("gw: register metrics: %w", err)
	}
	return g, nil
}

// Ready is closed once the endpoints are registered and the GW serves.
func (g *GW) Ready() <-chan struct{} { return g.ready }

// RCs returns the RCs the GW currently knows, sorted by id.
func (g *GW) RCs() []RCInfo { return g.rcs.List(time.Now()) }

// WaitRCs blocks until ok holds for the known RCs, or ctx ends.
func (g *GW) WaitRCs(ctx context.Context, ok func([]RCInfo) bool) error {
	for {
		ch := g.rcs.Changed()
		if ok(g.RCs()) {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Run subscribes to RC announcements and answers, registers the micro
// endpoints and serves until ctx ends. Then it stops the micro service,
// lets requests in flight finish for Config.ShutdownGrace, answers the rest
// UNAVAILABLE and removes its subscriptions. It does not close the connection.
func (g *GW) Run(ctx context.Context) error {
	first := false
	g.runOnce.Do(func() { first = true })
	if !first {
		return errors.New("gw: Run called twice")
	}
	g.startupUntil = time.Now().Add(max(g.cfg.StartupWait, 0))
	g.startedAt = time.Now().UnixNano()
	if g.cfg.RequestLog != nil {
		rl, err := g.openRequestLog(ctx)
		if err != nil {
			return err
		}
		g.rlog = rl
	}

	var subs []*nats.Subscription
	unsubscribe := func() {
		for _, s := range subs {
			_ = s.Unsubscribe()
		}
	}
	for _, sub := range []struct {
		subject string
		cb      nats.MsgHandler
	}{
		{g.s.RCAnnouncePattern(), g.onAnnounce},
		{g.s.RCHeartbeatPattern(), g.onHeartbeat},
		{g.s.GWAnswerPattern(g.cfg.ID), g.onAnswer},
		{g.s.GWHeartbeatPattern(), g.onGWHeartbeat},
	} {
		s, err := g.nc.Subscribe(sub.subject, sub.cb)
		if err != nil {
			unsubscribe()
			return fmt.Errorf("gw: subscribe %s: %w", sub.subject, err)
		}
		subs = append(subs, s)
	}
	// Answers can be large and chunked: a subscription that hits the default
	// pending limits becomes a slow consumer and loses chunks.
	if err := subs[2].SetPendingLimits(-1, int(min(4*g.cfg.MaxAnswerBytes, 1<<31-1))); err != nil {
		unsubscribe()
		return fmt.Errorf("gw: answer subscription limits: %w", err)
	}
	if err := g.nc.Flush(); err != nil {
		unsubscribe()
		return fmt.Errorf("gw: flush subscriptions: %w", err)
	}

	svc, err := micro.AddService(g.nc, micro.Config{
		Name:        g.s.ServiceName(subjects.ServiceGW),
		Version:     g.cfg.Version,
		Description: "sg service gateway: getData, ping, getMeta, sql",
		Metadata:    map[string]string{"gw_id": g.cfg.ID, "affinity": g.cfg.Affinity},
	})
	if err != nil {
		unsubscribe()
		return fmt.Errorf("gw: add micro service: %w", err)
	}
	grp := svc.AddGroup(g.s.GWAPIGroup())
	for _, api := range subjects.APIs {
		if err := grp.AddEndpoint(api, endpoint{g: g, api: api}, micro.WithEndpointMetadata(map[string]string{"api": api})); err != nil {
			_ = svc.Stop()
			unsubscribe()
			return fmt.Errorf("gw: add endpoint %s: %w", api, err)
		}
	}
	// Ready means serving: the endpoints' subscriptions are known to the server.
	if err := g.nc.Flush(); err != nil {
		_ = svc.Stop()
		unsubscribe()
		return fmt.Errorf("gw: flush endpoint subscriptions: %w", err)
	}
	// Heartbeats, RC pruning and request log sweeps run beside the
	// endpoints and stop with them.
	bgCtx, bgStop := context.WithCancel(context.Background())
	var bg sync.WaitGroup
	bg.Add(1)
	go func() { defer bg.Done(); g.heartbeatLoop(bgCtx) }()
	if g.rlog != nil {
		bg.Add(1)
		go func() { defer bg.Done(); g.sweeper(bgCtx) }()
		g.requestSweep(g.cfg.ID) // this GW's earlier incarnation
	}
	close(g.ready)
	g.log.Info().Str("subject", g.s.GWAPIPattern()).Str("answers", g.s.GWAnswerPattern(g.cfg.ID)).
		Dur("timeout", g.cfg.Timeout).Dur("timeout_margin", g.cfg.TimeoutMargin).
		Str("affinity", g.cfg.Affinity).Bool("request_log", g.rlog != nil).Msg("gw serving")

	<-ctx.Done()

	g.mu.Lock()
	g.closing = true
	g.mu.Unlock()
	if err := svc.Stop(); err != nil {
		g.log.Warn().Err(err).Msg("stop micro service")
	}
	g.handlers.Wait() // handler calls that were under way when it stopped
	idle := make(chan struct{})
	go func() { g.wg.Wait(); close(idle) }()
	grace := time.NewTimer(g.cfg.ShutdownGrace)
	defer grace.Stop()
	select {
	case <-idle:
	case <-grace.C:
		g.log.Warn().Dur("grace", g.cfg.ShutdownGrace).Msg("requests still in flight after the shutdown grace; answering them UNAVAILABLE")
		close(g.abort)
		<-idle
	}
	bgStop()
	bg.Wait()
	// Peers adopt what this GW left open at once, rather than after three
	// missed heartbeats.
	g.beat(true)
	unsubscribe()
	g.log.Info().Msg("gw stopped")
	return nil
}

// --- RC announcements ---

func (g *GW) onAnnounce(m *nats.Msg) {
	a, err := messages.DecodeValid[messages.RCAnnouncement](m.Data)
	if err != nil {
		g.log.Warn().Err(err).Str("subject", m.Subject).Msg("dropping malformed RC announcement")
		return
	}
	g.rcs.announce(&a, time.Now())
	g.log.Debug().Str("rc_id", a.RCID).Str("assembly", a.Assembly).Int("outstanding", a.Outstanding).
		Bool("draining", a.Draining).Msg("RC announced")
}

func (g *GW) onHeartbeat(m *nats.Msg) {
	h, err := messages.DecodeValid[messages.RCHeartbeat](m.Data)
	if err != nil {
		g.log.Warn().Err(err).Str("subject", m.Subject).Msg("dropping malformed RC heartbeat")
		return
	}
	g.rcs.heartbeat(&h, time.Now())
}

// --- answers ---

// onAnswer runs on the answer subscription's goroutine, one message at a
// time; it alone touches pending.streams.
func (g *GW) onAnswer(m *nats.Msg) {
	id := m.Subject[strings.LastIndexByte(m.Subject, '.')+1:]
	g.mu.Lock()
	p := g.pending[id]
	g.mu.Unlock()
	if p == nil {
		// First answer per request id wins: this one is a duplicate, or late.
		g.met.dropped.Inc()
		g.log.Debug().Str("request_id", id).Msg("dropping answer for a request already answered")
		return
	}
	if m.Header.Get(messages.HdrChunkCount) == "" && m.Header.Get(messages.HdrChunkIndex) == "" {
		g.finish(p, answer{header: m.Header, data: m.Data})
		return
	}
	stream := m.Header.Get(messages.HdrChunkStream)
	ra := p.streams[stream]
	if ra == nil {
		if len(p.streams) >= maxStreamsPerRequest {
			g.met.dropped.Inc()
			return
		}
		ra = messages.NewReassembler(g.cfg.MaxAnswerBytes)
		p.streams[stream] = ra
	}
	done, err := ra.Add(m.Header, m.Data)
	if err != nil {
		g.finish(p, answer{header: ra.Header(), err: err})
		return
	}
	if done {
		payload, err := ra.Payload()
		g.finish(p, answer{header: ra.Header(), data: payload, err: err})
	}
}

// claim removes a request from pending; only the caller that removes it
// may answer it, so every request is answered exactly once.
func (g *GW) claim(id string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if _, ok := g.pending[id]; !ok {
		return false
	}
	delete(g.pending, id)
	return true
}

func (g *GW) finish(p *pending, a answer) {
	if !g.claim(p.id) {
		g.met.dropped.Inc()
		return
	}
	p.done <- a
}

// --- client requests ---

// handle is the micro handler: it never blocks, it hands the request to a
// goroutine or refuses it at once.
// endpoint is one API's micro handler. A value, not a closure: micro copies
// it into the endpoint before subscribing, so no captured variable is
// shared with the handler's goroutine.
type endpoint struct {
	g   *GW
	api string
}

func (e endpoint) Handle(r micro.Request) { e.g.handle(e.api, r) }

func (g *GW) handle(api string, r micro.Request) {
	msg := &nats.Msg{Subject: r.Subject(), Reply: r.Reply(), Header: nats.Header(r.Headers()), Data: r.Data()}
	received := time.Now()
	// The reply subject is the caller's word: answer only where a client may
	// listen (an inbox), never onto an sg or system subject.
	if err := g.checkReply(msg.Reply); err != nil {
		g.met.refusedReply.Inc()
		g.log.Warn().Err(err).Str("api", api).Str("client_request_id", safeLabel(msg.Header.Get(messages.HdrRequestID))).
			Msg("dropping request: its reply subject is not a client inbox")
		return
	}
	caller := callerOf(msg.Reply)
	g.mu.Lock()
	// Every handler call is counted, refusals too: Run waits for them after
	// stopping the endpoints, so nothing logs or answers after it returns.
	g.handlers.Add(1)
	defer g.handlers.Done()
	if g.closing {
		g.mu.Unlock()
		g.refuse(api, msg, received, messages.Errorf(messages.CodeUnavailable, messages.CodeErr,
			"The service gateway is shutting down; retry on another"), "", 0)
		return
	}
	if n := g.callers[caller]; n >= g.cfg.MaxInFlightPerCaller {
		g.mu.Unlock()
		g.met.limited.WithLabelValues(LimitInFlightPerCaller).Inc()
		g.refuse(api, msg, received, messages.Errorf(messages.CodeRateLimited, messages.CodeErr,
			"Limit %s: this caller has %d requests in flight at this gateway, the most it may have; retry after %d s",
			LimitInFlightPerCaller, n, retryAfterSeconds), LimitInFlightPerCaller, retryAfterSeconds)
		return
	}
	select {
	case g.sem <- struct{}{}:
	default:
		g.mu.Unlock()
		g.met.busy.Inc()
		g.met.limited.WithLabelValues(LimitInFlight).Inc()
		g.refuse(api, msg, received, messages.Errorf(messages.CodeRateLimited, messages.CodeErr,
			"Limit %s: the service gateway is busy with %d requests in flight; retry after %d s",
			LimitInFlight, g.cfg.MaxInFlight, retryAfterSeconds), LimitInFlight, retryAfterSeconds)
		return
	}
	g.callers[caller]++
	g.wg.Add(1)
	g.mu.Unlock()
	g.met.inFlight.Inc()
	go func() {
		defer g.wg.Done()
		defer func() {
			g.mu.Lock()
			if g.callers[caller]--; g.callers[caller] <= 0 {
				delete(g.callers, caller)
			}
			g.mu.Unlock()
			<-g.sem
		}()
		defer g.met.inFlight.Dec()
		g.serve(api, msg, received)
	}()
}

// Names of the limits a refusal names in messages.HdrLimit.
const (
	// LimitInFlight: Config.MaxInFlight, requests open at this GW.
	LimitInFlight = "gw_in_flight"
	// LimitInFlightPerCaller: Config.MaxInFlightPerCaller, requests open at
	// this GW for one caller.
	LimitInFlightPerCaller = "gw_in_flight_per_caller"
)

// retryAfterSeconds is the Sg-Retry-After of a refusal over an in-flight
// limit: requests finish in well under a second typically; a second is a
// pause that lets some of them.
const retryAfterSeconds = 1

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
	// pending entry, log entry and answer subject, and with DriveID the id
	// of each drive at the RC, DAPs and Agg. clientID is the caller's
	// Sg-Request-Id: a label, echoed on the answer and logged, never a key.
	id       string
	clientID string
	caller   string // callerOf(reply): what per-caller limits count
	reply    string
	content  messages.Content
	logCorr  string
	received time.Time
	rcID     string
	log      zerolog.Logger
	base     *zerolog.Logger // log without the RC of the current drive
}

func (g *GW) newReqInfo(api string, msg *nats.Msg, received time.Time) *reqInfo {
	ri := &reqInfo{api: api, reply: msg.Reply, caller: callerOf(msg.Reply), received: received, id: nuid.Next(),
		clientID: msg.Header.Get(messages.HdrRequestID)}
	if ri.clientID == "" || subjects.Validate("request id", ri.clientID) != nil {
		ri.clientID = ri.id // an invalid given id is reported by serve; none: the GW's id is the label
	}
	// Answer in the client's encoding; when it cannot be told, JSON is the
	// one a human with a plain NATS client can read.
	c, err := messages.DetectContent(msg.Header, msg.Data)
	if err != nil {
		c = messages.ContentJSON
	}
	ri.content = c
	ri.log = g.log.With().Str("request_id", ri.id).Str("client_request_id", ri.clientID).Str("api", api).Logger()
	return ri
}

// refuse answers a request without taking a slot (shutting down, over a
// limit); limit and retryAfter, when set, name the limit and the pause.
func (g *GW) refuse(api string, msg *nats.Msg, received time.Time, st messages.Status, limit string, retryAfter int) {
	ri := g.newReqInfo(api, msg, received)
	h := nats.Header{}
	if limit != "" {
		h.Set(messages.HdrLimit, limit)
		messages.SetUint(h, messages.HdrRetryAfter, uint64(retryAfter))
	}
	g.respondStatusWith(ri, st, h)
}

// serve runs one request from decoding to its answer.
func (g *GW) serve(api string, msg *nats.Msg, received time.Time) {
	ri := g.newReqInfo(api, msg, received)
	if ri.reply == "" {
		ri.log.Warn().Str("subject", msg.Subject).Msg("dropping request without a reply subject: nobody to answer")
		return
	}
	sub, st := g.prepare(ri, msg)
	if !st.IsOK() {
		g.respondStatus(ri, st)
		return
	}
	g.submitAndWait(ri, sub)
}

func bad(format string, args ...any) messages.Status {
	return messages.Errorf(messages.CodeBadRequest, messages.CodeErr, format, args...)
}

// prepare decodes and checks a request and builds its submission; a status
// that is not OK is the answer.
func (g *GW) prepare(ri *reqInfo, msg *nats.Msg) (*messages.RCSubmission, messages.Status) {
	if n := len(msg.Data); n > g.cfg.MaxRequestBytes {
		return nil, messages.Errorf(messages.CodeTooLarge, messages.CodeErr,
			"Request of %d bytes is above the limit of %d bytes", n, g.cfg.MaxRequestBytes)
	}
	if given := msg.Header.Get(messages.HdrRequestID); given != "" && given != ri.clientID {
		return nil, bad("Header %s: %v", messages.HdrRequestID, subjects.Validate("request id", given))
	}
	req, err := messages.DecodeRequest(msg.Header, msg.Data)
	if err != nil {
		if errors.Is(err, messages.ErrVersion) {
			return nil, messages.Errorf(messages.CodeNotSupported, messages.CodeErr, "Request: %v", err)
		}
		return nil, bad("Malformed request: %v", err)
	}
	ri.content = req.Content
	if req.Header.Opts.LogCorr != "" {
		ri.logCorr = req.Header.Opts.LogCorr
		ri.log = ri.log.With().Str("log_corr", ri.logCorr).Logger()
	}
	if !slices.Contains(subjects.APIs, req.Header.API) {
		return nil, messages.Errorf(messages.CodeUnknownAPI, messages.CodeErr,
			"Unknown API %q: the gateway serves %s", req.Header.API, strings.Join(subjects.APIs, ", "))
	}
	if req.Header.API != ri.api {
		return nil, bad("Request names api %q but was sent to the %s endpoint (%s)", req.Header.API, ri.api, msg.Subject)
	}
	if req.Header.Opts.Async {
		return nil, messages.Errorf(messages.CodeNotSupported, messages.CodeErr, "opts.async is not supported yet")
	}
	// Seed: the scope is given in the request arguments; lift it into the header.
	if req.Content == messages.ContentJSON && req.Header.Scope == (messages.Scope{}) && len(req.Payload) > 0 {
		var w struct {
			Scope messages.Scope `json:"scope"`
		}
		if json.Unmarshal(req.Payload, &w) == nil && w.Scope != (messages.Scope{}) {
			req.Header.Scope = w.Scope
			if err := req.Header.Validate(); err != nil {
				return nil, bad("Malformed request: %v", err)
			}
		}
	}
	// scope.tier narrows an assembly to one tier; alone it names nothing.
	if req.Header.Scope.Tier != "" && req.Header.Scope.Assembly == "" {
		return nil, bad("scope.tier is valid only with scope.assembly")
	}
	args, st := g.decodeArgs(&req)
	if !st.IsOK() {
		return nil, st
	}
	return &messages.RCSubmission{
		V: messages.RCVersion, RequestID: ri.id, GWID: g.cfg.ID, Header: req.Header, Args: args,
		ReplyTo: g.s.GWAnswer(g.cfg.ID, ri.id), Content: req.Content, ReceivedAt: ri.received.UnixNano(),
	}, messages.StatusOK
}

// decodeArgs decodes the API's arguments in the client's encoding, checks
// them, and re-encodes them as msgpack for the RC.
func (g *GW) decodeArgs(req *messages.Request) (msgpack.RawMessage, messages.Status) {
	switch req.Header.API {
	case subjects.APISQL:
		return nil, messages.Errorf(messages.CodeNotSupported, messages.CodeErr, "API sql is not supported yet")
	case subjects.APIGetData:
		if len(req.Payload) == 0 {
			return nil, bad("getData needs arguments: at least a table")
		}
		var a messages.GetDataArgs
		var err error
		if req.Content == messages.ContentJSON {
			a, err = messages.DecodeGetDataArgsJSON(req.Payload)
		} else {
			a, err = messages.DecodeGetDataArgsMsgpack(req.Payload)
		}
		if err == nil {
			err = a.Validate()
		}
		if err != nil {
			return nil, bad("Bad getData arguments: %v", err)
		}
		return encodeArgs(a)
	case subjects.APIPing:
		var a messages.PingArgs
		var err error
		if req.Content == messages.ContentJSON {
			a, err = messages.DecodePingArgsJSON(req.Payload)
		} else {
			a, err = messages.DecodePingArgsMsgpack(req.Payload)
		}
		if err == nil {
			err = a.Validate()
		}
		if err != nil {
			return nil, bad("Bad ping arguments: %v", err)
		}
		return encodeArgs(a)
	case subjects.APIGetMeta:
		if !emptyArgs(req.Content, req.Payload) {
			return nil, bad("getMeta takes no arguments")
		}
		return nil, messages.StatusOK
	}
	return nil, messages.Errorf(messages.CodeUnknownAPI, messages.CodeErr, "Unknown API %q", req.Header.API)
}

func encodeArgs(v any) (msgpack.RawMessage, messages.Status) {
	b, err := messages.Encode(v)
	if err != nil {
		return nil, messages.Errorf(messages.CodeInternal, messages.CodeErr, "re-encode arguments: %v", err)
	}
	return b, messages.StatusOK
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

// whyShutdown: chooseRC gave up because the GW is stopping.
const whyShutdown = "gw shutting down"

// chooseRC picks the RC for a scope. Early after start it waits (up to
// Config.StartupWait) for RCs to announce themselves rather than failing the
// first requests.
func (g *GW) chooseRC(assembly string) (string, int64, string) {
	for {
		ch := g.rcs.Changed()
		id, started, why := g.rcs.pick(assembly, g.cfg.Affinity, time.Now())
		if id != "" {
			return id, started, ""
		}
		// Early after start, or while the scope's RCs restart, wait for one.
		until := g.startupUntil
		if f := g.rcs.Failover(assembly, g.cfg.Affinity); f.After(until) {
			until = f
		}
		wait := time.Until(until)
		if wait <= 0 {
			return "", 0, why
		}
		t := time.NewTimer(wait)
		select {
		case <-ch:
		case <-t.C:
		case <-g.abort:
			t.Stop()
			return "", 0, whyShutdown
		}
		t.Stop()
	}
}

func (g *GW) submitAndWait(ri *reqInfo, sub *messages.RCSubmission) {
	rcID, rcStarted, why := g.chooseRC(sub.Header.Scope.Assembly)
	if why == whyShutdown {
		g.respondStatus(ri, messages.Errorf(messages.CodeUnavailable, messages.CodeErr,
			"The service gateway is shutting down; retry on another"))
		return
	}
	if rcID == "" {
		ri.log.Info().Str("assembly", sub.Header.Scope.Assembly).Str("why", why).Msg("no RC for the request")
		g.respondStatus(ri, messages.Errorf(messages.CodeNoResources, messages.CodeErr, TextNoResources))
		return
	}
	timeout := g.cfg.Timeout
	if ms := sub.Header.Opts.TimeoutMS; ms > 0 {
		timeout = time.Duration(ms) * time.Millisecond
	}
	if g.rlog != nil && timeout+g.cfg.TimeoutMargin >= g.cfg.RequestLog.MaxAge {
		g.respondStatus(ri, bad("Timeout %s plus the margin %s is not below the request log's retention %s",
			timeout, g.cfg.TimeoutMargin, g.cfg.RequestLog.MaxAge))
		return
	}
	deadline := ri.received.Add(timeout)
	sub.Deadline = deadline.UnixNano()

	p := &pending{id: ri.id, done: make(chan answer, 1), streams: map[string]*messages.Reassembler{}}
	g.mu.Lock()
	// ri.id is the GW's own (nuid): unique, so nothing of another request,
	// or of an earlier try of this one with the same client id, is shared.
	g.pending[ri.id] = p
	g.mu.Unlock()

	d := &driveState{sub: *sub, rcID: rcID, rcStarted: rcStarted, deadline: deadline}
	// "Every accepted request is logged before it is dispatched."
	if g.rlog != nil {
		ref, err := g.rlog.create(messages.LogEntry{V: messages.RecoveryVersion, RequestID: ri.id, ClientRequestID: ri.clientID,
			Caller: ri.caller, State: messages.LogOpen,
			GWID: g.cfg.ID, GWStarted: g.startedAt, ClientReply: ri.reply, API: ri.api, Content: ri.content,
			LogCorr: ri.logCorr, Submission: *sub, RCID: rcID, RCStarted: rcStarted})
		if err != nil {
			g.met.logErrors.WithLabelValues("create").Inc()
			ri.log.Error().Err(err).Msg("request log write failed; refusing the request")
			if g.claim(ri.id) {
				g.respondStatus(ri, messages.Errorf(messages.CodeUnavailable, messages.CodeErr,
					"The request could not be logged: %v; retry later", err))
			}
			return
		}
		d.ref = ref
	}
	g.drive(ri, p, d, driveNew)
}

// driveState is one request's current drive: the submission as the RC got
// it, which RC incarnation has it, and its log entry.
type driveState struct {
	sub       messages.RCSubmission // RequestID is the client's id; the drive's id is DriveID(id, drive)
	drive     uint32
	rcID      string
	rcStarted int64
	deadline  time.Time
	ref       *logRef
}

type driveStart int

const (
	driveNew     driveStart = iota // submit to the chosen RC
	driveAdopted                   // taken over from the log: drive again, or time out
)

// drive submits a request and waits for its one answer. When the RC that has
// it restarts, drains or falls silent, the request is driven again, under a
// new drive id, on an RC chosen afresh: the RC's state is gone, and nothing
// of the old drive can mix into the new one at the DAPs or the Agg. Past the
// deadline there is nothing to drive: the GW answers the timeout.
func (g *GW) drive(ri *reqInfo, p *pending, d *driveState, start driveStart) {
	clientID := ri.id
	if start == driveAdopted {
		clientID = d.ref.entry.RequestID
	}
	d.sub.RequestID = messages.DriveID(clientID, d.drive)
	timeoutStatus := messages.Status{RC: messages.CodeTimeout, AC: messages.CodeErr, AI: TextTimeout}
	switch {
	case start == driveAdopted && !time.Now().Before(d.deadline):
		g.answerStatus(ri, p, d, timeoutStatus)
		return
	case start == driveAdopted:
		if !g.redrive(ri, p, d, clientID, "adopted") {
			return
		}
	default:
		if !g.submit(ri, p, d) {
			return
		}
	}
	t := time.NewTimer(time.Until(d.deadline.Add(g.cfg.TimeoutMargin)))
	defer t.Stop()
	for {
		var gone <-chan struct{}
		if d.rcID != "" {
			gone = g.rcs.Gone(d.rcID, d.rcStarted)
		} else {
			gone = g.rcs.Changed() // waiting for any RC to drive it on
		}
		select {
		case a := <-p.done:
			g.settle(ri, p, d, &a, messages.Status{})
			return
		case <-gone:
			if !time.Now().Before(d.deadline) {
				// The RC that held it is gone and the deadline has passed:
				// nobody else will answer.
				g.answerStatus(ri, p, d, timeoutStatus)
				return
			}
			why := "rc " + d.rcID + " gone"
			if d.rcID == "" {
				why = "rc available"
			}
			if !g.redrive(ri, p, d, clientID, why) {
				return
			}
		case <-t.C:
			g.answerStatus(ri, p, d, timeoutStatus)
			return
		case <-g.abort:
			if g.rlog != nil {
				// Shut down unanswered: the entry stays open for a peer GW or
				// this GW's next incarnation to adopt.
				g.claim(ri.id)
				ri.log.Info().Msg("left unanswered at shutdown; the request log keeps it for adoption")
				return
			}
			g.answerStatus(ri, p, d, messages.Errorf(messages.CodeUnavailable, messages.CodeErr, "The service gateway shut down before the request was answered"))
			return
		}
	}
}

// submit publishes the current drive to its RC; false when the request was
// answered (with an error) instead.
func (g *GW) submit(ri *reqInfo, p *pending, d *driveState) bool {
	ri.rcID = d.rcID
	if ri.base == nil {
		base := ri.log
		ri.base = &base
	}
	ri.log = ri.base.With().Str("rc_id", d.rcID).Uint32("drive", d.drive).Logger()
	body, err := messages.Encode(&d.sub)
	if err == nil {
		h := nats.Header{}
		messages.Routing{RequestID: d.sub.RequestID, API: ri.api, Deadline: d.sub.Deadline, LogCorr: ri.logCorr, Content: d.sub.Content}.Write(h)
		messages.SetString(h, messages.HdrClientRequestID, ri.clientID)
		messages.SetString(h, messages.HdrCaller, ri.caller)
		err = g.nc.PublishMsg(&nats.Msg{Subject: g.s.RCSubmit(d.rcID), Header: h, Data: body})
	}
	if err != nil {
		if g.claim(ri.id) {
			g.settle(ri, p, d, nil, messages.Errorf(messages.CodeUnavailable, messages.CodeErr, "Could not submit the request to RC %s: %v", d.rcID, err))
		}
		return false
	}
	g.met.byRC.WithLabelValues(d.rcID).Inc()
	ri.log.Debug().Time("deadline", d.deadline).Uint32("drive", d.drive).Msg("request submitted")
	return true
}

// redrive starts a new drive on an RC chosen afresh. With no RC to take it,
// the request waits (rcID "") for one until its deadline. False when the
// request is no longer this GW's to answer.
func (g *GW) redrive(ri *reqInfo, p *pending, d *driveState, clientID, why string) bool {
	rcID, rcStarted, _ := g.rcs.pick(d.sub.Header.Scope.Assembly, g.cfg.Affinity, time.Now())
	if rcID == "" {
		d.rcID, d.rcStarted = "", 0
		ri.log.Info().Str("why", why).Msg("no RC to drive the request again yet; waiting")
		return true
	}
	d.drive++
	d.rcID, d.rcStarted = rcID, rcStarted
	d.sub.RequestID = messages.DriveID(clientID, d.drive)
	if d.ref != nil {
		d.ref.entry.Drive, d.ref.entry.RCID, d.ref.entry.RCStarted, d.ref.entry.Submission = d.drive, rcID, rcStarted, d.sub
		if err := g.rlog.update(d.ref); err != nil {
			if errors.Is(err, errLogConflict) {
				g.claim(ri.id)
				ri.log.Info().Msg("request taken over by another GW; leaving it to that GW")
				return false
			}
			g.met.logErrors.WithLabelValues("update").Inc()
			ri.log.Warn().Err(err).Msg("request log update failed; driving on")
		}
	}
	g.met.redrives.WithLabelValues(redriveReason(why)).Inc()
	ri.log.Info().Str("why", why).Uint32("drive", d.drive).Str("new_rc", rcID).Msg("driving the request again")
	return g.submit(ri, p, d)
}

func redriveReason(why string) string {
	switch why {
	case "adopted", "rc available":
		return why
	}
	return "rc gone"
}

// answerStatus answers with st, unless an answer has just won the race.
func (g *GW) answerStatus(ri *reqInfo, p *pending, d *driveState, st messages.Status) {
	if g.claim(ri.id) {
		g.settle(ri, p, d, nil, st)
		return
	}
	a := <-p.done
	g.settle(ri, p, d, &a, messages.Status{})
}

// settle answers the client once: the answer a, or status st. The pending
// entry has been claimed by the caller. With a request log, the entry is
// closed first; if another GW has taken the request over, this GW stays
// silent and that GW answers.
func (g *GW) settle(ri *reqInfo, p *pending, d *driveState, a *answer, st messages.Status) {
	if d.ref != nil {
		if err := g.rlog.close(d.ref); errors.Is(err, errLogConflict) {
			g.met.dropped.Inc()
			ri.log.Info().Msg("request taken over by another GW; not answering here")
			return
		} else if err != nil {
			g.met.logErrors.WithLabelValues("close").Inc()
			ri.log.Warn().Err(err).Msg("request log close failed; answering anyway")
		}
	}
	if a != nil {
		g.forward(ri, *a)
	} else {
		g.respondStatus(ri, st)
	}
	if d.ref != nil {
		g.rlog.purge(d.ref.subject)
	}
}

// forward sends an RC's or Agg's answer to the client unchanged.
func (g *GW) forward(ri *reqInfo, a answer) {
	if a.err != nil {
		if errors.Is(a.err, messages.ErrTooLarge) {
			g.respondStatus(ri, messages.Errorf(messages.CodeTooLarge, messages.CodeErr, "Answer is too large for the gateway: %v", a.err))
		} else {
			g.respondStatus(ri, messages.Errorf(messages.CodeErr, messages.CodeErr, "Answer could not be received whole: %v", a.err))
		}
		return
	}
	h := make(nats.Header, len(a.header)+2)
	for k, vs := range a.header {
		h[k] = vs
	}
	// Every drive runs under the GW's id (id~n after the first): the caller
	// sees its own id.
	if got := h.Get(messages.HdrRequestID); got != ri.clientID {
		h.Set(messages.HdrRequestID, ri.clientID)
		if got != "" {
			if resp, err := messages.DecodeResponse(h, a.data); err == nil && resp.Header.RequestID != ri.clientID {
				resp.Header.RequestID = ri.clientID
				if b, err := resp.Encode(); err == nil {
					a.data = b
				}
			}
		}
	}
	st, err := messages.ReadStatus(h)
	if err != nil {
		ri.log.Warn().Err(err).Msg("answer without a valid status header; forwarding it as is")
		st = messages.Status{RC: messages.CodeErr, AC: messages.CodeErr}
	}
	g.send(ri, h, a.data, st)
}

// respondStatus answers with a status and no payload, in the client's encoding.
func (g *GW) respondStatus(ri *reqInfo, st messages.Status) { g.respondStatusWith(ri, st, nil) }

// respondStatusWith is respondStatus with extra headers (a limit's name and
// Sg-Retry-After).
func (g *GW) respondStatusWith(ri *reqInfo, st messages.Status, extra nats.Header) {
	resp := messages.Response{
		Header:  messages.ResponseHeader{V: messages.RequestVersion, RequestID: ri.clientID, API: ri.api, LogCorr: ri.logCorr, Status: st},
		Content: ri.content,
	}
	body, err := resp.Encode()
	if err != nil { // a header alone always encodes; keep the client informed anyway
		ri.log.Error().Err(err).Msg("encode error answer")
	}
	h := nats.Header{}
	for k, vs := range extra {
		h[k] = vs
	}
	st.Write(h)
	messages.SetString(h, messages.HdrRequestID, ri.clientID)
	messages.SetString(h, messages.HdrAPI, ri.api)
	messages.SetString(h, messages.HdrLogCorr, ri.logCorr)
	messages.SetString(h, messages.HdrContentType, string(ri.content))
	g.send(ri, h, body, st)
}

// send publishes an answer on the client's reply subject, in chunks when it
// is above the max payload, and records it.
func (g *GW) send(ri *reqInfo, h nats.Header, body []byte, st messages.Status) {
	var err error
	chunks := 1
	if ri.reply != "" {
		if int64(len(body))+int64(wireHeaderSize(h)) <= g.nc.MaxPayload() {
			err = g.nc.PublishMsg(&nats.Msg{Subject: ri.reply, Header: h, Data: body})
		} else {
			chunks, err = messages.SendChunked(g.nc, ri.reply, h, body, 0)
		}
	}
	elapsed := time.Since(ri.received)
	g.met.requests.WithLabelValues(ri.api, st.RC.String()).Inc()
	g.met.latency.WithLabelValues(ri.api).Observe(elapsed.Seconds())
	ev := ri.log.Info()
	if err != nil {
		ev = ri.log.Error().Err(err)
	}
	ev.Str("rc", st.RC.String()).Str("ac", st.AC.String()).Str("ai", st.AI).Int("bytes", len(body)).
		Int("chunks", chunks).Dur("elapsed", elapsed).Msg("request answered")
}

func wireHeaderSize(h nats.Header) int {
	n := len("NATS/1.0\r\n") + 2
	for k, vs := range h {
		for _, v := range vs {
			n += len(k) + len(v) + 4
		}
	}
	return n
}
