//go:build !linux

package cli

import (
	"errors"
	"io"
	"runtime"
)

// isTerminal reports false outside Linux (no progress bars there).
func isTerminal(w io.Writer) bool { return false }

// probeAFXDPSocket reports that AF_XDP is Linux only.
func probeAFXDPSocket() (bool, string) { return false, "AF_XDP needs Linux, not " + runtime.GOOS }

// bindToDevice: binding a listener to an interface is Linux only.
func bindToDevice(fd int, ifname string) error {
	return errors.New("binding a socket to an interface needs Linux, not " + runtime.GOOS)
}

// residentBytes is 0: the resident set size is read on Linux only.
func residentBytes() int64 { return 0 }
