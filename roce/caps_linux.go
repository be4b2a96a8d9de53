package roce

import (
	"bufio"
	"errors"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// afxdpCaps are the capabilities the AF_XDP path uses: CAP_NET_ADMIN and
// CAP_BPF to load and attach the XDP program, CAP_NET_RAW for the sockets,
// CAP_IPC_LOCK to pin their UMEM beyond RLIMIT_MEMLOCK (required: false).
var afxdpCaps = []struct {
	bit      uint
	name     string
	required bool
}{
	{unix.CAP_NET_ADMIN, "CAP_NET_ADMIN", true},
	{unix.CAP_NET_RAW, "CAP_NET_RAW", true},
	{unix.CAP_BPF, "CAP_BPF", true},
	{unix.CAP_IPC_LOCK, "CAP_IPC_LOCK", false},
}

// effectiveCaps reads the process's effective capability set.
func effectiveCaps() (uint64, error) {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "CapEff:"); ok {
			return strconv.ParseUint(strings.TrimSpace(v), 16, 64)
		}
	}
	return 0, errors.New("no CapEff in /proc/self/status")
}

// Privileged reports whether the process has the effective capabilities the
// AF_XDP path needs (CAP_NET_ADMIN, CAP_NET_RAW, CAP_BPF), and if not which are
// missing ("missing CAP_BPF, ...").
func Privileged() (bool, string) {
	caps, err := effectiveCaps()
	if err != nil {
		return os.Geteuid() == 0, "cannot read capabilities: " + err.Error()
	}
	var missing []string
	for _, c := range afxdpCaps {
		if c.required && caps&(1<<c.bit) == 0 {
			missing = append(missing, c.name)
		}
	}
	if len(missing) > 0 {
		return false, "missing " + strings.Join(missing, ", ")
	}
	return true, ""
}

// MissingCapabilities lists the capabilities AF_XDP uses that the process
// lacks: CAP_NET_ADMIN, CAP_NET_RAW and CAP_BPF, and CAP_IPC_LOCK unless
// RLIMIT_MEMLOCK is unlimited. Nil when it has them all (or they cannot be
// read).
func MissingCapabilities() []string {
	caps, err := effectiveCaps()
	if err != nil {
		return nil
	}
	var lim unix.Rlimit
	unlimited := unix.Getrlimit(unix.RLIMIT_MEMLOCK, &lim) == nil && lim.Cur == unix.RLIM_INFINITY
	var missing []string
	for _, c := range afxdpCaps {
		if caps&(1<<c.bit) == 0 && (c.required || !unlimited) {
			missing = append(missing, c.name)
		}
	}
	return missing
}
