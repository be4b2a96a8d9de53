package netlab_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/xdproce/xdproce/internal/netlab"
)

// listen opens a socket inside ns.
func listenUDP(t *testing.T, ns *netlab.NS, addr netip.AddrPort) *net.UDPConn {
	t.Helper()
	var c *net.UDPConn
	err := ns.Do(func() error {
		var err error
		c, err = net.ListenUDP("udp", net.UDPAddrFromAddrPort(addr))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func TestPrivilegedPairTCPAndUDP(t *testing.T) {
	for _, mtu := range []int{1500, 9000} {
		t.Run(strconv.Itoa(mtu), func(t *testing.T) {
			topo := netlab.Pair(t, netlab.LinkConfig{MTU: mtu})
			if topo.A.IPv4 == topo.B.IPv4 || !netlab.Prefix4.Contains(topo.A.IPv4) || !netlab.Prefix6.Contains(topo.B.IPv6) {
				t.Fatalf("addresses A %v %v, B %v %v", topo.A.IPv4, topo.A.IPv6, topo.B.IPv4, topo.B.IPv6)
			}
			if topo.A.MTU != mtu || len(topo.A.HWAddr) != 6 || topo.A.Index == 0 {
				t.Fatalf("iface A = %+v", topo.A)
			}
			for _, ip := range []netip.Addr{topo.B.IPv4, topo.B.IPv6} {
				var ln net.Listener
				if err := topo.B.NS.Do(func() (err error) {
					ln, err = net.Listen("tcp", netip.AddrPortFrom(ip, 0).String())
					return err
				}); err != nil {
					t.Fatal(err)
				}
				payload := bytes.Repeat([]byte("xdproce"), 100000)
				done := make(chan error, 1)
				go func() {
					c, err := ln.Accept()
					if err != nil {
						done <- err
						return
					}
					defer c.Close()
					_, err = io.Copy(c, c)
					done <- err
				}()
				var c net.Conn
				if err := topo.A.NS.Do(func() (err error) {
					c, err = net.DialTimeout("tcp", ln.Addr().String(), 5*time.Second)
					return err
				}); err != nil {
					t.Fatal(err)
				}
				c.SetDeadline(time.Now().Add(10 * time.Second))
				go func() { c.Write(payload); c.(*net.TCPConn).CloseWrite() }()
				got, err := io.ReadAll(c)
				c.Close()
				ln.Close()
				if err != nil || !bytes.Equal(got, payload) {
					t.Fatalf("tcp echo over %v: %d of %d bytes, err %v", ip, len(got), len(payload), err)
				}
				if err := <-done; err != nil {
					t.Fatal(err)
				}
			}
			// A datagram filling the MTU arrives whole.
			srv := listenUDP(t, topo.B.NS, netip.AddrPortFrom(topo.B.IPv4, 0))
			cli := listenUDP(t, topo.A.NS, netip.AddrPortFrom(topo.A.IPv4, 0))
			msg := bytes.Repeat([]byte{0xa5}, mtu-28)
			if _, err := cli.WriteToUDPAddrPort(msg, srv.LocalAddr().(*net.UDPAddr).AddrPort()); err != nil {
				t.Fatal(err)
			}
			srv.SetReadDeadline(time.Now().Add(5 * time.Second))
			buf := make([]byte, 10000)
			n, _, err := srv.ReadFromUDPAddrPort(buf)
			if err != nil || !bytes.Equal(buf[:n], msg) {
				t.Fatalf("udp: %d bytes, err %v", n, err)
			}
		})
	}
}

func TestPrivilegedCloseRemovesEverything(t *testing.T) {
	netlab.Privileged(t)
	topo, err := netlab.NewPair(netlab.LinkConfig{})
	if err != nil {
		t.Fatal(err)
	}
	names := []string{topo.A.NS.Name, topo.B.NS.Name}
	for _, n := range names {
		if _, err := os.Stat("/run/netns/" + n); err != nil {
			t.Fatalf("namespace %s missing while open: %v", n, err)
		}
	}
	if err := topo.Close(); err != nil {
		t.Fatal(err)
	}
	if err := topo.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	for _, n := range names {
		if _, err := os.Stat("/run/netns/" + n); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("namespace %s still there after Close (%v)", n, err)
		}
	}
}

func TestPrivilegedRemoveStale(t *testing.T) {
	netlab.Privileged(t)
	// A pid that is certainly dead: a child that has exited and been reaped.
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	dead := netlab.Prefix + strconv.Itoa(cmd.Process.Pid) + "-1-x"
	live := netlab.Prefix + strconv.Itoa(os.Getpid()) + "-999-x"
	// A killed process not yet reaped (a zombie) counts as dead too.
	zcmd := exec.Command("sleep", "30")
	if err := zcmd.Start(); err != nil {
		t.Fatal(err)
	}
	zcmd.Process.Kill()
	defer zcmd.Wait()
	for deadline := time.Now().Add(5 * time.Second); ; {
		b, _ := os.ReadFile("/proc/" + strconv.Itoa(zcmd.Process.Pid) + "/stat")
		if bytes.Contains(b, []byte(") Z")) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no zombie: %s", b)
		}
		time.Sleep(5 * time.Millisecond)
	}
	zombie := netlab.Prefix + strconv.Itoa(zcmd.Process.Pid) + "-1-z"
	for _, n := range []string{dead, live, zombie} {
		if out, err := exec.Command("ip", "netns", "add", n).CombinedOutput(); err != nil {
			t.Fatalf("ip netns add: %v: %s", err, out)
		}
	}
	t.Cleanup(func() {
		exec.Command("ip", "netns", "delete", dead).Run()
		exec.Command("ip", "netns", "delete", live).Run()
		exec.Command("ip", "netns", "delete", zombie).Run()
	})
	l := netlab.NewT(t) // removes stale labs first
	_ = l
	for _, n := range []string{dead, zombie} {
		if _, err := os.Stat("/run/netns/" + n); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("stale namespace %s not removed (%v)", n, err)
		}
	}
	if _, err := os.Stat("/run/netns/" + live); err != nil {
		t.Errorf("namespace of a live process removed: %v", err)
	}
}

