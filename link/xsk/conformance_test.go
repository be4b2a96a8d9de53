package xsk_test

import (
	"fmt"
	"testing"

	"github.com/xdproce/xdproce/bpf"
	"github.com/xdproce/xdproce/internal/netlab"
	"github.com/xdproce/xdproce/link/linktest"
)

// The conformance suite, in native and generic XDP mode, at MTU 1500 (single
// chunk frames) and 9000 (multi-buffer). One lab per variant; every subtest
// opens fresh sockets and a fresh program on it, so each also checks that a
// queue is reusable right after the previous socket closed.
func TestPrivilegedConformance(t *testing.T) {
	netlab.Privileged(t)
	for _, mtu := range []int{1500, 9000} {
		for _, mode := range []bpf.Mode{bpf.ModeNative, bpf.ModeGeneric} {
			t.Run(fmt.Sprintf("%d/%v", mtu, mode), func(t *testing.T) {
				topo := netlab.Pair(t, netlab.LinkConfig{MTU: mtu})
				linktest.Run(t, func(t *testing.T) linktest.Pair {
					a := openEnd(t, topo.A, mode, nil)
					b := openEnd(t, topo.B, mode, nil)
					if got := a.Sock.Props().Name; got != "AF_XDP ("+mode.String()+")" {
						t.Errorf("Props().Name = %q", got)
					}
					if mb := a.Sock.MultiBuffer(); mb != (mtu > 3800) {
						t.Errorf("MultiBuffer() = %v at MTU %d", mb, mtu)
					}
					return linktest.Pair{A: a.Sock, B: b.Sock, AddrA: topo.A.IPv4, AddrB: topo.B.IPv4}
				})
			})
		}
	}
}
