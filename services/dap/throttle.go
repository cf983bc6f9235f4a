package dap

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"github.com/sg-project/sg/messages"
	"github.com/sg-project/sg/services/agg/merge"
	"github.com/sg-project/sg/services/dap/ratelimit"
	"github.com/sg-project/sg/subjects"
)

// Downstream rate limits (issue 12). A source that calls a remote endpoint
// (an object store, a remote database, an HTTP API) does so through the
// endpoint's rate-limit actor (services/dap/ratelimit). When the endpoint
// asks for a pause, the DAP does not hold the portion for the pause: it
// answers it THROTTLED (rc RATE_LIMITED, with the pause and the endpoint's
// key in headers), and the RC places it again, on a replica that calls
// another endpoint or after the pause.

// SourceActorConfig is the rate-limit actor configuration for DAP sources:
// a call inside a pause fails at once (FailFast) and a refused call is not
// tried again by the actor (MaxAttempts 1), so the RC decides where and
// when the portion runs.
func SourceActorConfig(m *ratelimit.Metrics, log zerolog.Logger) ratelimit.Config {
	return ratelimit.Config{FailFast: true, MaxAttempts: 1, Metrics: m, Log: log}
}

// RemoteSource is a Source that must call a remote endpoint before it can
// run a portion: Call goes through Actor (one per endpoint key, shared by
// every source of the process that calls that endpoint), then Inner runs
// the API. A *ratelimit.Error from Call asks for a pause.
type RemoteSource struct {
	Actor *ratelimit.Actor
	Call  func(ctx context.Context, slot int) error
	Inner Source
}

// Execute implements Source.
func (s RemoteSource) Execute(ctx context.Context, api string, args messages.Args, labels messages.LabelSet, rng messages.TimeRange) ([]byte, error) {
	if err := s.Actor.Do(ctx, s.Call); err != nil {
		return nil, err
	}
	return s.Inner.Execute(ctx, api, args, labels, rng)
}

// ExecuteRows implements RowCounter when Inner does.
func (s RemoteSource) ExecuteRows(ctx context.Context, api string, args messages.Args, labels messages.LabelSet, rng messages.TimeRange) ([]byte, int64, error) {
	rc, ok := s.Inner.(RowCounter)
	if !ok {
		b, err := s.Execute(ctx, api, args, labels, rng)
		return b, 0, err
	}
	if err := s.Actor.Do(ctx, s.Call); err != nil {
		return nil, 0, err
	}
	return rc.ExecuteRows(ctx, api, args, labels, rng)
}

// ExecutePartial implements PartialSource for getData when Inner does (ok
// false otherwise, before the call: ExecuteRows then makes it), so that a source
// behind a rate-limited endpoint sends its large partials in windows too.
func (s RemoteSource) ExecutePartial(ctx context.Context, api string, args messages.Args, labels messages.LabelSet, rng messages.TimeRange) (merge.Partial, bool, error) {
	ps, ok := s.Inner.(PartialSource)
	if !ok || api != subjects.APIGetData {
		return merge.Partial{}, false, nil
	}
	if err := s.Actor.Do(ctx, s.Call); err != nil {
		return merge.Partial{}, true, err
	}
	return ps.ExecutePartial(ctx, api, args, labels, rng)
}

// Schema implements SchemaSource when Inner does.
func (s RemoteSource) Schema(table string) ([]messages.ColumnSpec, bool) {
	if ss, ok := s.Inner.(SchemaSource); ok {
		return ss.Schema(table)
	}
	return nil, false
}

// throttled answers p THROTTLED when err is a rate-limit error (false
// otherwise): a completion to the RC with rc RATE_LIMITED, the pause and the
// endpoint key; no partial result goes to the Agg, since the request goes on.
func (d *DAP) throttled(p *messages.PortionDispatch, err error, elapsed time.Duration) bool {
	if err == nil {
		return false
	}
	// rl lives on the heap (errors.As takes its address): declared past the
	// nil check, so that a portion without an error does not pay for it.
	var rl *ratelimit.Error
	if !errors.As(err, &rl) {
		return false
	}
	key, delay := rl.Endpoint, rl.Delay
	if len(key) > messages.MaxRateLimitKeyLen {
		key = key[:messages.MaxRateLimitKeyLen]
	}
	if delay <= 0 {
		delay = ratelimit.DefaultMinPause
	}
	log := d.portionLog(p)
	log.Warn().Str("endpoint", key).Dur("pause", delay).Msg("portion answered THROTTLED: the source's endpoint asked for a pause")
	c := messages.PortionCompletion{V: messages.PortionVersion, RequestID: p.RequestID, PortionID: p.PortionID,
		Attempt: p.Attempt, DAPID: d.cfg.ID, Outcome: messages.OutcomeError, Code: messages.CodeRateLimited,
		Message:   fmt.Sprintf("DAP %s: endpoint %s asked for a pause of %s", d.cfg.ID, key, delay),
		ElapsedNS: int64(elapsed)}
	d.mu.Lock()
	c.PurviewVersion, c.ReferenceVintage = d.state.pv, d.state.rv
	purview := d.state.purview
	c.Purview = &purview
	d.mu.Unlock()
	if err := c.Validate(); err != nil {
		log.Error().Err(err).Msg("throttled completion not sent")
		return true
	}
	h := p.ReplyHeader(messages.Status{RC: messages.CodeRateLimited, AC: messages.CodeErr, AI: c.Message})
	messages.SetThrottle(h, key, delay)
	_ = d.publish(d.cfg.Subjects.RCCompletion(p.RCID), &c, h)
	return true
}

// ThrottleDemo returns a DemoFleetConfig.Wrap that puts a rate-limited test
// endpoint in front of every demo DAP (sg run --throttle): one
// ratelimit.Throttle per replica index ("demo-remote-<replica>"), like the
// seed's ad platform with its time at a tenth (a first pause of 1.5 s,
// escalating to 90 s), allowing rate calls a second, each reached through
// its endpoint's actor. With --replicas 2, a pause of one endpoint sends
// the work to the other replica.
func ThrottleDemo(ctx context.Context, rate float64, reg prometheus.Registerer, log zerolog.Logger) (func(DemoShard, Source) Source, error) {
	m, err := ratelimit.NewMetrics(reg)
	if err != nil {
		return nil, fmt.Errorf("dap: throttle demo metrics: %w", err)
	}
	const scale = 0.1
	actors := ratelimit.NewRegistry(ctx, SourceActorConfig(m, log), 0)
	var mu sync.Mutex
	endpoints := map[string]*ratelimit.Throttle{}
	return func(s DemoShard, src Source) Source {
		key := fmt.Sprintf("demo-remote-%d", s.Shard.Replica)
		mu.Lock()
		th := endpoints[key]
		if th == nil {
			th = ratelimit.NewThrottle(ratelimit.ThrottleConfig{Endpoint: key, Rate: rate * scale, Scale: scale})
			endpoints[key] = th
		}
		mu.Unlock()
		a, err := actors.Actor(key)
		if err != nil { // a key per replica: far below the limit
			log.Error().Err(err).Str("endpoint", key).Msg("throttle demo: source left unthrottled")
			return src
		}
		return RemoteSource{Actor: a, Call: func(ctx context.Context, _ int) error { return th.Call(ctx) }, Inner: src}
	}, nil
}
