package roce

import (
	"bytes"
	"net/netip"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/xdproce/xdproce/internal/netlab"
)

// TestPrivilegedNeighborResolve: with no neighbour entry for the peer, the
// resolver makes the kernel resolve it (ARP for IPv4, ND for IPv6) and
// returns the peer's MAC; an address nobody answers for times out with a
// clear error.
func TestPrivilegedNeighborResolve(t *testing.T) {
	netlab.Privileged(t)
	topo := netlab.Pair(t, netlab.LinkConfig{})
	a, b := topo.A, topo.B
	for _, ip := range []netip.Addr{b.IPv4, b.IPv6} {
		if err := a.NS.IP("neigh", "del", ip.String(), "dev", a.Name); err != nil {
			t.Fatal(err)
		}
	}
	var r *neighResolver
	if err := a.NS.Do(func() error {
		h, err := netlink.NewHandle()
		if err != nil {
			return err
		}
		t.Cleanup(h.Close)
		info, err := interfaceInfo(h, a.Name)
		if err != nil {
			return err
		}
		if info.mtu != a.MTU || !bytes.Equal(info.hw, a.HWAddr) || len(info.addrs) == 0 || info.addrs[0] != a.IPv4 {
			t.Errorf("interface info %+v, want MTU %d, MAC %v, first address %v", info, a.MTU, a.HWAddr, a.IPv4)
		}
		r = &neighResolver{h: h, ifindex: info.index, ifname: info.name, hw: info.hw,
			own: map[netip.Addr]bool{a.IPv4: true}, timeout: 6 * time.Second} // ND retransmits after 1 s; leave room on a loaded machine
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	// Resolution runs from this goroutine, outside the namespace: the
	// handle carries it.
	for _, ip := range []netip.Addr{b.IPv4, b.IPv6} {
		start := time.Now()
		mac, err := r.resolve(ip)
		if err != nil {
			t.Fatalf("resolve %v: %v", ip, err)
		}
		if !bytes.Equal(mac, b.HWAddr) {
			t.Errorf("resolve %v = %v, want %v", ip, mac, b.HWAddr)
		}
		t.Logf("resolved %v → %v in %v", ip, mac, time.Since(start).Round(time.Microsecond))
	}
	if mac, err := r.resolve(a.IPv4); err != nil || !bytes.Equal(mac, a.HWAddr) {
		t.Errorf("own address: %v, %v", mac, err)
	}
	// Nobody has .250.
	r.timeout = 300 * time.Millisecond
	if _, err := r.resolve(netip.MustParseAddr("198.51.100.250")); err == nil {
		t.Error("resolved an address nobody owns")
	} else {
		t.Logf("unowned address: %v", err)
	}
}
