package netlab_test

import (
	"encoding/binary"
	"encoding/json"
	"net"
	"net/netip"
	"os/exec"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/xdproce/xdproce/internal/netlab"
)

// udpOnly selects IPv4 UDP frames, so relays spare ARP, ND and MLD.
func udpOnly(f []byte) bool {
	return len(f) > 23 && binary.BigEndian.Uint16(f[12:]) == 0x0800 && f[23] == 17
}

// countDatagrams receives on c until it has been quiet for 300 ms and
// returns how many datagrams arrived. It first makes c's receive buffer big
// enough that the bursts of these tests fit.
func countDatagrams(c *net.UDPConn) int {
	bigRcvBuf(c)
	buf := make([]byte, 65536)
	n := 0
	for {
		c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
		if _, _, err := c.ReadFromUDPAddrPort(buf); err != nil {
			return n
		}
		n++
	}
}

// bigRcvBuf gives c a 16 MiB receive buffer.
func bigRcvBuf(c *net.UDPConn) {
	if rc, err := c.SyscallConn(); err == nil {
		rc.Control(func(fd uintptr) { unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 16<<20) })
	}
}

// sendN sends n datagrams of size bytes from c to dst, pausing every 32 so
// no queue on the way overflows.
func sendN(t *testing.T, c *net.UDPConn, dst netip.AddrPort, n, size int) {
	t.Helper()
	msg := make([]byte, size)
	for i := range n {
		binary.BigEndian.PutUint32(msg, uint32(i))
		if _, err := c.WriteToUDPAddrPort(msg, dst); err != nil {
			t.Fatal(err)
		}
		if i%32 == 31 {
			time.Sleep(200 * time.Microsecond)
		}
	}
}

// A star of four whose member 3 has a lossy leg: what m0 sends reaches m1 and
// m2 whole and m3 with the relay's losses; blackholing the leg and cleaning
// it again while the lab runs take effect.
func TestPrivilegedStarLossyLeg(t *testing.T) {
	s := netlab.StarT(t, netlab.StarConfig{Members: 4, Relays: map[int]netlab.RelayConfig{
		3: {Seed: 9, Loss: 0.3, Filter: udpOnly},
	}})
	if s.Relays[3] == nil || s.Relays[0] != nil || s.Relays[1] != nil || s.Relays[2] != nil {
		t.Fatalf("relays %v: want one on member 3 only", s.Relays)
	}
	for i, m := range s.Members {
		if want := netip.AddrFrom4([4]byte{198, 51, 100, byte(i + 1)}); m.IPv4 != want {
			t.Fatalf("member %d has %v, want %v", i, m.IPv4, want)
		}
	}
	src := listenUDP(t, s.Members[0].NS, netip.AddrPortFrom(s.Members[0].IPv4, 0))
	var dsts []*net.UDPConn
	for _, m := range s.Members[1:] {
		dsts = append(dsts, listenUDP(t, m.NS, netip.AddrPortFrom(m.IPv4, 0)))
	}
	round := func(n int) []int {
		got := make([]int, len(dsts))
		done := make(chan struct{})
		for i, d := range dsts {
			go func() { got[i] = countDatagrams(d); done <- struct{}{} }()
		}
		for _, d := range dsts {
			sendN(t, src, d.LocalAddr().(*net.UDPAddr).AddrPort(), n, 1000)
		}
		for range dsts {
			<-done
		}
		return got
	}
	const n = 400
	got := round(n)
	st := s.Relays[3].Stats()
	t.Logf("m1 %d, m2 %d, m3 %d of %d; relay %+v", got[0], got[1], got[2], n, st)
	if got[0] != n || got[1] != n {
		t.Errorf("direct legs delivered %d and %d of %d", got[0], got[1], n)
	}
	if got[2] < n*55/100 || got[2] > n*85/100 || uint64(got[2]) != n-st.Lost {
		t.Errorf("lossy leg delivered %d of %d with %d lost; want about 70%% and exactly %d-lost", got[2], n, st.Lost, n)
	}
	if err := s.Relays[3].Impair(netlab.RelayConfig{Loss: 1, Filter: udpOnly}); err != nil {
		t.Fatal(err)
	}
	if got = round(50); got[0] != 50 || got[1] != 50 || got[2] != 0 {
		t.Errorf("blackholed leg: m1 %d, m2 %d, m3 %d of 50; want 50, 50, 0", got[0], got[1], got[2])
	}
	if err := s.Relays[3].Impair(netlab.RelayConfig{}); err != nil {
		t.Fatal(err)
	}
	if got = round(50); got[0] != 50 || got[1] != 50 || got[2] != 50 {
		t.Errorf("cleaned leg: m1 %d, m2 %d, m3 %d of 50; want 50 each", got[0], got[1], got[2])
	}
	if err := s.Relays[3].Impair(netlab.RelayConfig{Loss: 2}); err == nil {
		t.Error("Impair accepted a loss probability of 2")
	}
}

