package roce_test

import (
	"net/netip"
	"testing"

	"github.com/xdproce/xdproce/internal/netlab"
	"github.com/xdproce/xdproce/link/udp"
	"github.com/xdproce/xdproce/roce"
	"github.com/xdproce/xdproce/roce/qp"
)

// openUDPIn opens link/udp bound to addr in e's namespace (GSO and GRO on,
// the default, unless noGSO) and a device on it.
func openUDPIn(t testing.TB, e *netlab.Iface, addr netip.Addr, noGSO bool) (*roce.Device, *udp.Link) {
	t.Helper()
	var l *udp.Link
	if err := e.NS.Do(func() error {
		var err error
		l, err = udp.Open(udp.Config{Addr: addr, NoGSO: noGSO})
		return err
	}); err != nil {
		t.Fatalf("udp.Open in %s: %v", e.NS.Short, err)
	}
	d, err := roce.NewDevice(l, &roce.Options{Addrs: []netip.Addr{addr}})
	if err != nil {
		l.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d, l
}

// TestPrivilegedGSOUDPWithXSK: a device on link/udp with GSO in one
// namespace and one on AF_XDP in the other interoperate both ways (every RC
// operation with each as requester; READ responses and multi-packet WRITEs
// leave link/udp as UDP_SEGMENT messages), at MTU 1500 and 9000. In native
// mode the veth under the XDP program makes its peer segment in software
// (veth drops GSO features while its peer runs XDP), so the program sees
// one RoCEv2 packet per frame. Generic mode is left out on purpose: there
// the peer keeps passing UDP_SEGMENT skbs whole, generic XDP hands the
// program one 64 KiB skb, and multi-packet messages from the GSO side are
// lost (docs/status.md); the sender needs udp.Config.NoGSO then.
func TestPrivilegedGSOUDPWithXSK(t *testing.T) {
	netlab.Privileged(t)
	for _, mtu := range []int{1500, 9000} {
		for _, mode := range []string{"native"} {
			t.Run("mtu="+itoa(mtu)+"/"+mode, func(t *testing.T) {
				topo := netlab.Pair(t, netlab.LinkConfig{MTU: mtu})
				x := openIn(t, topo.A, roce.Options{Link: roce.LinkXSK, XDPMode: mode})
				u, l := openUDPIn(t, topo.B, topo.B.IPv4, false)
				for _, p := range []*devPair{{a: x, b: u}, {a: u, b: x}} {
					runOperations(t, p)
				}
				sx, su, sl := x.Stats(), u.Stats(), l.Stats()
				if sl.TxGSOSends == 0 || sx.DropBadICRC+sx.DropMalformed+su.DropBadICRC+su.DropMalformed != 0 {
					t.Errorf("link/udp %+v\nAF_XDP device %+v\nUDP device %+v", sl, sx, su)
				}
				t.Logf("link/udp %+v", sl)
			})
		}
	}
}

// BenchmarkPrivilegedUDPGSOWrite64K: 64 KiB RDMA WRITEs, 8 outstanding,
// between two devices on link/udp in two namespaces over veth (MTU 9000,
// PMTU 4096), one datagram per frame (NoGSO) against GSO/GRO, in one run.
func BenchmarkPrivilegedUDPGSOWrite64K(b *testing.B) {
	netlab.Privileged(b)
	skipRace(b)
	topo := netlab.Pair(b, netlab.LinkConfig{MTU: 9000})
	for _, mode := range []struct {
		name  string
		noGSO bool
	}{{"plain", true}, {"GSO", false}} {
		b.Run(mode.name, func(b *testing.B) {
			a, la := openUDPIn(b, topo.A, topo.A.IPv4, mode.noGSO)
			c, lc := openUDPIn(b, topo.B, topo.B.IPv4, mode.noGSO)
			benchOps(b, &devPair{a: a, b: c}, qp.WRRDMAWrite, 64<<10, 8)
			if sa, sc := la.Stats(), lc.Stats(); sa.TxDropped+sa.TxErrors+sc.TxDropped+sc.TxErrors != 0 {
				b.Logf("links dropped frames: %+v; %+v", sa, sc)
			}
		})
	}
}
