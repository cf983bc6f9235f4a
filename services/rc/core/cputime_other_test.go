//go:build !unix

package core

// processCPU is not measured here; the benchmark then omits decisions/cpu-s.
func processCPU() float64 { return 0 }
