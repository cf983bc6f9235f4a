package ratelimit

import (
	"context"
	"fmt"
	"sync"
)

// Registry holds one actor per endpoint key, started on first use, all
// stopped by the context given to NewRegistry.
type Registry struct {
	ctx context.Context
	cfg Config
	max int

	mu     sync.Mutex
	actors map[string]*Actor
}

// NewRegistry returns an empty registry whose actors use cfg. maxEndpoints
// bounds the number of actors (<= 0: DefaultMaxEndpoints).
func NewRegistry(ctx context.Context, cfg Config, maxEndpoints int) *Registry {
	if maxEndpoints <= 0 {
		maxEndpoints = DefaultMaxEndpoints
	}
	return &Registry{ctx: ctx, cfg: cfg, max: maxEndpoints, actors: map[string]*Actor{}}
}

// Actor returns the actor of key, starting it if it is the first call.
func (r *Registry) Actor(key string) (*Actor, error) {
	if key == "" || len(key) > MaxKeyLen {
		return nil, fmt.Errorf("ratelimit: %w: %d bytes (want 1..%d)", ErrBadKey, len(key), MaxKeyLen)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if a, ok := r.actors[key]; ok {
		return a, nil
	}
	if len(r.actors) >= r.max {
		return nil, fmt.Errorf("ratelimit: endpoint %s: %w (limit %d)", key, ErrTooManyEndpoints, r.max)
	}
	a := Start(r.ctx, key, r.cfg)
	r.actors[key] = a
	return a, nil
}

// Do runs fn through the actor of key (see Actor.Do).
func (r *Registry) Do(ctx context.Context, key string, fn func(ctx context.Context, slot int) error) error {
	a, err := r.Actor(key)
	if err != nil {
		return err
	}
	return a.Do(ctx, fn)
}

// Keys returns the endpoint keys that have an actor, in no order.
func (r *Registry) Keys() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	keys := make([]string, 0, len(r.actors))
	for k := range r.actors {
		keys = append(keys, k)
	}
	return keys
}