// rxPackets reads an interface's received-frame counter.
func rxPackets(t *testing.T, e *netlab.Iface) uint64 {
	t.Helper()
	out, err := exec.Command("ip", "-n", e.NS.Name, "-s", "-j", "link", "show", "dev", e.Name).Output()
	if err != nil {
		t.Fatal(err)
	}
	var v []struct {
		Stats struct {
			RX struct{ Packets uint64 } `json:"rx"`
		} `json:"stats64"`
	}
	if err := json.Unmarshal(out, &v); err != nil || len(v) != 1 {
		t.Fatalf("ip -s -j link: %v: %s", err, out)
	}
	return v[0].Stats.RX.Packets
}

// Multicast across the bridge (IPv4 and IPv6, jumbo frames, one member behind
// a relay): members that joined the group get every datagram; a member in
// another group gets none, though the bridge floods the frames to it.
func TestPrivilegedStarMulticast(t *testing.T) {
	s := netlab.StarT(t, netlab.StarConfig{Members: 4, Link: netlab.LinkConfig{MTU: 9000},
		Relays: map[int]netlab.RelayConfig{2: {Seed: 2}}})
	for _, groups := range [][2]netip.Addr{
		{netip.MustParseAddr("239.1.2.3"), netip.MustParseAddr("239.1.2.4")},
		{netip.MustParseAddr("ff15::1:2:3"), netip.MustParseAddr("ff15::1:2:4")},
	} {
		const port, n, size = 47000, 20, 8000
		join := func(m *netlab.Iface, g netip.Addr) *net.UDPConn {
			var c *net.UDPConn
			err := m.NS.Do(func() error {
				ifi, err := net.InterfaceByName(m.Name)
				if err != nil {
					return err
				}
				c, err = net.ListenMulticastUDP("udp", ifi, net.UDPAddrFromAddrPort(netip.AddrPortFrom(g, port)))
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { c.Close() })
			return c
		}
		members := []*net.UDPConn{join(s.Members[1], groups[0]), join(s.Members[2], groups[0])}
		other := join(s.Members[3], groups[1])
		src := s.Members[0].IPv4
		if groups[0].Is6() {
			src = s.Members[0].IPv6
		}
		sender := listenUDP(t, s.Members[0].NS, netip.AddrPortFrom(src, 0))
		before := rxPackets(t, s.Members[3])
		got := make([]int, 3)
		done := make(chan struct{})
		for i, c := range append(members, other) {
			go func() { got[i] = countDatagrams(c); done <- struct{}{} }()
		}
		time.Sleep(50 * time.Millisecond) // let the joins settle
		sendN(t, sender, netip.AddrPortFrom(groups[0], port), n, size)
		for range got {
			<-done
		}
		flooded := rxPackets(t, s.Members[3]) - before
		t.Logf("%v: members got %d and %d of %d, the other group %d; its leg received %d frames", groups[0], got[0], got[1], n, got[2], flooded)
		if got[0] != n || got[1] != n {
			t.Errorf("%v: members got %d and %d of %d datagrams", groups[0], got[0], got[1], n)
		}
		if got[2] != 0 || flooded < n {
			t.Errorf("%v: member of %v got %d datagrams (want 0) and %d frames (want ≥ %d, flooded)", groups[0], groups[1], got[2], flooded, n)
		}
	}
}
