package roce

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// checkCPUs verifies Options.CPUs against the CPUs the calling thread may run
// on.
func checkCPUs(cpus []int) error {
	var allowed unix.CPUSet
	if err := unix.SchedGetaffinity(0, &allowed); err != nil {
		return fmt.Errorf("options: cpus: %w", os.NewSyscallError("sched_getaffinity", err))
	}
	for _, c := range cpus {
		if c < 0 || c >= len(allowed)*64 || !allowed.IsSet(c) {
			return fmt.Errorf("options: cpu %d is not one this process may run on (%s)", c, cpuList(&allowed))
		}
	}
	return nil
}

// pinThread restricts the calling thread, which the caller has locked to its
// goroutine, to cpus, and returns a function that gives the thread back the
// affinity it had.
func pinThread(cpus []int) (restore func(), err error) {
	var old, set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &old); err != nil {
		return nil, fmt.Errorf("pin to cpus %v: %w", cpus, os.NewSyscallError("sched_getaffinity", err))
	}
	for _, c := range cpus {
		set.Set(c)
	}
	if err := unix.SchedSetaffinity(0, &set); err != nil {
		return nil, fmt.Errorf("pin to cpus %v: %w", cpus, os.NewSyscallError("sched_setaffinity", err))
	}
	return func() { _ = unix.SchedSetaffinity(0, &old) }, nil
}

// cpuList formats a CPU set as a comma-separated list of CPUs and ranges,
// e.g. "0-3,8".
func cpuList(s *unix.CPUSet) string {
	var b strings.Builder
	n := len(s) * 64
	for c := 0; c < n; c++ {
		if !s.IsSet(c) {
			continue
		}
		end := c
		for end+1 < n && s.IsSet(end+1) {
			end++
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(c))
		if end > c {
			b.WriteByte('-')
			b.WriteString(strconv.Itoa(end))
		}
		c = end
	}
	return b.String()
}
