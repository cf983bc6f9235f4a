// Package promshare registers a collector that several services of one
// process (the demo fleet's DAPs, sg run's services) share: the first
// registration wins and the others count into it, each under its own label.
package promshare

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// Register registers c on reg and returns it, or the collector of the same
// description already registered. nil reg: c, unexposed.
func Register[C prometheus.Collector](reg prometheus.Registerer, c C) (C, error) {
	if reg == nil {
		return c, nil
	}
	err := reg.Register(c)
	var are prometheus.AlreadyRegisteredError
	switch {
	case errors.As(err, &are):
		existing, ok := are.ExistingCollector.(C)
		if !ok {
			return c, fmt.Errorf("promshare: a different collector is registered as %T", are.ExistingCollector)
		}
		return existing, nil
	case err != nil:
		return c, fmt.Errorf("promshare: register: %w", err)
	}
	return c, nil
}
