package bpf

import (
	"errors"
	"os"
	"runtime"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/xdproce/xdproce/internal/testenv"
)

// readmeCaps are the capabilities the README's setcap line grants:
// cap_net_admin,cap_net_raw,cap_bpf,cap_ipc_lock (no CAP_PERFMON, no
// CAP_SYS_ADMIN).
var readmeCaps = []uint{unix.CAP_NET_ADMIN, unix.CAP_NET_RAW, unix.CAP_BPF, unix.CAP_IPC_LOCK}

// withOnlyCaps runs fn on a locked OS thread whose effective capabilities are
// exactly caps, then restores them.
func withOnlyCaps(t *testing.T, caps []uint, fn func()) {
	t.Helper()
	runtime.LockOSThread()
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var saved [2]unix.CapUserData
	if err := unix.Capget(&hdr, &saved[0]); err != nil {
		runtime.UnlockOSThread()
		t.Fatal(err)
	}
	set := saved
	set[0].Effective, set[1].Effective = 0, 0
	for _, c := range caps {
		set[c/32].Effective |= 1 << (c % 32)
	}
	if err := unix.Capset(&hdr, &set[0]); err != nil {
		runtime.UnlockOSThread()
		t.Fatal(err)
	}
	fn()
	if err := unix.Capset(&hdr, &saved[0]); err != nil {
		t.Fatalf("restore capabilities: %v", err) // the thread stays locked and dies with the test
	}
	runtime.UnlockOSThread()
}

// The program passes the verifier with the README's capabilities alone: no
// pointer arithmetic that needs CAP_PERFMON.
func TestPrivilegedLoadWithREADMECapabilities(t *testing.T) {
	testenv.Privileged(t)
	withOnlyCaps(t, readmeCaps, func() {
		p, err := Load()
		if err != nil {
			t.Fatalf("Load with CAP_NET_ADMIN, CAP_NET_RAW, CAP_BPF, CAP_IPC_LOCK: %v", err)
		}
		p.Close()
	})
}

// Without capabilities, or with CAP_BPF but not CAP_NET_ADMIN, Load fails
// with an error that wraps EPERM and names what is needed, not a verifier
// refusal. (Last in the package, as the test above: a failed probe inside
// cilium/ebpf could be cached.)
func TestPrivilegedUnprivilegedLoad(t *testing.T) {
	testenv.Privileged(t)
	for _, c := range []struct {
		name string
		caps []uint
	}{{"none", nil}, {"no CAP_NET_ADMIN", []uint{unix.CAP_BPF, unix.CAP_NET_RAW, unix.CAP_IPC_LOCK}}} {
		withOnlyCaps(t, c.caps, func() {
			p, err := Load()
			if err == nil {
				p.Close()
				t.Fatalf("Load with capabilities %s succeeded", c.name)
			}
			t.Logf("Load with capabilities %s: %v", c.name, err)
			if !errors.Is(err, os.ErrPermission) || strings.Contains(err.Error(), "verifier") {
				t.Errorf("%s: error does not wrap os.ErrPermission or blames the verifier", c.name)
			}
			for _, want := range []string{"CAP_BPF", "CAP_NET_ADMIN", "RLIMIT_MEMLOCK", "CAP_IPC_LOCK"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("%s: error does not mention %s", c.name, want)
				}
			}
		})
	}
}
