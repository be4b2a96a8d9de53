package roce_test

import (
	"net/netip"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/xdproce/xdproce/internal/netlab"
	"github.com/xdproce/xdproce/roce"
)

// TestPrivilegedPortFollowsInterface: a device opened on an interface
// follows it: an address added or deleted there changes the GID table (in
// rxe's order) with a GID_CHANGE event within 2 s, and over AF_XDP frames
// to the new address reach the device; the link set down and up moves the
// port to DOWN and back to ACTIVE with PORT_ERR and PORT_ACTIVE. Closing
// the device ends the subscription's goroutines.
func TestPrivilegedPortFollowsInterface(t *testing.T) {
	netlab.Privileged(t)
	for _, k := range []roce.LinkKind{roce.LinkUDP, roce.LinkXSK} {
		t.Run(k.String(), func(t *testing.T) { testPortFollows(t, k) })
	}
}

func testPortFollows(t *testing.T, kind roce.LinkKind) {
	topo := netlab.Pair(t, netlab.LinkConfig{})
	a, b := topo.A, topo.B
	for _, e := range []*netlab.Iface{a, b} {
		if err := e.Up(5 * time.Second); err != nil {
			t.Fatal(err)
		}
	}
	before := runtime.NumGoroutine()
	d := openIn(t, a, roce.Options{Link: kind})
	hw := [6]byte(a.HWAddr)
	ll := roce.LinkLocalGID(hw)
	gid := func(ip string) netip.Addr { return roce.GIDFromIP(netip.MustParseAddr(ip)) }
	added := gid("203.0.113.5")
	base := []netip.Addr{ll, roce.GIDFromIP(a.IPv4), roce.GIDFromIP(a.IPv6)}
	if got := d.GIDs(); !slices.Equal(got, base) {
		t.Fatalf("GIDs at open %v, want %v", got, base)
	}
	if p, _ := d.QueryPort(1); p.State != roce.PortActive || p.SpeedMbps != 10000 {
		t.Fatalf("port at open: %+v, want ACTIVE at veth's 10000 Mb/s", p)
	}

	if err := a.NS.IP("addr", "add", "203.0.113.5/24", "dev", a.Name); err != nil {
		t.Fatal(err)
	}
	if ev, others := waitEvent(t, d, roce.EventGIDChange, 2*time.Second); ev.Port != 1 || len(others) != 0 {
		t.Fatalf("event %v, before it %v", ev, others)
	}
	want := []netip.Addr{ll, roce.GIDFromIP(a.IPv4), added, roce.GIDFromIP(a.IPv6)}
	if got := d.GIDs(); !slices.Equal(got, want) {
		t.Fatalf("GIDs after adding 203.0.113.5: %v, want %v", got, want)
	}
	// The new GID carries traffic: b writes to a QP of d through it.
	if err := b.NS.IP("addr", "add", "203.0.113.6/24", "dev", b.Name); err != nil {
		t.Fatal(err)
	}
	db := openIn(t, b, roce.Options{Link: kind})
	waitGID(t, db, gid("203.0.113.6"))
	writeThrough(t, d, db, added, gid("203.0.113.6"))

	if err := a.NS.IP("addr", "del", "203.0.113.5/24", "dev", a.Name); err != nil {
		t.Fatal(err)
	}
	waitEvent(t, d, roce.EventGIDChange, 2*time.Second)
	if got := d.GIDs(); !slices.Equal(got, base) {
		t.Fatalf("GIDs after deleting 203.0.113.5: %v, want %v", got, base)
	}

	if err := a.NS.IP("link", "set", a.Name, "down"); err != nil {
		t.Fatal(err)
	}
	// Setting a link down also drops its IPv6 address (GID_CHANGE).
	waitEvent(t, d, roce.EventPortError, 2*time.Second)
	if p, _ := d.QueryPort(1); p.State != roce.PortDown || p.PhysState != roce.PhysDisabled || d.PortActive() {
		t.Fatalf("port after link down: %+v", p)
	}
	if err := a.NS.IP("link", "set", a.Name, "up"); err != nil {
		t.Fatal(err)
	}
	waitEvent(t, d, roce.EventPortActive, 3*time.Second) // carrier may take a second
	if p, _ := d.QueryPort(1); p.State != roce.PortActive {
		t.Fatalf("port after link up: %+v", p)
	}

	d.Close()
	db.Close()
	deadline := time.Now().Add(2 * time.Second)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before {
		buf := make([]byte, 1<<16)
		t.Fatalf("%d goroutines after close, %d before open:\n%s", n, before, buf[:runtime.Stack(buf, true)])
	}
}

// waitGID waits until d's GID table holds g.
func waitGID(t *testing.T, d *roce.Device, g netip.Addr) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Second)
	for !slices.Contains(d.GIDs(), g) {
		if time.Now().After(deadline) {
			t.Fatalf("%v not in %v", g, d.GIDs())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// writeThrough connects an RC queue pair of db (source GID gb) to one of d
// at GID ga and writes 4 KiB to it.
func writeThrough(t *testing.T, d, db *roce.Device, ga, gb netip.Addr) {
	t.Helper()
	x := newSide(t, d, roce.RC, connCfg{bufSize: 8192}, 0x10)
	y := newSide(t, db, roce.RC, connCfg{bufSize: 8192}, 0x20)
	o := roce.DefaultConnectOptions()
	oy := o
	o.SGID, oy.SGID = ga, gb
	if err := x.qp.Connect(x.psn, roce.Endpoint{QPN: y.qp.QPN(), PSN: y.psn, GID: gb}, &o); err != nil {
		t.Fatal(err)
	}
	if err := y.qp.Connect(y.psn, roce.Endpoint{QPN: x.qp.QPN(), PSN: x.psn, GID: ga}, &oy); err != nil {
		t.Fatal(err)
	}
	fill(y.buf[:4096], 9)
	if err := y.qp.PostSend(roce.SendWR{Opcode: roce.WRRDMAWrite, Flags: roce.Signaled, SGL: []roce.SGE{y.sge(0, 4096)},
		RemoteAddr: x.mr.Addr(), RKey: x.mr.RKey()}); err != nil {
		t.Fatal(err)
	}
	if wc := waitWC(t, y.scq); wc.Status != roce.WCSuccess {
		t.Fatalf("write to the new GID %v: %v", ga, wc.Status)
	}
	if !slices.Equal(x.buf[:4096], y.buf[:4096]) {
		t.Fatal("written data did not land")
	}
}
