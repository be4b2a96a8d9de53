package roce_test

import (
	"net"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/xdproce/xdproce/internal/netlab"
	"github.com/xdproce/xdproce/roce"
)

// TestPrivilegedUDPTwoInterfaces: two UDP devices on two veths of one
// namespace, both on port 4791 (each socket bound to its interface), each
// runs every RC operation with its own peer, although both veths are on the
// same subnets (only the binding sends each device's frames out of its own
// veth). A second UDP open on one of them is refused naming the holder; a
// socket on 4791 bound to the other interface does not keep AF_XDP off the
// first.
func TestPrivilegedUDPTwoInterfaces(t *testing.T) {
	netlab.Privileged(t)
	lab := netlab.NewT(t)
	var ns [3]*netlab.NS
	for i, n := range []string{"m", "a", "b"} {
		var err error
		if ns[i], err = lab.AddNS(n); err != nil {
			t.Fatal(err)
		}
	}
	ma, a, err := lab.Connect(ns[0], ns[1], netlab.LinkConfig{})
	if err != nil {
		t.Fatal(err)
	}
	mb, b, err := lab.Connect(ns[0], ns[2], netlab.LinkConfig{})
	if err != nil {
		t.Fatal(err)
	}
	udp := roce.Options{Link: roce.LinkUDP}
	dma, dmb := openIn(t, ma, udp), openIn(t, mb, udp)
	for _, d := range []*roce.Device{dma, dmb} {
		if d.LinkName() != "UDP" || d.Props().SrcPort != 4791 {
			t.Fatalf("%s: link %q on port %d, want UDP on 4791", d.Name(), d.LinkName(), d.Props().SrcPort)
		}
	}
	runOperations(t, &devPair{a: dma, b: openIn(t, a, udp)})
	runOperations(t, &devPair{a: dmb, b: openIn(t, b, udp)})

	wantHeld(t, "second UDP open on "+ma.Name, openErrIn(t, ma, udp), "UDP port 4791 on ::")

	// A plain socket on 4791 bound to mb's veth (the device there closed)
	// does not compete with AF_XDP on ma's.
	dmb.Close()
	dma.Close()
	var c net.PacketConn
	if err := ns[0].Do(func() error {
		lc := net.ListenConfig{Control: func(_, _ string, rc syscall.RawConn) error {
			var serr error
			if err := rc.Control(func(fd uintptr) { serr = unix.BindToDevice(int(fd), mb.Name) }); err != nil {
				return err
			}
			return serr
		}}
		var err error
		c, err = lc.ListenPacket(t.Context(), "udp", ":4791")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	x := openIn(t, ma, roce.Options{Link: roce.LinkXSK})
	if !strings.HasPrefix(x.LinkName(), "AF_XDP") {
		t.Fatalf("link %q (%s)", x.LinkName(), x.LinkReason())
	}
	x.Close()
	wantHeld(t, "AF_XDP on the socket's interface", openErrIn(t, mb, roce.Options{Link: roce.LinkXSK}), "UDP port 4791 on ::")
}
