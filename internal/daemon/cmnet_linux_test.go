package daemon

import (
	"bytes"
	"context"
	"errors"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/xdproce/xdproce/internal/netlab"
	"github.com/xdproce/xdproce/roce"
)

// shortCM keeps the CM's waits short: 4.096 µs · 2^14 ≈ 67 ms per try.
var shortCM = roce.CMOptions{ResponseTimeout: 14, MaxRetries: 15}

// daemonPair is a daemon holding A by AF_XDP with two attached clients x
// and y, and z, a device that opens B itself.
type daemonPair struct {
	topo    *netlab.Topo
	d       *Daemon
	x, y, z *roce.Device
}

func newDaemonPair(t *testing.T) *daemonPair {
	p := &daemonPair{topo: netlab.Pair(t, netlab.LinkConfig{MTU: 9000})}
	sock := filepath.Join(t.TempDir(), "d.sock")
	if err := p.topo.A.NS.Do(func() error {
		var err error
		if p.d, err = Start(Config{Interface: p.topo.A.Name, Socket: sock, Link: roce.LinkXSK}); err != nil {
			return err
		}
		t.Cleanup(func() { p.d.Close() })
		for _, dev := range []**roce.Device{&p.x, &p.y} {
			if *dev, err = roce.Open(p.topo.A.Name, &roce.Options{Link: roce.LinkDaemon, Daemon: sock}); err != nil {
				return err
			}
			t.Cleanup(func() { (*dev).Close() })
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := p.topo.B.NS.Do(func() error {
		var err error
		p.z, err = roce.Open(p.topo.B.Name, &roce.Options{Link: roce.LinkXSK})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.z.Close() })
	return p
}

// A crossing is one way a connection goes through the daemon pair.
type crossing struct {
	name     string
	from, to *roce.Device
	dst      netip.Addr // to's address
}

// crossings are the ways the CM tests connect: the wire to each client, a
// client to the other (same host) and to the wire, IPv6 both ways.
func (p *daemonPair) crossings() []crossing {
	a4, b4, a6, b6 := p.topo.A.IPv4, p.topo.B.IPv4, p.topo.A.IPv6, p.topo.B.IPv6
	return []crossing{
		{"z to x", p.z, p.x, a4},
		{"z to y", p.z, p.y, a4},
		{"x to y (same host)", p.x, p.y, a4},
		{"y to z", p.y, p.z, b4},
		{"z to x over IPv6", p.z, p.x, a6},
		{"x to z over IPv6", p.x, p.z, b6},
	}
}

// cmConnect dials from device from to the listener l (on device to, at
// dst) and accepts there; it returns both sides, connected.
func cmConnect(t *testing.T, from, to *roce.Device, l *roce.CMListener, dst netip.Addr) (a, b *scriptSide, ka, kb *roce.CMConn) {
	t.Helper()
	a, b = newScriptSide(t, from, 4096), newScriptSide(t, to, 4096)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	type res struct {
		k   *roce.CMConn
		err error
	}
	acc := make(chan res, 1)
	go func() {
		r, err := l.Accept(ctx)
		if err != nil {
			acc <- res{nil, err}
			return
		}
		if !bytes.HasPrefix(r.PrivateData, []byte("hello")) {
			acc <- res{nil, errors.New("request private data " + string(r.PrivateData))}
			return
		}
		k, err := r.Accept(ctx, b.qp, []byte("welcome"))
		acc <- res{k, err}
	}()
	ka, err := from.DialCM(ctx, a.qp, netip.AddrPortFrom(dst, l.Port()), []byte("hello"), &shortCM)
	if err != nil {
		t.Fatal(err)
	}
	r := <-acc
	if r.err != nil {
		t.Fatal(r.err)
	}
	if !bytes.HasPrefix(ka.PrivateData, []byte("welcome")) {
		t.Fatalf("REP private data %q", ka.PrivateData)
	}
	return a, b, ka, r.k
}

// sendBothWays moves a SEND each way over connected sides and checks the
// bytes landed.
func sendBothWays(t *testing.T, a, b *scriptSide) {
	t.Helper()
	for i, dir := range []struct{ from, to *scriptSide }{{a, b}, {b, a}} {
		msg := []byte("through the daemon's QP1 " + string(rune('0'+i)))
		copy(dir.from.buf, msg)
		if err := dir.to.qp.PostRecv(roce.RecvWR{ID: 1, SGL: []roce.SGE{{Addr: dir.to.mr.Addr() + 2048, Length: 2048, LKey: dir.to.mr.LKey()}}}); err != nil {
			t.Fatal(err)
		}
		if err := dir.from.qp.PostSend(roce.SendWR{ID: 2, Opcode: roce.WRSend, Flags: roce.Signaled,
			SGL: []roce.SGE{{Addr: dir.from.mr.Addr(), Length: uint32(len(msg)), LKey: dir.from.mr.LKey()}}}); err != nil {
			t.Fatal(err)
		}
		if got := dir.to.wait(t, 1); got[0].Status != roce.WCSuccess.String() || got[0].ByteLen != uint32(len(msg)) {
			t.Fatalf("receive %+v", got[0])
		}
		if got := dir.from.wait(t, 1); got[0].Status != roce.WCSuccess.String() {
			t.Fatalf("send %+v", got[0])
		}
		if !bytes.Equal(dir.to.buf[2048:2048+len(msg)], msg) {
			t.Fatal("the SEND's bytes differ")
		}
	}
}

// TestPrivilegedCM: two clients of one daemon each take QP1's role for
// their own RDMA CM listeners and dials: a device on the other side of the
// veth connects to both, one client connects to the other (the MADs and
// the data switched port to port) and to the remote device, over IPv4 and
// IPv6; a SEND moves
// each way on every connection; a client cannot listen on the other's
// port; a REQ to a port no client listens on is refused by the daemon (REJ
// invalid service ID); a disconnect from the wire reaches the client; a
// client that goes leaves its port free and its peers' DREQs answered.
func TestPrivilegedCM(t *testing.T) {
	netlab.Privileged(t)
	p := newDaemonPair(t)
	addrA := p.topo.A.IPv4
	listen := func(d *roce.Device, port uint16) *roce.CMListener {
		l, err := d.ListenCM(port, &shortCM)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		return l
	}
	lx, ly, lz := listen(p.x, 7001), listen(p.y, 7002), listen(p.z, 7003)
	if _, err := p.y.ListenCM(7001, &shortCM); err == nil || !strings.Contains(err.Error(), "taken by client") {
		t.Fatalf("y listened on x's port: %v", err)
	}
	type conn struct {
		name   string
		a, b   *scriptSide
		ka, kb *roce.CMConn
	}
	var conns []conn
	ls := map[*roce.Device]*roce.CMListener{p.x: lx, p.y: ly, p.z: lz}
	for _, tc := range p.crossings() {
		a, b, ka, kb := cmConnect(t, tc.from, tc.to, ls[tc.to], tc.dst)
		sendBothWays(t, a, b)
		conns = append(conns, conn{tc.name, a, b, ka, kb})
	}
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	q := newScriptSide(t, p.z, 4096)
	var rej *roce.CMRejectError
	if _, err := p.z.DialCM(ctx, q.qp, netip.AddrPortFrom(addrA, 7009), nil, &shortCM); !errors.As(err, &rej) || rej.Reason != roce.CMRejInvalidServiceID {
		t.Fatalf("dial to a port nobody listens on: %v", err)
	}
	if err := conns[0].ka.Disconnect(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-conns[0].kb.Done():
	case <-ctx.Done():
		t.Fatal("x did not see z's disconnect")
	}
	// y goes: its service ID is free (a REQ to it is refused by the
	// daemon), and z's DREQ on its connection to y is answered by the
	// daemon (DREP) at once instead of timing out.
	p.y.Close()
	for deadline := time.Now().Add(5 * time.Second); len(p.d.Stats().Clients) != 1; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the daemon still has y")
		}
	}
	if _, err := p.z.DialCM(ctx, newScriptSide(t, p.z, 4096).qp, netip.AddrPortFrom(addrA, 7002), nil, &shortCM); !errors.As(err, &rej) || rej.Reason != roce.CMRejInvalidServiceID {
		t.Fatalf("dial to the departed client's port: %v", err)
	}
	start := time.Now()
	if err := conns[1].ka.Disconnect(ctx); err != nil || time.Since(start) > time.Second {
		t.Fatalf("disconnect from the departed client: %v after %v", err, time.Since(start))
	}
	st := p.d.Stats()
	if st.CMAnswered < 3 || st.Switched == 0 {
		t.Errorf("daemon stats %+v", st)
	}
	t.Logf("daemon: %d frames in, %d out, %d switched, %d MADs answered, %d QP1 frames dropped",
		st.WireRx, st.WireTx, st.Switched, st.CMAnswered, st.DropQP1)
}

// TestPrivilegedGroup: two clients of one daemon join a multicast group
// and attach a UD queue pair each; a UD SEND to the group from a device on
// the other side of the veth reaches both; one from a client reaches the
// other client and the remote device.
func TestPrivilegedGroup(t *testing.T) {
	netlab.Privileged(t)
	p := newDaemonPair(t)
	const qkey = 0x55
	group := netip.MustParseAddr("239.1.7.9")
	ud := func(d *roce.Device) *scriptSide {
		s := udSide(t, d)
		if err := s.qp.Activate(qkey, 0x100); err != nil {
			t.Fatal(err)
		}
		leave, err := d.JoinGroup(group)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { leave() })
		if err := s.qp.AttachMcast(roce.GIDFromIP(group)); err != nil {
			t.Fatal(err)
		}
		return s
	}
	var x, y, z *scriptSide
	if err := p.topo.A.NS.Do(func() error { x, y = ud(p.x), ud(p.y); return nil }); err != nil {
		t.Fatal(err)
	}
	if err := p.topo.B.NS.Do(func() error { z = ud(p.z); return nil }); err != nil {
		t.Fatal(err)
	}
	if _, err := p.x.JoinGroup(group); err == nil {
		t.Error("x joined the group twice")
	}
	send := func(from *scriptSide, to []*scriptSide, msg string) {
		t.Helper()
		for _, s := range to {
			if err := s.qp.PostRecv(roce.RecvWR{ID: 1, SGL: []roce.SGE{{Addr: s.mr.Addr() + 4096, Length: 4096, LKey: s.mr.LKey()}}}); err != nil {
				t.Fatal(err)
			}
		}
		ah, err := from.dev.CreateAH(roce.GIDFromIP(group), roce.MulticastQPN, qkey)
		if err != nil {
			t.Fatal(err)
		}
		copy(from.buf, msg)
		if err := from.qp.PostSendAH(roce.SendWR{ID: 2, Opcode: roce.WRSend, Flags: roce.Signaled,
			SGL: []roce.SGE{{Addr: from.mr.Addr(), Length: uint32(len(msg)), LKey: from.mr.LKey()}}}, ah); err != nil {
			t.Fatal(err)
		}
		if got := from.wait(t, 1); got[0].Status != roce.WCSuccess.String() {
			t.Fatalf("send %+v", got[0])
		}
		for _, s := range to {
			// The receive buffer starts with the 40-byte GRH area.
			if got := s.wait(t, 1); got[0].Status != roce.WCSuccess.String() || got[0].ByteLen != uint32(40+len(msg)) ||
				!bytes.Equal(s.buf[4096+40:4096+40+len(msg)], []byte(msg)) {
				t.Fatalf("%q: receive %+v", msg, got[0])
			}
		}
	}
	send(z, []*scriptSide{x, y}, "from the wire to both clients")
	send(x, []*scriptSide{y, z}, "from a client to the other and the wire")
	if st := p.d.Stats(); st.GroupFrames < 3 {
		t.Errorf("daemon stats %+v", st)
	}
}
