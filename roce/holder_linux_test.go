package roce_test

import (
	"errors"
	"net"
	"os"
	"strings"
	"testing"

	"github.com/xdproce/xdproce/bpf"
	"github.com/xdproce/xdproce/internal/netlab"
	"github.com/xdproce/xdproce/roce"
)

// openErrIn is Open in the interface's namespace, for a call that must fail.
func openErrIn(t *testing.T, e *netlab.Iface, o roce.Options) error {
	t.Helper()
	return e.NS.Do(func() error {
		d, err := roce.Open(e.Name, &o)
		if err == nil {
			d.Close()
		}
		return err
	})
}

// wantHeld checks that err is a *HeldError naming this process (the holder
// in these tests) and containing holds.
func wantHeld(t *testing.T, what string, err error, holds string) {
	t.Helper()
	var he *roce.HeldError
	if !errors.As(err, &he) || !errors.Is(err, roce.ErrHeld) {
		t.Errorf("%s: %v, want a *HeldError", what, err)
		return
	}
	if he.Holder.PID != os.Getpid() || !strings.Contains(he.Holder.Command, "roce.test") ||
		!strings.Contains(he.Holder.Holds, holds) || strings.Count(err.Error(), "\n") != 0 {
		t.Errorf("%s: holder %+v (%v), want PID %d, roce.test, %q", what, he.Holder, err, os.Getpid(), holds)
	}
}

// TestPrivilegedOpenHeld: while a device holds an interface by AF_XDP, a
// second Open there fails at once with a *HeldError naming the holder,
// whatever link it asks for (auto does not fall back to UDP), and so does
// ProbeAFXDP; once the device is closed, both succeed.
func TestPrivilegedOpenHeld(t *testing.T) {
	netlab.Privileged(t)
	topo := netlab.Pair(t, netlab.LinkConfig{})
	d := openIn(t, topo.A, roce.Options{Link: roce.LinkXSK})
	for _, k := range []roce.LinkKind{roce.LinkAuto, roce.LinkXSK, roce.LinkUDP} {
		wantHeld(t, "second open, "+k.String(), openErrIn(t, topo.A, roce.Options{Link: k}), "XDP program "+bpf.Name+" (id ")
	}
	err := topo.A.NS.Do(func() error { return roce.ProbeAFXDP(topo.A.Name) })
	wantHeld(t, "probe", err, "XDP program "+bpf.Name)
	t.Logf("held: %v", err)
	d.Close()
	if err := topo.A.NS.Do(func() error { return roce.ProbeAFXDP(topo.A.Name) }); err != nil {
		t.Errorf("probe after close: %v", err)
	}
	openIn(t, topo.A, roce.Options{Link: roce.LinkXSK}).Close()
}

// TestPrivilegedOpenHeldByOthers: an XDP program attached without xdproce's
// announcement and a plain UDP socket on port 4791 keep AF_XDP off the
// interface, named by the file descriptors that hold them; a UDP device on
// port 4791 is named by its announcement.
func TestPrivilegedOpenHeldByOthers(t *testing.T) {
	netlab.Privileged(t)
	topo := netlab.Pair(t, netlab.LinkConfig{})

	var p *bpf.Program
	if err := topo.A.NS.Do(func() error {
		var err error
		p, err = bpf.Attach(topo.A.Name, nil, nil, &bpf.Options{Mode: bpf.ModeGeneric})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	wantHeld(t, "foreign XDP program", openErrIn(t, topo.A, roce.Options{Link: roce.LinkXSK}), "XDP program "+bpf.Name+" (id ")
	p.Close()

	var c net.PacketConn
	if err := topo.A.NS.Do(func() error {
		var err error
		c, err = net.ListenPacket("udp", topo.A.IPv4.String()+":4791")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	wantHeld(t, "plain UDP socket", openErrIn(t, topo.A, roce.Options{Link: roce.LinkAuto}), "UDP port 4791 on "+topo.A.IPv4.String())
	wantHeld(t, "UDP open on a taken port", openErrIn(t, topo.A, roce.Options{Link: roce.LinkUDP}), "UDP port 4791 on "+topo.A.IPv4.String())
	c.Close()

	u := openIn(t, topo.B, roce.Options{Link: roce.LinkUDP})
	wantHeld(t, "UDP device", openErrIn(t, topo.B, roce.Options{Link: roce.LinkXSK}), "UDP port 4791 on ::")
	u.Close()
	openIn(t, topo.B, roce.Options{Link: roce.LinkXSK}).Close()
}