// udpFlow sends n numbered datagrams from A to B without UDP checksums (so
// corrupted ones arrive) and returns the sequence numbers B received, in order
// of arrival, and how many arrived damaged.
func udpFlow(t *testing.T, topo *netlab.Topo, n, size int) (seqs []uint32, damaged int) {
	t.Helper()
	srv := listenUDP(t, topo.B.NS, netip.AddrPortFrom(topo.B.IPv4, 0))
	cli := listenUDP(t, topo.A.NS, netip.AddrPortFrom(topo.A.IPv4, 0))
	if rc, err := cli.SyscallConn(); err == nil {
		rc.Control(func(fd uintptr) { unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_NO_CHECK, 1) })
	}
	if rc, err := srv.SyscallConn(); err == nil {
		rc.Control(func(fd uintptr) { unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 32<<20) })
	}
	dst := srv.LocalAddr().(*net.UDPAddr).AddrPort()
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 65536)
		for {
			srv.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
			m, _, err := srv.ReadFromUDPAddrPort(buf)
			if err != nil {
				return
			}
			seq := binary.BigEndian.Uint32(buf)
			ok := m == size
			for j := 4; ok && j < size; j++ {
				ok = buf[j] == byte(int(seq)+j)
			}
			if !ok {
				damaged++
				continue
			}
			seqs = append(seqs, seq)
		}
	}()
	msg := make([]byte, size)
	for i := range n {
		binary.BigEndian.PutUint32(msg, uint32(i))
		for j := 4; j < size; j++ {
			msg[j] = byte(i + j)
		}
		if _, err := cli.WriteToUDPAddrPort(msg, dst); err != nil {
			t.Fatal(err)
		}
		if i%32 == 31 {
			time.Sleep(200 * time.Microsecond) // stay well inside the relay's queue
		}
	}
	<-done
	return seqs, damaged
}

func TestPrivilegedRelayClean(t *testing.T) {
	topo := netlab.Relayed(t, netlab.LinkConfig{MTU: 9000}, netlab.RelayConfig{Seed: 1})
	const n = 2000
	seqs, damaged := udpFlow(t, topo, n, 8000)
	if len(seqs) != n || damaged != 0 {
		t.Fatalf("clean relay delivered %d of %d datagrams, %d damaged; stats %+v", len(seqs), n, damaged, topo.Relay.Stats())
	}
	for i, s := range seqs {
		if s != uint32(i) {
			t.Fatalf("datagram %d has sequence %d: reordered by a clean relay", i, s)
		}
	}
	st := topo.Relay.Stats()
	if st.Forwarded < n || st.Lost+st.Reordered+st.Duplicated+st.Corrupted != 0 {
		t.Fatalf("stats %+v", st)
	}
	// The relay stops promptly and for good.
	start := time.Now()
	if err := topo.Relay.Close(); err != nil {
		t.Fatal(err)
	}
	if el := time.Since(start); el > 500*time.Millisecond {
		t.Errorf("relay Close took %v", el)
	}
	topo.Relay.Close()
	seqs, _ = udpFlow(t, topo, 10, 100)
	if len(seqs) != 0 {
		t.Errorf("%d datagrams crossed a closed relay", len(seqs))
	}
}

func TestPrivilegedRelayImpairs(t *testing.T) {
	rc := netlab.RelayConfig{
		Seed: 42, Loss: 0.05, Reorder: 0.05, Duplicate: 0.05, Corrupt: 0.05, Delay: time.Millisecond,
		// Impair only UDP (IPv4 protocol 17), so ARP and ND are spared.
		Filter: func(f []byte) bool { return len(f) > 23 && f[12] == 0x08 && f[13] == 0x00 && f[23] == 17 },
	}
	topo := netlab.Relayed(t, netlab.LinkConfig{}, rc)
	const n = 3000
	seqs, damaged := udpFlow(t, topo, n, 200)
	st := topo.Relay.Stats()
	t.Logf("received %d, damaged %d, stats %+v", len(seqs), damaged, st)
	// Every kind of fault happened, roughly as often as asked.
	for name, c := range map[string]uint64{"lost": st.Lost, "reordered": st.Reordered, "duplicated": st.Duplicated, "corrupted": st.Corrupted} {
		if c < n*2/100 || c > n*8/100 {
			t.Errorf("%s = %d, want about 5%% of %d", name, c, n)
		}
	}
	if st.Delayed < n-st.Lost {
		t.Errorf("delayed %d < %d", st.Delayed, n-st.Lost)
	}
	// What arrived is what the counters say: lost frames missing, duplicates
	// twice, corrupted ones damaged (a corrupted frame may also be duplicated).
	got := uint64(len(seqs) + damaged)
	want := n - st.Lost + st.Duplicated
	if got != want || uint64(damaged) < st.Corrupted || uint64(damaged) > 2*st.Corrupted {
		t.Errorf("B got %d datagrams (%d damaged); want %d (%d corrupted)", got, damaged, want, st.Corrupted)
	}
	inversions := 0
	for i := 1; i < len(seqs); i++ {
		if seqs[i] < seqs[i-1] {
			inversions++
		}
	}
	if inversions == 0 {
		t.Errorf("no reordering seen at B")
	}
	if st.Overflow+st.SendErrors != 0 {
		t.Errorf("overflow/send errors: %+v", st)
	}
}
