//go:build linux

package udp_test

import (
	"net/netip"
	"testing"

	"github.com/xdproce/xdproce/link/udp"
)

// withTOS returns frame f (IPv4) with TOS tos.
func withTOS(f []byte, tos byte) []byte {
	f[15] = tos
	return f
}

// TestTOSCarried sends frames with a TOS (ECT(0), DSCP 48 with CE, 0) one
// at a time and in a GSO run, from a socket bound to an address and from a
// dual-stack one bound to all, and checks the received frames carry it:
// the kernel wrote it (IP_TOS) and the receiver read it (IP_RECVTOS).
func TestTOSCarried(t *testing.T) {
	for _, name := range []string{"bound", "wildcard"} {
		t.Run(name, func(t *testing.T) {
			var a, b *udp.Link
			if name == "bound" {
				a, b = pairSamePort(t, udp.Config{})
			} else {
				a, b = pairPorts(t, netip.Addr{}, lo2, udp.Config{MTU: 1500})
			}
			for _, tos := range []byte{0x02, 48<<2 | 3, 0} {
				if err := sendOne(t, a, withTOS(frame(lo1, lo2, 7, []byte("single")), tos)); err != nil {
					t.Fatal(err)
				}
				if got := recvOne(t, b); got[15] != tos {
					t.Errorf("TOS %#x arrived as %#x", tos, got[15])
				}
				run := make([][]byte, 8) // equal sizes: one UDP_SEGMENT message
				for i := range run {
					run[i] = withTOS(frame(lo1, lo2, 7, make([]byte, 512)), tos)
				}
				sendAll(t, a, run)
				for i, got := range recvN(t, b, len(run)) {
					if got[15] != tos {
						t.Errorf("GSO frame %d: TOS %#x arrived as %#x", i, tos, got[15])
					}
				}
			}
		})
	}
}
