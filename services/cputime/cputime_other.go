//go:build !unix

// Package cputime reads the CPU time the process has used: benchmarks report
// CPU per operation, which a machine shared with other work blurs less than
// elapsed time.
package cputime

import "time"

// Process: not read on this system (callers then report no CPU figures).
func Process() (time.Duration, bool) { return 0, false }
