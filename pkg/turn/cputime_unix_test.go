//go:build unix

package turn_test

import (
	"syscall"
	"time"
)

// cpuTime is the CPU time (user + system, all threads) the process has used
// so far: on a shared machine it measures the work of a benchmark better
// than the wall clock does.
func cpuTime() (time.Duration, bool) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, false
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), true
}
