package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/sg-project/sg/services/defaults"
	"github.com/sg-project/sg/services/gw"
	"github.com/sg-project/sg/services/gw/httpapi"
	"github.com/sg-project/sg/subjects"
)

// defaultHTTPListen is where sg run serves the HTTP API unless told otherwise.
const defaultHTTPListen = "127.0.0.1:8080"

// The HTTP adapter's bounds on slow callers (README, Over HTTP).
var (
	envHTTPChunkIdle       = envVar{"SG_HTTP_CHUNK_IDLE", ""}        // wait for an answer's next message, and for its caller to take a piece
	envHTTPMaxBacklogBytes = envVar{"SG_HTTP_MAX_BACKLOG_BYTES", ""} // one answer's messages held for a slow caller
	envHTTPMaxBacklogTotal = envVar{"SG_HTTP_MAX_BACKLOG_TOTAL", ""} // every answer's together
)

// loadHTTPConfig reads the HTTP adapter's bounds from the environment; what
// is not set keeps its default (services/defaults).
func loadHTTPConfig(look lookupFunc) (httpapi.Config, error) {
	var c httpapi.Config
	var err error
	if c.ChunkIdle, err = envDuration(look, envHTTPChunkIdle, defaults.HTTPChunkIdle); err != nil {
		return c, err
	}
	one, err := envInt(look, envHTTPMaxBacklogBytes, defaults.HTTPMaxBacklogBytes, 1)
	if err != nil {
		return c, err
	}
	all, err := envInt(look, envHTTPMaxBacklogTotal, defaults.HTTPMaxBacklogTotal, 1)
	if err != nil {
		return c, err
	}
	if all < one {
		return c, fmt.Errorf("SG_HTTP_MAX_BACKLOG_TOTAL=%d is below SG_HTTP_MAX_BACKLOG_BYTES=%d: every answer's backlog together must hold one answer's", all, one)
	}
	c.MaxBacklogBytes, c.MaxBacklogTotal = int64(one), int64(all)
	return c, nil
}

// serveHTTPAPI serves sg's HTTP API on addr until ctx ends, as a NATS client
// of the GW on nc; it returns the address it listens on ("" = off). c holds
// the adapter's bounds (loadHTTPConfig). Its goroutines stop with ctx; done
// is closed when the server has stopped. g, when not nil, is the GW in this
// process: /v1/health says its readiness.
func serveHTTPAPI(ctx context.Context, addr string, c httpapi.Config, nc *nats.Conn, s subjects.Subjects, g *gw.GW, log zerolog.Logger) (bound string, done <-chan struct{}, err error) {
	closed := make(chan struct{})
	if addr == "" {
		close(closed)
		return "", closed, nil
	}
	c.Subjects, c.Log = s, log
	if g != nil {
		c.GatewayReady = func() (bool, string) { r := g.Readiness(); return r.Ready, r.Reason }
	}
	a, err := httpapi.New(nc, c)
	if err != nil {
		return "", nil, err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		_ = a.Close()
		return "", nil, fmt.Errorf("http listen %s: %w", addr, err)
	}
	srv := &http.Server{Handler: a.Handler(), ReadHeaderTimeout: 10 * time.Second}
	go func() {
		defer close(closed)
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error().Err(err).Msg("HTTP API stopped")
		}
	}()
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx) // in-flight requests get their answers first
		_ = a.Close()
	}()
	log.Info().Str("addr", ln.Addr().String()).Msg("HTTP API at /v1")
	return ln.Addr().String(), closed, nil
}
