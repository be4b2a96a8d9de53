package xsk_test

import (
	"errors"
	"os"
	"runtime"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/xdproce/xdproce/internal/netlab"
	"github.com/xdproce/xdproce/link/xsk"
)

// Without CAP_NET_RAW the socket cannot be created; the error wraps EPERM and
// names the capabilities.
func TestPrivilegedUnprivilegedOpen(t *testing.T) {
	topo := netlab.Pair(t, netlab.LinkConfig{})
	err := topo.A.NS.Do(func() error {
		// Do locks the thread; clear its effective capabilities inside.
		hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
		var saved [2]unix.CapUserData
		if err := unix.Capget(&hdr, &saved[0]); err != nil {
			return err
		}
		dropped := saved
		dropped[0].Effective, dropped[1].Effective = 0, 0
		if err := unix.Capset(&hdr, &dropped[0]); err != nil {
			return err
		}
		s, oerr := xsk.OpenQueue(topo.A.Name, 0, nil)
		if err := unix.Capset(&hdr, &saved[0]); err != nil {
			runtime.LockOSThread() // never let this thread run other code
			t.Fatalf("restore capabilities: %v", err)
		}
		if oerr == nil {
			s.Close()
			t.Fatal("OpenQueue without capabilities succeeded")
		}
		t.Logf("OpenQueue without capabilities: %v", oerr)
		if !errors.Is(oerr, os.ErrPermission) {
			t.Errorf("error does not wrap os.ErrPermission")
		}
		if !strings.Contains(oerr.Error(), "CAP_NET_RAW") {
			t.Errorf("error does not name CAP_NET_RAW")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
