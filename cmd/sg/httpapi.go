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

	"github.com/sg-project/sg/services/gw"
	"github.com/sg-project/sg/services/gw/httpapi"
	"github.com/sg-project/sg/subjects"
)

// defaultHTTPListen is where sg run serves the HTTP API unless told otherwise.
const defaultHTTPListen = "127.0.0.1:8080"

// serveHTTPAPI serves sg's HTTP API on addr until ctx ends, as a NATS client
// of the GW on nc; it returns the address it listens on ("" = off). Its
// goroutines stop with ctx; done is closed when the server has stopped. g,
// when not nil, is the GW in this process: /v1/health says its readiness.
func serveHTTPAPI(ctx context.Context, addr string, nc *nats.Conn, s subjects.Subjects, g *gw.GW, log zerolog.Logger) (bound string, done <-chan struct{}, err error) {
	closed := make(chan struct{})
	if addr == "" {
		close(closed)
		return "", closed, nil
	}
	c := httpapi.Config{Subjects: s, Log: log}
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
