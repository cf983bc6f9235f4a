//go:build !unix

package gw

import "time"

// processCPU is not measured off Unix: the benchmarks report 0 CPU.
func processCPU() time.Duration { return 0 }
