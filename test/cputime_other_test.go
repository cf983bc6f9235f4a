//go:build !unix

package test

import "time"

// processCPU is not measured off Unix: the benchmarks report 0 CPU.
func processCPU() time.Duration { return 0 }
