//go:build linux

package udp_test

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/xdproce/xdproce/internal/testenv"
	"github.com/xdproce/xdproce/link/udp"
	"github.com/xdproce/xdproce/roce/wire"
)

// TestPrivilegedKernelSendsIPID0 watches the IPv4 packets the kernel really
// sends for link/udp (a raw IPPROTO_UDP socket gets a copy of every UDP
// packet the host receives, loopback included) and checks that they carry ID
// 0 and DF, and that the engine's ICRC verifies over the real IP header:
// the property rxe and AF_XDP peers rely on.
func TestPrivilegedKernelSendsIPID0(t *testing.T) {
	testenv.Privileged(t)
	raw, err := unix.Socket(unix.AF_INET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.IPPROTO_UDP)
	if err != nil {
		t.Fatalf("raw socket: %v", err)
	}
	defer unix.Close(raw)
	tv := unix.NsecToTimeval(int64(100 * time.Millisecond))
	if err := unix.SetsockoptTimeval(raw, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name string
		pair func(t *testing.T) (a, b *udp.Link)
	}{
		{"IPv4Socket4791", func(t *testing.T) (a, b *udp.Link) {
			// The real port when free, so that nothing is rewritten below.
			a, errA := udp.Open(udp.Config{Addr: lo1})
			if errA == nil {
				b, errB := udp.Open(udp.Config{Addr: lo2})
				if errB == nil {
					t.Cleanup(func() { a.Close(); b.Close() })
					return a, b
				}
				a.Close()
			}
			t.Logf("port 4791 busy on loopback; testing on another port")
			return pairSamePort(t, udp.Config{})
		}},
		{"DualStackSocket", func(t *testing.T) (a, b *udp.Link) {
			return pairPorts(t, netip.Addr{}, lo2, udp.Config{MTU: 1500})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := tc.pair(t)
			sport := a.Props().SrcPort
			payload := bytes.Repeat([]byte{0x5a}, 1000)
			// Several frames: an ID counter would show on the second.
			for range 3 {
				if err := sendOne(t, a, encode(t, lo1, lo2, sport, 0, 0, 64, payload)); err != nil {
					t.Fatal(err)
				}
				recvOne(t, b)
			}
			seen := 0
			buf := make([]byte, 65536)
			deadline := time.Now().Add(3 * time.Second)
			for seen < 3 && time.Now().Before(deadline) {
				n, _, err := unix.Recvfrom(raw, buf, 0)
				if err != nil {
					continue
				}
				ip := buf[:n]
				ihl := int(ip[0]&0xf) * 4
				if n < ihl+8 || binary.BigEndian.Uint16(ip[ihl:]) != sport || ip[16] != 127 || ip[19] != 2 {
					continue // someone else's UDP
				}
				seen++
				if id, flags := binary.BigEndian.Uint16(ip[4:]), ip[6]>>5; id != 0 || flags != 0x2 {
					t.Errorf("kernel sent IPv4 ID %#04x flags %#x, want ID 0 and DF", id, flags)
				}
				frame := append([]byte{2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 0x08, 0x00}, ip...)
				// Off port 4791 (tests), the engine encoded destination
				// 4791 and the link sent to the peer's port: put back
				// what the ICRC covers. On 4791 this changes nothing.
				binary.BigEndian.PutUint16(frame[14+ihl+2:], wire.UDPPort)
				var p wire.Packet
				if err := p.Decode(frame); err != nil {
					t.Errorf("the packet on the wire does not verify: %v", err)
				}
			}
			if seen < 3 {
				t.Fatalf("saw %d of 3 packets on the raw socket", seen)
			}
		})
	}
}
