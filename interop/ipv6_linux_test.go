package interop

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/xdproce/xdproce/roce"
)

// xdGID6Index is the GID index of the host end's IPv6 address in xdproce's table (0 the
// link-local GID, 1 the IPv4 address, then the IPv6 ones): the IPv6 rows pass it as -g.
const xdGID6Index = 2

// TestPrivilegedInteropGuestIPv6 checks what the IPv6 rows rely on: rxe0's GID at GID6_INDEX is
// the guest's 2001:db8:: address (a RoCEv2 GID), the IPv4 GID is still at index 1, xdproce's
// device on the tap has the host's IPv6 address at index 2, and the two ends ping over IPv6.
func TestPrivilegedInteropGuestIPv6(t *testing.T) {
	g := needGuest(t)
	note := ""
	record(t, "guest", "IPv6 GIDs, ping", "-", "-", &note)
	if g.gid6Index < 0 {
		t.Fatalf("the guest has no IPv6 GID (guest.sh up --guest-ip6; see %s/env)", g.state)
	}
	out := g.run(t, 60*time.Second, fmt.Sprintf("cd /sys/class/infiniband/rxe0/ports/1 && cat gids/%d gid_attrs/types/%d gids/$XI_GID_INDEX && ping -6 -c 1 -W 5 %s",
		g.gid6Index, g.gid6Index, g.hostIP6))
	lines := strings.Split(out, "\n")
	want6 := netip.MustParseAddr(g.guestIP6)
	if len(lines) < 3 {
		t.Fatalf("guest output:\n%s", out)
	}
	if got, err := netip.ParseAddr(lines[0]); err != nil || got != want6 {
		t.Errorf("rxe0 GID %d is %q, want %v", g.gid6Index, lines[0], want6)
	}
	if lines[1] != "RoCE v2" {
		t.Errorf("rxe0 GID %d has type %q, want RoCE v2", g.gid6Index, lines[1])
	}
	if got, err := netip.ParseAddr(lines[2]); err != nil || got.Unmap() != netip.MustParseAddr(g.guestIP) {
		t.Errorf("rxe0's IPv4 GID (index %d) is %q, want ::ffff:%s", g.gidIndex, lines[2], g.guestIP)
	}
	if !strings.Contains(out, "1 received") {
		t.Errorf("ping -6 %s from the guest:\n%s", g.hostIP6, out)
	}
	var dev *roce.Device
	err := g.inNetns(func() error {
		var err error
		dev, err = roce.Open(g.tap, &roce.Options{Link: roce.LinkUDP})
		return err
	})
	if err != nil {
		t.Fatalf("roce.Open(%s) in %s: %v", g.tap, g.netns, err)
	}
	defer dev.Close()
	if a, err := dev.GID(xdGID6Index); err != nil || a != netip.MustParseAddr(g.hostIP6) {
		t.Errorf("xdproce's GID %d on %s is %v (%v), want %s; table %v", xdGID6Index, g.tap, a, err, g.hostIP6, dev.GIDs())
	}
	note = fmt.Sprintf("rxe0 GID %d = %s (RoCE v2), xdproce GID %d = %s", g.gid6Index, g.guestIP6, xdGID6Index, g.hostIP6)
}
