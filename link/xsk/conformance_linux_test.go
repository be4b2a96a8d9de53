package xsk_test

import (
	"fmt"
	"testing"

	"github.com/xdproce/xdproce/bpf"
	"github.com/xdproce/xdproce/internal/netlab"
	"github.com/xdproce/xdproce/link"
	"github.com/xdproce/xdproce/link/linktest"
	"github.com/xdproce/xdproce/link/xsk"
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

// The conformance suite over MultiQueue: both ends of a 4-queue veth pair
// with a socket on every queue, joined by Device.Link.
func TestPrivilegedConformanceMultiQueue(t *testing.T) {
	netlab.Privileged(t)
	topo := netlab.Pair(t, netlab.LinkConfig{Queues: 4})
	linktest.Run(t, func(t *testing.T) linktest.Pair {
		var ls [2]link.Link
		for i, e := range []*netlab.Iface{topo.A, topo.B} {
			end := openEnd(t, e, bpf.ModeNative, nil)
			if n := len(end.Dev.Sockets); n != 4 {
				t.Fatalf("%s: %d sockets, want one per queue (4)", e.Name, n)
			}
			l, err := end.Dev.Link()
			if err != nil {
				t.Fatal(err)
			}
			if _, ok := l.(*xsk.MultiQueue); !ok {
				t.Fatalf("Device.Link() of 4 sockets is a %T, want *xsk.MultiQueue", l)
			}
			t.Cleanup(func() { l.Close() })
			ls[i] = l
		}
		return linktest.Pair{A: ls[0], B: ls[1], AddrA: topo.A.IPv4, AddrB: topo.B.IPv4}
	})
}
