//go:build !unix

package main

import "time"

// processCPU: not read on this system; sg bench then reports no CPU figures.
func processCPU() (time.Duration, bool) { return 0, false }
