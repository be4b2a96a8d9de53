package daemon

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/xdproce/xdproce/internal/daemon/proto"
	"github.com/xdproce/xdproce/internal/netlab"
	"github.com/xdproce/xdproce/roce"
)

// TestPrivilegedSocket: the daemon's socket gets the mode asked for; a
// client is welcomed with a QPN range and a port; beyond MaxClients, with a
// malformed hello or another version, clients are refused with the reason;
// a second daemon on the same socket or the same interface is refused; a
// client's departure frees its place.
func TestPrivilegedSocket(t *testing.T) {
	netlab.Privileged(t)
	topo := netlab.Pair(t, netlab.LinkConfig{})
	sock := filepath.Join(t.TempDir(), "d.sock")
	var d *Daemon
	if err := topo.A.NS.Do(func() error {
		var err error
		d, err = Start(Config{Interface: topo.A.Name, Socket: sock, Mode: 0o600, Link: roce.LinkUDP, MaxClients: 1, QPNs: 256})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if fi, err := os.Stat(sock); err != nil || fi.Mode().Perm() != 0o600 || fi.Mode()&os.ModeSocket == 0 {
		t.Errorf("socket %v, %v; want a socket of mode 0600", fi.Mode(), err)
	}

	conn, w, port, err := proto.Dial(sock, "test", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if w.Interface != topo.A.Name || w.QPNLast-w.QPNFirst+1 > 256 || w.QPNFirst < 0x11 || w.Link != "UDP" || w.SrcPort != 4791 ||
		port.Props().MTU != w.MTU {
		t.Errorf("welcome %+v, port MTU %d", w, port.Props().MTU)
	}
	if _, _, _, err := proto.Dial(sock, "second", time.Second); err == nil || !strings.Contains(err.Error(), "limit of 1 clients") {
		t.Errorf("second client: %v", err)
	}
	for _, tc := range []struct{ send, want string }{
		{"not json", "bad hello"},
		{`{"version": 99}`, "version 99"},
	} {
		c, err := net.Dial("unixpacket", sock)
		if err != nil {
			t.Fatal(err)
		}
		c.Write([]byte(tc.send))
		var rw proto.Welcome
		c.SetDeadline(time.Now().Add(2 * time.Second))
		if err := proto.Read(c.(*net.UnixConn), &rw); err != nil || !strings.Contains(rw.Error, tc.want) {
			t.Errorf("hello %q: %v, %+v; want refused with %q", tc.send, err, rw, tc.want)
		}
		c.Close()
	}

	// Another daemon: same socket, or same interface.
	topo.A.NS.Do(func() error {
		_, err := Start(Config{Interface: topo.A.Name, Socket: sock, Link: roce.LinkUDP})
		if err == nil || !errors.Is(err, roce.ErrHeld) && !strings.Contains(err.Error(), "another daemon") {
			t.Errorf("second daemon on the same socket: %v", err)
		}
		_, err = Start(Config{Interface: topo.A.Name, Socket: sock + "2", Link: roce.LinkUDP})
		if !errors.Is(err, roce.ErrHeld) {
			t.Errorf("second daemon on the same interface: %v", err)
		}
		return nil
	})

	// The client goes: its place is free again.
	port.Close()
	conn.Close()
	deadline := time.Now().Add(2 * time.Second)
	for len(d.Stats().Clients) != 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	conn, _, port, err = proto.Dial(sock, "third", time.Second)
	if err != nil {
		t.Fatalf("a client after the first left: %v", err)
	}
	port.Close()
	conn.Close()

	// The default socket is keyed by the namespace.
	var p1, p2 string
	topo.A.NS.Do(func() (err error) { p1, err = proto.DefaultSocket("eth9"); return })
	topo.B.NS.Do(func() (err error) { p2, err = proto.DefaultSocket("eth9"); return })
	if p1 == p2 || !strings.Contains(p1, "eth9") {
		t.Errorf("default sockets %q and %q", p1, p2)
	}
}

// TestPrivilegedHostileClient: through a running daemon, a client writing
// garbage, a UD frame claiming another client's source QPN, a frame from
// a foreign address and an RC frame for a queue pair of the other client
// not connected to it into its port reaches nobody (each counted); its one
// well-formed frame for the other client's queue pair connected to it
// arrives there byte-exact.
// On the connection, its garbage requests and its claim to the other's
// service ID are refused, and both clients stay.
func TestPrivilegedHostileClient(t *testing.T) {
	netlab.Privileged(t)
	topo := netlab.Pair(t, netlab.LinkConfig{})
	sock := filepath.Join(t.TempDir(), "d.sock")
	var d *Daemon
	if err := topo.A.NS.Do(func() error {
		var err error
		d, err = Start(Config{Interface: topo.A.Name, Socket: sock, Link: roce.LinkUDP})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	c1, w1, p1, err := proto.Dial(sock, "hostile", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c1.Close()
	defer p1.Close()
	c2, w2, p2, err := proto.Dial(sock, "victim", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	defer p2.Close()
	local := topo.A.IPv4
	// The victim's queue pair QPNFirst+1 is connected to the hostile
	// client's QPNFirst+5; QPNFirst+3 to nobody.
	if err := proto.Call(c2, &proto.Request{Op: proto.OpConnQP, QPN: w2.QPNFirst + 1, GID: local.String(), PeerQPN: w1.QPNFirst + 5}, time.Second); err != nil {
		t.Fatal(err)
	}
	good := frame(t, local, local, w2.QPNFirst+1, false, 0)
	sendFrames(t, p1,
		[]byte("\xff\xff\xff\xff\xff\xff\x00\x00\x00\x00\x00\x00\x08\x00 garbage"),
		frame(t, local, local, w2.QPNFirst+1, true, w2.QPNFirst+2),
		frame(t, topo.B.IPv4, local, w2.QPNFirst+1, false, 0),
		frame(t, local, local, w2.QPNFirst+3, false, 0),
		good)
	var got [][]byte
	fr := make([][]byte, 8)
	deadline := time.Now().Add(2 * time.Second)
	for len(got) < 1 && time.Now().Before(deadline) {
		p2.Wait(50 * time.Millisecond)
		n, _ := p2.Receive(fr)
		for _, f := range fr[:n] {
			got = append(got, append([]byte(nil), f...))
		}
	}
	time.Sleep(50 * time.Millisecond)
	n, _ := p2.Receive(fr)
	if len(got) != 1 || n != 0 || string(got[0]) != string(good) {
		t.Errorf("the victim got %d frames, want the one well-formed frame", len(got)+n)
	}
	var hostile ClientStats
	for _, c := range d.Stats().Clients {
		if c.QPNFirst == w1.QPNFirst {
			hostile = c
		}
	}
	if hostile.DropMalformed != 1 || hostile.DropForeign != 1 || hostile.DropBadSource != 1 || hostile.DropForeignConn != 1 ||
		hostile.FromClient != 5 {
		t.Errorf("hostile client's counters %+v", hostile)
	}

	if err := proto.Call(c2, &proto.Request{Op: proto.OpListen, ServiceID: 7}, time.Second); err != nil {
		t.Fatal(err)
	}
	for _, r := range []*proto.Request{{Op: proto.OpListen, ServiceID: 7}, {Op: proto.OpUnlisten, ServiceID: 7}, {Op: "\x00"}} {
		if err := proto.Call(c1, r, time.Second); err == nil {
			t.Errorf("request %+v of the hostile client done", r)
		}
	}
	c1.Write([]byte("\xff{not json"))
	var rep proto.Reply
	c1.SetDeadline(time.Now().Add(time.Second))
	if err := proto.Read(c1, &rep); err != nil || !strings.Contains(rep.Error, "malformed request") {
		t.Errorf("garbage request: %v, %+v", err, rep)
	}
	if err := proto.Call(c2, &proto.Request{Op: proto.OpUnlisten, ServiceID: 7}, time.Second); err != nil {
		t.Errorf("the victim's service ID after the hostile requests: %v", err)
	}
	if n := len(d.Stats().Clients); n != 2 {
		t.Errorf("%d clients after the hostile requests, want 2", n)
	}
}
