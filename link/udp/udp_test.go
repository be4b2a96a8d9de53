//go:build linux

package udp_test

import (
	"encoding/binary"
	"errors"
	"flag"
	"math/rand/v2"
	"net"
	"net/netip"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/xdproce/xdproce/link/linktest"
	"github.com/xdproce/xdproce/link/udp"
)

var long = flag.Bool("long", false, "run the long variants")

var (
	lo1 = netip.MustParseAddr("127.0.0.1")
	lo2 = netip.MustParseAddr("127.0.0.2")
	lo6 = netip.MustParseAddr("::1")
)

func open(t testing.TB, cfg udp.Config) *udp.Link {
	t.Helper()
	l, err := udp.Open(cfg)
	if err != nil {
		t.Fatalf("udp.Open(%+v): %v", cfg, err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// pairSamePort opens a on 127.0.0.1 and b on 127.0.0.2, both on one free port.
func pairSamePort(t testing.TB, cfg udp.Config) (a, b *udp.Link) {
	t.Helper()
	for try := 0; ; try++ {
		ca := cfg
		ca.Addr, ca.Port = lo1, -1
		a := open(t, ca)
		cb := cfg
		cb.Addr, cb.Port = lo2, int(a.LocalPort())
		b, err := udp.Open(cb)
		if err == nil {
			t.Cleanup(func() { b.Close() })
			return a, b
		}
		a.Close()
		if try == 10 || !errors.Is(err, syscall.EADDRINUSE) {
			t.Fatalf("udp.Open(%+v): %v", cb, err)
		}
	}
}

// pairPorts opens a on addrA and b on addrB on two random ports, each
// sending to the other's.
func pairPorts(t testing.TB, addrA, addrB netip.Addr, cfg udp.Config) (a, b *udp.Link) {
	t.Helper()
	for try := 0; ; try++ {
		pa, pb := 20000+rand.IntN(40000), 20000+rand.IntN(40000)
		if pa == pb {
			continue
		}
		ca, cb := cfg, cfg
		ca.Addr, ca.Port, ca.RemotePort = addrA, pa, uint16(pb)
		cb.Addr, cb.Port, cb.RemotePort = addrB, pb, uint16(pa)
		a, errA := udp.Open(ca)
		if errA == nil {
			b, errB := udp.Open(cb)
			if errB == nil {
				t.Cleanup(func() { a.Close(); b.Close() })
				return a, b
			}
			a.Close()
			errA = errB
		}
		if try == 20 || !errors.Is(errA, syscall.EADDRINUSE) {
			t.Fatalf("open a pair: %v", errA)
		}
	}
}

// TestConformance runs linktest with GSO/GRO (the default) and without.
func TestConformance(t *testing.T) {
	for _, mode := range []struct {
		name  string
		noGSO bool
	}{{"GSO", false}, {"NoGSO", true}} {
		t.Run(mode.name, func(t *testing.T) {
			cfg := udp.Config{TxBuffers: 64, NoGSO: mode.noGSO}
			t.Run("IPv4", func(t *testing.T) {
				linktest.Run(t, func(t *testing.T) linktest.Pair {
					a, b := pairSamePort(t, cfg)
					return linktest.Pair{A: a, B: b, AddrA: lo1, AddrB: lo2}
				})
			})
			t.Run("IPv4MTU9000", func(t *testing.T) {
				linktest.Run(t, func(t *testing.T) linktest.Pair {
					c := cfg
					c.MTU = 9000
					a, b := pairSamePort(t, c)
					return linktest.Pair{A: a, B: b, AddrA: lo1, AddrB: lo2}
				})
			})
			t.Run("IPv6", func(t *testing.T) {
				linktest.Run(t, func(t *testing.T) linktest.Pair {
					a, b := pairPorts(t, lo6, lo6, cfg)
					return linktest.Pair{A: a, B: b, AddrA: lo6, AddrB: lo6}
				})
			})
			t.Run("DualStackWildcard", func(t *testing.T) {
				linktest.Run(t, func(t *testing.T) linktest.Pair {
					c := cfg
					c.MTU = 1500
					a, b := pairPorts(t, netip.Addr{}, lo2, c)
					return linktest.Pair{A: a, B: b, AddrA: lo1, AddrB: lo2}
				})
			})
		})
	}
}

func TestProps(t *testing.T) {
	a := open(t, udp.Config{Addr: lo1, Port: -1})
	p := a.Props()
	if p.Name != "UDP" || p.MTU != udp.MaxAutoMTU || p.MaxFrame != udp.MaxAutoMTU+18 || p.HWAddr != nil ||
		p.SrcPort == 0 || p.SrcPort != a.LocalPort() || !p.SyntheticHeaders {
		t.Errorf("Props() = %+v (loopback: MTU capped at %d)", p, udp.MaxAutoMTU)
	}
	b := open(t, udp.Config{Addr: lo1, Port: -1, MTU: 1500})
	if p := b.Props(); p.MTU != 1500 || p.MaxFrame != 1518 {
		t.Errorf("Props() with MTU 1500 = %+v", p)
	}
}

func TestOpenErrors(t *testing.T) {
	a := open(t, udp.Config{Addr: lo1, Port: -1})
	_, err := udp.Open(udp.Config{Addr: lo1, Port: int(a.LocalPort())})
	if !errors.Is(err, syscall.EADDRINUSE) || !strings.Contains(err.Error(), "Config.Port") {
		t.Errorf("Open on a port in use: %v, want EADDRINUSE with a hint", err)
	}
	// 192.0.2.0/24 documentation space; not on this host's loopback.
	_, err = udp.Open(udp.Config{Addr: netip.MustParseAddr("203.0.113.77"), Port: -1, MTU: 1500})
	if !errors.Is(err, syscall.EADDRNOTAVAIL) {
		t.Errorf("Open on a foreign address: %v, want EADDRNOTAVAIL", err)
	}
	_, err = udp.Open(udp.Config{Addr: netip.MustParseAddr("203.0.113.77"), Port: -1})
	if err == nil || !strings.Contains(err.Error(), "no interface") {
		t.Errorf("Open on a foreign address without MTU: %v", err)
	}
	_, err = udp.Open(udp.Config{Addr: netip.MustParseAddr("fe80::1%lo"), Port: -1})
	if err == nil || !strings.Contains(err.Error(), "link-local") {
		t.Errorf("Open on a link-local address: %v", err)
	}
	// An IPv4-mapped address means the IPv4 address.
	m := open(t, udp.Config{Addr: netip.MustParseAddr("::ffff:127.0.0.1"), Port: -1})
	if p := m.Props(); p.MTU != udp.MaxAutoMTU {
		t.Errorf("Open on ::ffff:127.0.0.1: %+v", p)
	}
	for _, cfg := range []udp.Config{
		{Port: 70000}, {Port: -2}, {Batch: -1}, {Batch: 5000}, {TxBuffers: -1}, {MTU: 100}, {SocketBuffer: -1},
	} {
		if l, err := udp.Open(cfg); err == nil {
			l.Close()
			t.Errorf("Open(%+v) succeeded", cfg)
		}
	}
}

// frame builds an Ethernet/IPv4/UDP frame from src to dst carrying payload.
func frame(src, dst netip.Addr, sport uint16, payload []byte) []byte {
	f := make([]byte, 42+len(payload))
	copy(f[0:12], []byte{2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1})
	binary.BigEndian.PutUint16(f[12:], 0x0800)
	ip := f[14:]
	ip[0] = 0x45
	binary.BigEndian.PutUint16(ip[2:], uint16(28+len(payload)))
	binary.BigEndian.PutUint16(ip[4:], 0x1234) // some ID: replaced by 0 on the wire
	binary.BigEndian.PutUint16(ip[6:], 0x4000)
	ip[8], ip[9] = 17, 17
	s, d := src.As4(), dst.As4()
	copy(ip[12:], s[:])
	copy(ip[16:], d[:])
	binary.BigEndian.PutUint16(ip[20:], sport)
	binary.BigEndian.PutUint16(ip[22:], 4791)
	binary.BigEndian.PutUint16(ip[24:], uint16(8+len(payload)))
	copy(ip[28:], payload)
	return f
}

func sendOne(t testing.TB, l *udp.Link, f []byte) error {
	t.Helper()
	bufs := make([][]byte, 1)
	if l.Alloc(bufs) != 1 {
		t.Fatal("Alloc: no buffer")
	}
	n := copy(bufs[0], f)
	return l.Send([][]byte{bufs[0][:n]})
}

func recvOne(t testing.TB, l *udp.Link) []byte {
	t.Helper()
	frames := make([][]byte, 4)
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		n, err := l.Receive(frames)
		if err != nil {
			t.Fatalf("Receive: %v", err)
		}
		if n > 0 {
			return append([]byte(nil), frames[0]...)
		}
		l.Wait(100 * time.Millisecond)
	}
	t.Fatal("no frame within 5s")
	return nil
}

// TestSyntheticHeaders checks every byte of a received frame's rebuilt
// headers.
func TestSyntheticHeaders(t *testing.T) {
	a, b := pairSamePort(t, udp.Config{})
	payload := []byte{0x64, 0, 0xff, 0xff, 0, 0, 0, 1, 0, 0, 0, 2, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 0xaa, 0xbb, 0xcc, 0xdd}
	if err := sendOne(t, a, frame(lo1, lo2, 0xC123, payload)); err != nil {
		t.Fatal(err)
	}
	got := recvOne(t, b)
	port := a.LocalPort()
	want := []byte{
		0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x08, 0x00, // zero MACs, IPv4
		0x45, 0, 0, byte(28 + len(payload)), 0, 0, 0x40, 0, 64, 17, 0, 0, // ID 0, DF, TTL 64, UDP, checksum below
		127, 0, 0, 1, 127, 0, 0, 2,
		byte(port >> 8), byte(port), 0x12, 0xb7, 0, byte(8 + len(payload)), 0, 0, // from the socket's port to 4791
	}
	want = append(want, payload...)
	var sum uint32
	for i := 14; i < 34; i += 2 {
		sum += uint32(want[i])<<8 | uint32(want[i+1])
	}
	for sum>>16 != 0 {
		sum = sum&0xffff + sum>>16
	}
	want[24], want[25] = byte(^sum>>8), byte(^sum)
	if string(got) != string(want) {
		t.Errorf("received frame\n got % x\nwant % x", got, want)
	}
	if st := b.Stats(); st.RxFrames != 1 {
		t.Errorf("receiver stats %+v", st)
	}
	if st := a.Stats(); st.TxFrames != 1 {
		t.Errorf("sender stats %+v", st)
	}
}

func TestSendInvalidFrames(t *testing.T) {
	a, b := pairSamePort(t, udp.Config{})
	arp := make([]byte, 60)
	binary.BigEndian.PutUint16(arp[12:], 0x0806)
	tcp := frame(lo1, lo2, 1, []byte{1, 2, 3})
	tcp[14+9] = 6
	frag := frame(lo1, lo2, 1, []byte{1, 2, 3})
	frag[14+6] |= 0x20 // more fragments
	short := frame(lo1, lo2, 1, []byte{1, 2, 3})[:30]
	badLen := frame(lo1, lo2, 1, []byte{1, 2, 3})
	badLen[14+2] = 0xff
	v6 := make([]byte, 70)
	binary.BigEndian.PutUint16(v6[12:], 0x86dd)
	v6[14] = 0x60
	v6[14+6] = 17
	for name, f := range map[string][]byte{"arp": arp, "tcp": tcp, "fragment": frag, "short": short, "length": badLen, "v6 on v4 socket": v6} {
		if err := sendOne(t, a, f); err == nil {
			t.Errorf("%s: Send returned nil", name)
		}
	}
	if st := a.Stats(); st.TxInvalid != 6 || st.TxFrames != 0 {
		t.Errorf("stats %+v", st)
	}
	// Still works, and nothing bad arrived.
	if err := sendOne(t, a, frame(lo1, lo2, 1, []byte{9, 9, 9, 9})); err != nil {
		t.Fatal(err)
	}
	if got := recvOne(t, b); string(got[42:]) != "\x09\x09\x09\x09" {
		t.Errorf("got % x", got)
	}
}

func TestReceiveTruncated(t *testing.T) {
	b := open(t, udp.Config{Addr: lo2, Port: -1, MTU: 1500})
	c, err := net.DialUDP("udp4", nil, &net.UDPAddr{IP: net.IP{127, 0, 0, 2}, Port: int(b.LocalPort())})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write(make([]byte, 3000)); err != nil { // over the MTU: loopback carries it
		t.Fatal(err)
	}
	if _, err := c.Write([]byte("ok")); err != nil {
		t.Fatal(err)
	}
	got := recvOne(t, b)
	if string(got[42:]) != "ok" {
		t.Errorf("got % x", got)
	}
	if st := b.Stats(); st.RxTruncated != 1 || st.RxFrames != 1 {
		t.Errorf("stats %+v", st)
	}
}

func TestManyFramesBatched(t *testing.T) {
	n := 5000
	if *long {
		n = 200000
	}
	a, b := pairSamePort(t, udp.Config{MTU: 1500})
	bufs := make([][]byte, 64)
	frames := make([][]byte, 64)
	f := frame(lo1, lo2, 1, make([]byte, 1000))
	next := uint32(0)
	for sent := 0; sent < n; {
		k := a.Alloc(bufs[:min(32, n-sent)])
		for i := range k {
			m := copy(bufs[i], f)
			binary.BigEndian.PutUint32(bufs[i][42:], uint32(sent+i))
			bufs[i] = bufs[i][:m]
		}
		if err := a.Send(bufs[:k]); err != nil {
			t.Fatal(err)
		}
		sent += k
		for {
			r, err := b.Receive(frames)
			if err != nil {
				t.Fatal(err)
			}
			for _, g := range frames[:r] {
				if id := binary.BigEndian.Uint32(g[42:]); id != next || len(g) != len(f) {
					t.Fatalf("got frame %d (%d bytes), want %d (%d bytes)", id, len(g), next, len(f))
				}
				next++
			}
			if r == 0 {
				break
			}
		}
	}
	for deadline := time.Now().Add(5 * time.Second); next < uint32(n) && time.Now().Before(deadline); {
		r, _ := b.Receive(frames)
		next += uint32(r)
		if r == 0 {
			b.Wait(10 * time.Millisecond)
		}
	}
	if next != uint32(n) {
		t.Errorf("received %d of %d (sender %+v)", next, n, a.Stats())
	}
}

// TestWildcardSendsFromFrameSource checks that a link bound to all
// addresses sends each datagram from the frame's source address (which the
// ICRC covers), not from whatever the route would pick.
func TestWildcardSendsFromFrameSource(t *testing.T) {
	a, b := pairPorts(t, netip.Addr{}, lo2, udp.Config{MTU: 1500})
	for _, src := range []string{"127.0.0.3", "127.0.0.1", "127.1.2.3"} {
		s := netip.MustParseAddr(src)
		if err := sendOne(t, a, frame(s, lo2, 1, []byte("hello"))); err != nil {
			t.Fatal(err)
		}
		got := recvOne(t, b)
		if g, _ := netip.AddrFromSlice(got[26:30]); g != s {
			t.Errorf("frame from %v arrived from %v", s, g)
		}
	}
	// A source that is not local is refused by the kernel, and reported.
	if err := sendOne(t, a, frame(netip.MustParseAddr("203.0.113.9"), lo2, 1, []byte("x"))); err == nil {
		t.Error("Send from a foreign source address returned nil")
	}
	if st := a.Stats(); st.TxErrors != 1 || st.TxFrames != 3 {
		t.Errorf("stats %+v", st)
	}
}
