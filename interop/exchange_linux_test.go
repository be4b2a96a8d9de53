package interop

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/xdproce/xdproce/cm"
)

// TestPrivilegedInteropGuest checks the peer itself: rxe0 active on the tap's link, the RoCEv2
// IPv4 GID where rdma-core's -g/-x expects it, and IP between the namespace and the guest.
func TestPrivilegedInteropGuest(t *testing.T) {
	g := needGuest(t)
	note := ""
	record(t, "guest", "rxe0 up, GID, ping", "-", "-", &note)
	out := g.run(t, 60*time.Second, "ibv_devinfo -d rxe0; cat /sys/class/infiniband/rxe0/ports/1/gids/$XI_GID_INDEX")
	for _, want := range []string{"PORT_ACTIVE", "active_mtu:\t\t1024 (3)", "link_layer:\t\tEthernet"} {
		if !strings.Contains(out, want) {
			t.Errorf("ibv_devinfo lacks %q:\n%s", want, out)
		}
	}
	gid := cm.GIDFromAddr(netip.MustParseAddr(g.guestIP))
	if want := fmt.Sprintf("%x", gid[:]); !strings.Contains(strings.ReplaceAll(out, ":", ""), want) {
		t.Errorf("GID %d is not ::ffff:%s:\n%s", g.gidIndex, g.guestIP, out)
	}
	if g.gidIndex != 1 {
		t.Errorf("the IPv4 GID is at index %d; rxe puts it at 1 (xdproce's GID table follows that order)", g.gidIndex)
	}
	ping := g.run(t, 30*time.Second, "ping -c 1 -W 5 "+g.hostIP)
	if !strings.Contains(ping, "1 received") {
		t.Errorf("ping %s from the guest:\n%s", g.hostIP, ping)
	}
	// The virtio-net TX queue reads over QMP (needGuest looks at it when the path dies), and
	// QEMU has taken every buffer the guest posted (a moment after the ping's reply).
	var x txQueue
	var err error
	for range 20 {
		if x, err = g.txQueue(); err != nil || !x.stalled() {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil || x.stalled() || x.Used != x.LastAvail {
		t.Errorf("%v (%v)", x, err)
	}
	note = fmt.Sprintf("rxe0 PORT_ACTIVE, active MTU 1024, GID %d = ::ffff:%s", g.gidIndex, g.guestIP)
}

// dialIn dials the guest from inside the namespace.
func (g *guest) dialIn(ctx context.Context, port int) (net.Conn, error) {
	var c net.Conn
	err := g.inNetns(func() error {
		var err error
		var d net.Dialer
		c, err = d.DialContext(ctx, "tcp", net.JoinHostPort(g.guestIP, fmt.Sprint(port)))
		return err
	})
	return c, err
}

// listenIn listens on the namespace's host address.
func (g *guest) listenIn(port int) (net.Listener, error) {
	var l net.Listener
	err := g.inNetns(func() error {
		var err error
		l, err = net.Listen("tcp", net.JoinHostPort(g.hostIP, fmt.Sprint(port)))
		return err
	})
	return l, err
}

// TestPrivilegedInteropExchange runs package cm's out-of-band exchanges against the real
// tools, both roles, with no RoCE traffic: the tools must print the keys cm sent, and cm must
// read theirs.
func TestPrivilegedInteropExchange(t *testing.T) {
	g := needGuest(t)
	hostGID := cm.GIDFromAddr(netip.MustParseAddr(g.hostIP))
	guestGID := cm.GIDFromAddr(netip.MustParseAddr(g.guestIP))
	local := cm.PingpongDest{QPN: 0x000123, PSN: 0x0abcde, GID: hostGID}

	t.Run("ibv_rc_pingpong/cm-client", func(t *testing.T) {
		g := needGuest(t) // again: reboots the guest if the path to it died
		record(t, "ibv_rc_pingpong", "cm exchange only", "client", "tcp", nil)
		srv := g.start(t, "exec stdbuf -oL ibv_rc_pingpong -d rxe0 -g $XI_GID_INDEX -s 64 -n 1")
		g.guestListening(t, srv, cm.DefaultPort, 30*time.Second)
		ctx := ctxFor(t, 30*time.Second)
		c, err := g.dialIn(ctx, cm.DefaultPort)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		remote, err := cm.DialPingpong(ctx, c, local)
		if err != nil {
			t.Fatal(err)
		}
		if remote.GID != guestGID || remote.LID != 0 || remote.QPN == 0 {
			t.Errorf("server address %v, want LID 0, a QPN, GID %v", remote, guestGID)
		}
		out, ok := srv.waitOutput(20*time.Second, func(s string) bool { return strings.Contains(s, "remote address:") })
		if !ok || !strings.Contains(out, "remote address: "+local.String()) || !strings.Contains(out, "local address:  "+remote.String()) {
			t.Errorf("ibv_rc_pingpong printed:\n%s\nwant remote address: %v and local address: %v", out, local, remote)
		}
	})

	t.Run("ibv_rc_pingpong/cm-server", func(t *testing.T) {
		g := needGuest(t) // again: reboots the guest if the path to it died
		record(t, "ibv_rc_pingpong", "cm exchange only", "server", "tcp", nil)
		l, err := g.listenIn(cm.DefaultPort)
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		cli := g.start(t, fmt.Sprintf("exec stdbuf -oL ibv_rc_pingpong -d rxe0 -g $XI_GID_INDEX -s 64 -n 1 %s", g.hostIP))
		ctx := ctxFor(t, 60*time.Second)
		context.AfterFunc(ctx, func() { l.Close() })
		c, err := l.Accept()
		if err != nil {
			t.Fatalf("accept: %v; client output:\n%s", err, cli.output())
		}
		defer c.Close()
		var connected cm.PingpongDest
		remote, err := cm.ServePingpong(ctx, c, local, func(r cm.PingpongDest) error { connected = r; return nil })
		if err != nil {
			t.Fatal(err)
		}
		if remote != connected || remote.GID != guestGID || remote.QPN == 0 {
			t.Errorf("client address %v (connect saw %v), want GID %v", remote, connected, guestGID)
		}
		out, ok := cli.waitOutput(20*time.Second, func(s string) bool { return strings.Contains(s, "remote address:") })
		if !ok || !strings.Contains(out, "remote address: "+local.String()) || !strings.Contains(out, "local address:  "+remote.String()) {
			t.Errorf("ibv_rc_pingpong printed:\n%s\nwant remote address: %v and local address: %v", out, local, remote)
		}
	})

	keys := cm.PerftestDest{OutReads: 16, QPN: 0x000123, PSN: 0x0abcde, RKey: 0x00c0ffee, VAddr: 0x7f1234560000, GID: hostGID}
	// perftest prints " remote address: LID 0000 QPN 0x0123 PSN 0xabcde RKey 0xc0ffee VAddr 0x007f1234560000".
	keysLine := fmt.Sprintf("remote address: LID %04x QPN %s PSN %s RKey %s VAddr %s", keys.LID,
		cAltHex(uint64(keys.QPN), 6), cAltHex(uint64(keys.PSN), 6), cAltHex(uint64(keys.RKey), 8), cAltHex(keys.VAddr, 16))

	t.Run("ib_write_bw/cm-client", func(t *testing.T) {
		g := needGuest(t) // again: reboots the guest if the path to it died
		record(t, "ib_write_bw", "cm exchange + report", "client", "tcp", nil)
		// The server is passive in a WRITE test: the whole exchange runs with no RDMA at all,
		// and it prints the report the client sends.
		srv := g.start(t, "exec stdbuf -oL ib_write_bw -d rxe0 -x $XI_GID_INDEX -s 4096 -n 5")
		g.guestListening(t, srv, cm.DefaultPort, 30*time.Second)
		ctx := ctxFor(t, 60*time.Second)
		c, err := g.dialIn(ctx, cm.DefaultPort)
		if err != nil {
			t.Fatal(err)
		}
		pc := cm.NewPerftestConn(c, true)
		remote, mtu, err := pc.Setup(ctx, cm.WriteBW, cm.PerftestSetup{MTU: 3, Local: keys})
		if err != nil {
			t.Fatal(err)
		}
		if remote.GID != guestGID || remote.RKey == 0 || remote.VAddr == 0 || mtu != 3 || pc.RemoteVersion() == "" {
			t.Errorf("server keys %+v mtu %d version %q", remote, mtu, pc.RemoteVersion())
		}
		rep := cm.PerftestReport{Size: 4096, Iters: 5, BWPeak: 12.34, BWAvg: 11.11, MsgRate: 0.002844}
		if _, err := pc.Finish(ctx, cm.WriteBW, keys, rep); err != nil {
			t.Fatal(err)
		}
		out, rc, err := srv.wait(30 * time.Second)
		if err != nil || rc != 0 {
			t.Fatalf("ib_write_bw server: rc %d %v\n%s", rc, err, out)
		}
		if !strings.Contains(out, keysLine) || !strings.Contains(out, "12.34") || !strings.Contains(out, "11.11") {
			t.Errorf("ib_write_bw printed:\n%s\nwant %q and the report 12.34 / 11.11", out, keysLine)
		}
	})

	t.Run("ib_write_bw/cm-server", func(t *testing.T) {
		g := needGuest(t) // again: reboots the guest if the path to it died
		record(t, "ib_write_bw", "cm exchange only", "server", "tcp", nil)
		l, err := g.listenIn(cm.DefaultPort)
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		cli := g.start(t, fmt.Sprintf("exec stdbuf -oL ib_write_bw -d rxe0 -x $XI_GID_INDEX -s 4096 -n 5 %s", g.hostIP))
		ctx := ctxFor(t, 60*time.Second)
		context.AfterFunc(ctx, func() { l.Close() })
		c, err := l.Accept()
		if err != nil {
			t.Fatalf("accept: %v; client output:\n%s", err, cli.output())
		}
		defer c.Close()
		pc := cm.NewPerftestConn(c, false)
		remote, _, err := pc.Setup(ctx, cm.WriteBW, cm.PerftestSetup{MTU: 3, Local: keys})
		if err != nil {
			t.Fatal(err)
		}
		if remote.GID != guestGID || remote.QPN == 0 {
			t.Errorf("client keys %+v", remote)
		}
		// The client now WRITEs to a QP that does not exist: stop here.
		out, ok := cli.waitOutput(10*time.Second, func(s string) bool { return strings.Contains(s, keysLine) })
		if !ok {
			t.Errorf("ib_write_bw client printed:\n%s\nwant %q", out, keysLine)
		}
	})
}

// cAltHex formats v as C's "%#0Nx" does: the width counts the "0x".
func cAltHex(v uint64, width int) string {
	s := fmt.Sprintf("%x", v)
	for len(s)+2 < width {
		s = "0" + s
	}
	return "0x" + s
}
