package roce_test

import (
	"context"
	"flag"
	"net/netip"
	"testing"
	"time"

	"github.com/xdproce/xdproce/link"
	"github.com/xdproce/xdproce/link/pipe"
	"github.com/xdproce/xdproce/roce"
)

var long = flag.Bool("long", false, "run the long variants (256 MiB lossy transfer)")

var (
	addrA = netip.MustParseAddr("198.51.100.1")
	addrB = netip.MustParseAddr("198.51.100.2")
)

// newPipeDevices returns two devices joined by a pipe with cfg, closed when
// the test ends.
func newPipeDevices(tb testing.TB, cfg pipe.Config) (*devPair, *pipe.Link, *pipe.Link) {
	tb.Helper()
	la, lb, err := pipe.New(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	return newDevices(tb, la, lb), la, lb
}

// newDevices makes a device on each link (addresses addrA and addrB).
func newDevices(tb testing.TB, la, lb link.Link) *devPair {
	return newDevicesAt(tb, la, lb, addrA, addrB)
}

func newDevicesAt(tb testing.TB, la, lb link.Link, ipA, ipB netip.Addr) *devPair {
	tb.Helper()
	a, err := roce.NewDevice(la, &roce.Options{Addrs: []netip.Addr{ipA}})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { a.Close() })
	b, err := roce.NewDevice(lb, &roce.Options{Addrs: []netip.Addr{ipB}})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { b.Close() })
	// Take b's first QPN so that the two ends of a connection have
	// different QPNs (both devices count from 0x11).
	cq, err := b.CreateCQ(1)
	if err != nil {
		tb.Fatal(err)
	}
	if _, err := b.AllocPD().CreateQP(roce.QPConfig{Type: roce.RC, SendCQ: cq, RecvCQ: cq}); err != nil {
		tb.Fatal(err)
	}
	return &devPair{a: a, b: b}
}

type devPair struct{ a, b *roce.Device }

// side is one end of a connection: device, PD, CQs, QP and a registered
// buffer.
type side struct {
	dev  *roce.Device
	pd   *roce.PD
	scq  *roce.CQ
	rcq  *roce.CQ
	qp   *roce.QP
	buf  []byte
	mr   *roce.MR
	psn  uint32
	ipv6 bool // connect through the IPv6 GIDs
}

type connCfg struct {
	bufSize  int
	access   roce.Access // access of the buffer (default all)
	qpAccess roce.Access // remote access of the QP (default all)
	opts     *roce.ConnectOptions
	cqDepth  int
	maxWR    int
	window   int  // QPConfig.SendWindow
	ipv6     bool // use the devices' global IPv6 GIDs
}

func newSide(tb testing.TB, d *roce.Device, typ roce.QPType, c connCfg, psn uint32) *side {
	tb.Helper()
	if c.bufSize == 0 {
		c.bufSize = 1 << 20
	}
	if c.access == 0 {
		c.access = roce.LocalWrite | roce.RemoteWrite | roce.RemoteRead | roce.RemoteAtomic
	}
	if c.cqDepth == 0 {
		c.cqDepth = 1024
	}
	if c.maxWR == 0 {
		c.maxWR = 256
	}
	s := &side{dev: d, pd: d.AllocPD(), psn: psn, ipv6: c.ipv6}
	var err error
	if s.scq, err = d.CreateCQ(c.cqDepth); err != nil {
		tb.Fatal(err)
	}
	if s.rcq, err = d.CreateCQ(c.cqDepth); err != nil {
		tb.Fatal(err)
	}
	s.buf = make([]byte, c.bufSize)
	if s.mr, err = s.pd.RegMR(s.buf, c.access); err != nil {
		tb.Fatal(err)
	}
	if s.qp, err = s.pd.CreateQP(roce.QPConfig{Type: typ, SendCQ: s.scq, RecvCQ: s.rcq,
		MaxSendWR: c.maxWR, MaxRecvWR: c.maxWR, MaxSGE: 4, MaxInline: 256, SendWindow: c.window}); err != nil {
		tb.Fatal(err)
	}
	return s
}

func (s *side) endpoint(tb testing.TB) roce.Endpoint {
	gid, err := s.dev.GID(1)
	if err != nil {
		tb.Fatal(err)
	}
	if s.ipv6 {
		gid = netip.Addr{}
		for _, g := range s.dev.GIDs() {
			if !g.Is4In6() && !g.IsLinkLocalUnicast() {
				gid = g
				break
			}
		}
		if !gid.IsValid() {
			tb.Fatalf("no global IPv6 GID in %v", s.dev.GIDs())
		}
	}
	return roce.Endpoint{QPN: s.qp.QPN(), PSN: s.psn, GID: gid}
}

// connectRC makes an RC connection between devices a and b.
func connectRC(tb testing.TB, p *devPair, c connCfg) (x, y *side) {
	tb.Helper()
	x = newSide(tb, p.a, roce.RC, c, 0x1000)
	y = newSide(tb, p.b, roce.RC, c, 0xFFFFF0) // wraps the 24-bit PSN space early
	o := c.opts
	if o == nil {
		d := roce.DefaultConnectOptions()
		d.Timeout = 14 // ≈ 67 ms × 8 tries: a loaded machine (CI runs QEMU beside the tests) does not exhaust retries; fast retransmit brings lost frames back sooner
		o = &d
	}
	if c.qpAccess != 0 {
		oo := *o
		oo.Access = c.qpAccess
		o = &oo
	}
	if err := x.qp.Connect(x.psn, y.endpoint(tb), o); err != nil {
		tb.Fatal(err)
	}
	if err := y.qp.Connect(y.psn, x.endpoint(tb), o); err != nil {
		tb.Fatal(err)
	}
	return x, y
}

func (s *side) sge(off, n int) roce.SGE {
	return roce.SGE{Addr: s.mr.Addr() + uint64(off), Length: uint32(n), LKey: s.mr.LKey()}
}

// waitWC waits for one completion on cq.
func waitWC(tb testing.TB, cq *roce.CQ) roce.WC {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var wcs [1]roce.WC
	n, err := cq.Wait(ctx, wcs[:])
	if err != nil || n != 1 {
		tb.Fatalf("waiting for a completion: n=%d err=%v", n, err)
	}
	return wcs[0]
}

// noWC checks that cq stays empty for d.
func noWC(tb testing.TB, cq *roce.CQ, d time.Duration) {
	tb.Helper()
	time.Sleep(d)
	var wcs [4]roce.WC
	n, err := cq.Poll(wcs[:])
	if n != 0 || err != nil {
		tb.Fatalf("unexpected completions: %+v err=%v", wcs[:n], err)
	}
}

func fill(b []byte, seed byte) {
	for i := range b {
		b[i] = byte(i*7) + seed
	}
}

// skipRace skips tests whose links pass frames through the kernel when the
// race detector is on (see raceEnabled).
func skipRace(tb testing.TB) {
	tb.Helper()
	if raceEnabled {
		tb.Skip("the race detector cannot see the ordering frames through kernel sockets provide")
	}
}
