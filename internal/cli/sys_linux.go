package cli

import (
	"errors"
	"io"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// isTerminal reports whether w is a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

// probeAFXDPSocket opens (and closes) an AF_XDP socket.
func probeAFXDPSocket() (bool, string) {
	fd, err := unix.Socket(unix.AF_XDP, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
	switch {
	case err == nil:
		unix.Close(fd)
		return true, ""
	case errors.Is(err, unix.EAFNOSUPPORT):
		return false, "the kernel has no AF_XDP (CONFIG_XDP_SOCKETS)"
	case errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES):
		return false, "AF_XDP sockets need CAP_NET_RAW"
	}
	return false, "AF_XDP socket: " + err.Error()
}

// bindToDevice binds a socket to an interface (SO_BINDTODEVICE).
func bindToDevice(fd int, ifname string) error { return unix.BindToDevice(fd, ifname) }

// residentBytes is the process's resident set size (VmRSS), 0 if unknown.
func residentBytes() int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for line := range strings.Lines(string(b)) {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}
