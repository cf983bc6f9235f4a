//go:build unix

// Package cputime reads the CPU time the process has used: benchmarks report
// CPU per operation, which a machine shared with other work blurs less than
// elapsed time.
package cputime

import (
	"syscall"
	"time"
)

// Process is the user and system CPU time this process has used (all
// threads, the collector's included), and whether it could be read.
func Process() (time.Duration, bool) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, false
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), true
}
