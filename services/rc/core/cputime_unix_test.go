//go:build unix

package core

import "syscall"

// processCPU is the process's CPU time so far (user and system, all
// threads, GC included), in seconds: decisions per CPU second do not depend
// on what else shares the machine, as decisions per second do.
func processCPU() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}
