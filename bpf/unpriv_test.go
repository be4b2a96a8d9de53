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

// withoutCaps runs fn on a locked OS thread whose effective capabilities are
// cleared (root without privileges), then restores them.
func withoutCaps(t *testing.T, fn func()) {
	t.Helper()
	runtime.LockOSThread()
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var saved [2]unix.CapUserData
	if err := unix.Capget(&hdr, &saved[0]); err != nil {
		runtime.UnlockOSThread()
		t.Fatal(err)
	}
	dropped := saved
	dropped[0].Effective, dropped[1].Effective = 0, 0
	if err := unix.Capset(&hdr, &dropped[0]); err != nil {
		runtime.UnlockOSThread()
		t.Fatal(err)
	}
	fn()
	if err := unix.Capset(&hdr, &saved[0]); err != nil {
		t.Fatalf("restore capabilities: %v", err) // the thread stays locked and dies with the test
	}
	runtime.UnlockOSThread()
}

// Without capabilities, Load fails with an error that wraps EPERM and names
// what is missing. (Last in the package: a failed probe inside cilium/ebpf
// could be cached.)
func TestPrivilegedUnprivilegedLoad(t *testing.T) {
	testenv.Privileged(t)
	withoutCaps(t, func() {
		p, err := Load()
		if err == nil {
			p.Close()
			t.Fatal("Load without capabilities succeeded")
		}
		t.Logf("Load without capabilities: %v", err)
		if !errors.Is(err, os.ErrPermission) {
			t.Errorf("error does not wrap os.ErrPermission")
		}
		for _, want := range []string{"CAP_BPF", "CAP_NET_ADMIN", "RLIMIT_MEMLOCK", "CAP_IPC_LOCK"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error does not mention %s", want)
			}
		}
	})
}
