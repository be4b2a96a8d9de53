package xsk_test

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/xdproce/xdproce/bpf"
	"github.com/xdproce/xdproce/internal/netlab"
	"github.com/xdproce/xdproce/link"
	"github.com/xdproce/xdproce/link/xsk"
)

// kernelFDs lists the open descriptors that are sockets or anonymous inodes
// (BPF programs, maps and links, eventfds): what this package and its tests
// create. Files the runtime opens lazily (cgroup limits, /dev/null) are not
// counted.
func kernelFDs() map[string]string {
	m := make(map[string]string)
	ents, _ := os.ReadDir("/proc/self/fd")
	for _, e := range ents {
		l, err := os.Readlink("/proc/self/fd/" + e.Name())
		if err == nil && (strings.HasPrefix(l, "socket:") || strings.HasPrefix(l, "anon_inode:")) {
			m[e.Name()] = l
		}
	}
	return m
}

// TestMain fails the run when the tests leak sockets, BPF objects or
// eventfds.
func TestMain(m *testing.M) {
	// Start the runtime's network poller (its epoll and wake-up fds stay
	// open for good) before taking stock.
	if r, w, err := os.Pipe(); err == nil {
		r.Close()
		w.Close()
	}
	before := kernelFDs()
	code := m.Run()
	if code == 0 {
		var leaked []string
		for range 50 {
			leaked = leaked[:0]
			for fd, l := range kernelFDs() {
				if before[fd] != l {
					leaked = append(leaked, fd+" -> "+l)
				}
			}
			if len(leaked) == 0 {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		if len(leaked) > 0 {
			fmt.Fprintf(os.Stderr, "leaked file descriptors: %v\n", leaked)
			code = 1
		}
	}
	os.Exit(code)
}

// PMTU 4096 RoCE frame: Ethernet 14 + IPv4 20 + UDP 8 + BTH 12 + 4096 + ICRC 4.
const pmtu4096Frame = 14 + 20 + 8 + 12 + 4096 + 4

func TestPrivilegedExchange(t *testing.T) {
	netlab.Privileged(t)
	for _, mtu := range []int{1500, 9000} {
		for _, mode := range []bpf.Mode{bpf.ModeNative, bpf.ModeGeneric} {
			t.Run(fmt.Sprintf("%d/%v", mtu, mode), func(t *testing.T) {
				topo := netlab.Pair(t, netlab.LinkConfig{MTU: mtu})
				a := openEnd(t, topo.A, mode, nil)
				b := openEnd(t, topo.B, mode, nil)
				if a.Prog.Mode() != mode {
					t.Fatalf("attached in %v mode, want %v", a.Prog.Mode(), mode)
				}
				sizes := []int{60, 1024 + 58, mtu + 14}
				if mtu == 9000 {
					sizes = append(sizes, pmtu4096Frame)
				}
				const count = 2000
				for _, n := range sizes {
					exchange(t, a, b, count, n)
					exchange(t, b, a, count, n)
				}
				for _, e := range []*end{a, b} {
					c, err := e.Prog.Counters()
					if err != nil {
						t.Fatal(err)
					}
					if got := c[bpf.Redirected].Packets; got != uint64(count*len(sizes)) {
						t.Errorf("%s: %d frames redirected, want %d (counters %v)", e.If.Name, got, count*len(sizes), c)
					}
					st, err := e.Sock.Stats()
					if err != nil {
						t.Fatal(err)
					}
					if st.Rx_dropped+st.Rx_invalid_descs+st.Tx_invalid_descs+st.Rx_ring_full+st.RxTooLong != 0 {
						t.Errorf("%s: socket stats %+v", e.If.Name, st)
					}
				}
			})
		}
	}
}

// While the program is attached, the kernel keeps the rest of the traffic:
// ping, TCP and a non-RoCE UDP flow work, and a kernel socket on UDP 4791
// gets none of the RoCE frames the program steers away.
func TestPrivilegedKernelTraffic(t *testing.T) {
	topo := netlab.Pair(t, netlab.LinkConfig{MTU: 1500})
	a := openEnd(t, topo.A, bpf.ModeAuto, nil)
	b := openEnd(t, topo.B, bpf.ModeAuto, nil)
	before, err := b.Prog.Counters()
	if err != nil {
		t.Fatal(err)
	}

	// A kernel UDP socket on B's RoCE port.
	var roceSock *net.UDPConn
	if err := topo.B.NS.Do(func() (err error) {
		roceSock, err = net.ListenUDP("udp4", &net.UDPAddr{IP: topo.B.IPv4.AsSlice(), Port: 4791})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer roceSock.Close()

	// RoCE frames A→B through AF_XDP.
	const roce = 500
	exchange(t, a, b, roce, 300)

	// ping A→B (ICMP echo over a raw socket), IPv4 and IPv6.
	for _, v := range []struct {
		network string
		dst     netip.Addr
		req     byte
		rep     byte
	}{{"ip4:icmp", topo.B.IPv4, 8, 0}, {"ip6:ipv6-icmp", topo.B.IPv6, 128, 129}} {
		var c net.PacketConn
		if err := topo.A.NS.Do(func() (err error) {
			c, err = net.ListenPacket(v.network, "")
			return err
		}); err != nil {
			t.Fatal(err)
		}
		for seq := range 5 {
			msg := []byte{v.req, 0, 0, 0, 0x12, 0x34, 0, byte(seq), 'p', 'i', 'n', 'g'}
			if v.req == 8 {
				binary.BigEndian.PutUint16(msg[2:], inetChecksum(msg))
			}
			if _, err := c.WriteTo(msg, &net.IPAddr{IP: v.dst.AsSlice()}); err != nil {
				t.Fatal(err)
			}
			c.SetReadDeadline(time.Now().Add(3 * time.Second))
			buf := make([]byte, 1500)
			for {
				n, _, err := c.ReadFrom(buf)
				if err != nil {
					t.Fatalf("ping %v seq %d: %v", v.dst, seq, err)
				}
				if n >= 12 && buf[0] == v.rep && buf[7] == byte(seq) && string(buf[8:12]) == "ping" {
					break
				}
			}
		}
		c.Close()
	}

	// TCP A→B: 1 MiB echoed.
	var ln net.Listener
	if err := topo.B.NS.Do(func() (err error) {
		ln, err = net.Listen("tcp", netip.AddrPortFrom(topo.B.IPv4, 0).String())
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		io.Copy(c, c)
	}()
	var tc net.Conn
	if err := topo.A.NS.Do(func() (err error) {
		tc, err = net.DialTimeout("tcp", ln.Addr().String(), 5*time.Second)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	payload := bytes.Repeat([]byte("rdma"), 1<<18)
	tc.SetDeadline(time.Now().Add(10 * time.Second))
	go func() { tc.Write(payload); tc.(*net.TCPConn).CloseWrite() }()
	got, err := io.ReadAll(tc)
	tc.Close()
	if err != nil || !bytes.Equal(got, payload) {
		t.Fatalf("TCP echo: %d of %d bytes, %v", len(got), len(payload), err)
	}

	// Non-RoCE UDP A→B (port 4792).
	var us, uc *net.UDPConn
	if err := topo.B.NS.Do(func() (err error) {
		us, err = net.ListenUDP("udp4", &net.UDPAddr{IP: topo.B.IPv4.AsSlice(), Port: 4792})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer us.Close()
	if err := topo.A.NS.Do(func() (err error) {
		uc, err = net.DialUDP("udp4", nil, &net.UDPAddr{IP: topo.B.IPv4.AsSlice(), Port: 4792})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer uc.Close()
	const udps = 200
	rcvd := 0
	buf := make([]byte, 2000)
	for i := range udps {
		uc.Write([]byte("datagram " + strconv.Itoa(i)))
		us.SetReadDeadline(time.Now().Add(2 * time.Second))
		n, err := us.Read(buf)
		if err != nil {
			t.Fatalf("UDP datagram %d: %v", i, err)
		}
		if string(buf[:n]) == "datagram "+strconv.Itoa(i) {
			rcvd++
		}
	}
	if rcvd != udps {
		t.Errorf("UDP: %d of %d datagrams intact", rcvd, udps)
	}

	// The kernel's 4791 socket saw nothing: every RoCE frame went to AF_XDP.
	roceSock.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	if n, _, err := roceSock.ReadFrom(buf); err == nil {
		t.Errorf("kernel UDP socket on 4791 received a %d-byte datagram", n)
	}

	after, err := b.Prog.Counters()
	if err != nil {
		t.Fatal(err)
	}
	d := func(v bpf.Verdict) uint64 { return after[v].Packets - before[v].Packets }
	t.Logf("B's counters: redirected %d, not-roce %d, not-ip %d, not-local %d, no-socket %d",
		d(bpf.Redirected), d(bpf.NotRoCE), d(bpf.NotIP), d(bpf.NotLocal), d(bpf.NoSocket))
	if d(bpf.Redirected) != roce {
		t.Errorf("redirected %d, want exactly the %d RoCE frames", d(bpf.Redirected), roce)
	}
	// 10 echo requests, ≥ 256 KiB/1448 TCP segments, 200 datagrams at least.
	if min := uint64(10 + 200 + (1<<20)/9000); d(bpf.NotRoCE) < min {
		t.Errorf("passed as not-RoCE: %d, want ≥ %d", d(bpf.NotRoCE), min)
	}
	if d(bpf.NoSocket)+d(bpf.NotLocal)+d(bpf.Truncated)+d(bpf.Fragment) != 0 {
		t.Errorf("unexpected verdicts: %v", after)
	}
}

func inetChecksum(b []byte) uint16 {
	var s uint32
	for i := 0; i+1 < len(b); i += 2 {
		s += uint32(binary.BigEndian.Uint16(b[i:]))
	}
	if len(b)%2 == 1 {
		s += uint32(b[len(b)-1]) << 8
	}
	for s>>16 != 0 {
		s = s&0xffff + s>>16
	}
	return ^uint16(s)
}

func xdpAttached(t *testing.T, e *netlab.Iface) uint32 {
	t.Helper()
	var id uint32
	if err := e.NS.Do(func() error {
		l, err := netlink.LinkByName(e.Name)
		if err != nil {
			return err
		}
		if x := l.Attrs().Xdp; x != nil && x.Attached {
			id = x.ProgId
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return id
}

// A process holding sockets and the program is killed with SIGKILL: the
// program leaves the interface and a new socket binds to the queue at once.
func TestPrivilegedSIGKILL(t *testing.T) {
	topo := netlab.Pair(t, netlab.LinkConfig{MTU: 1500})
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperHoldDevice$")
	cmd.Env = append(os.Environ(), "XDPROCE_HELPER_NS="+topo.B.NS.Name, "XDPROCE_HELPER_IF="+topo.B.Name,
		"XDPROCE_HELPER_IP="+topo.B.IPv4.String())
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	ready := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if s, ok := strings.CutPrefix(sc.Text(), "HOLDING "); ok {
				ready <- s
			}
		}
		close(ready)
	}()
	select {
	case s, ok := <-ready:
		if !ok {
			t.Fatal("helper exited before opening the device")
		}
		t.Logf("child holds the device: %s", s)
	case <-time.After(20 * time.Second):
		t.Fatal("helper not ready within 20s")
	}
	if xdpAttached(t, topo.B) == 0 {
		t.Fatal("no XDP program while the child holds the device")
	}
	cmd.Process.Signal(os.Kill)
	cmd.Wait()
	deadline := time.Now().Add(5 * time.Second)
	for xdpAttached(t, topo.B) != 0 {
		if time.Now().After(deadline) {
			t.Fatal("XDP program still attached 5s after SIGKILL")
		}
		time.Sleep(10 * time.Millisecond)
	}
	// A new device opens on the same queue at once and carries frames.
	start := time.Now()
	b := openEnd(t, topo.B, bpf.ModeAuto, nil)
	t.Logf("reopened in %v", time.Since(start))
	if el := time.Since(start); el > 2*time.Second {
		t.Errorf("reopening took %v", el)
	}
	a := openEnd(t, topo.A, bpf.ModeAuto, nil)
	exchange(t, a, b, 100, 500)
}

// TestHelperHoldDevice is the child of TestPrivilegedSIGKILL.
func TestHelperHoldDevice(t *testing.T) {
	nsName := os.Getenv("XDPROCE_HELPER_NS")
	if nsName == "" {
		t.Skip("helper process for TestPrivilegedSIGKILL")
	}
	ifName := os.Getenv("XDPROCE_HELPER_IF")
	ip := netip.MustParseAddr(os.Getenv("XDPROCE_HELPER_IP"))
	ns := &netlab.NS{Name: nsName}
	var dev *xsk.Device
	var prog *bpf.Program
	err := ns.Do(func() (err error) {
		if dev, err = xsk.Open(ifName, nil); err != nil {
			return err
		}
		prog, err = bpf.Attach(ifName, []netip.Addr{ip}, dev.FDs(), nil)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	fmt.Printf("HOLDING pid %d, %d sockets, %v mode\n", os.Getpid(), len(dev.Sockets), prog.Mode())
	time.Sleep(60 * time.Second)
	t.Fatal("not killed")
}

func TestPrivilegedProbes(t *testing.T) {
	topo := netlab.Pair(t, netlab.LinkConfig{MTU: 1500})
	err := topo.A.NS.Do(func() error {
		if err := xsk.ProbeZeroCopy(topo.A.Name); !errors.Is(err, link.ErrNotSupported) {
			t.Errorf("ProbeZeroCopy(veth) = %v, want ErrNotSupported (veth is copy mode only)", err)
		}
		// need_wakeup since Linux 5.4, copy-mode multi-buffer since 6.6: a
		// kernel that new must support them; an older one may say
		// ErrNotSupported but nothing inconclusive.
		for _, p := range []struct {
			name         string
			probe        func(string) error
			major, minor int
		}{{"need_wakeup", xsk.ProbeNeedWakeup, 5, 4}, {"multi-buffer", xsk.ProbeMultiBuffer, 6, 6}} {
			err := p.probe(topo.A.Name)
			if kernelAtLeast(t, p.major, p.minor) && err != nil {
				t.Errorf("probe %s on a kernel ≥ %d.%d: %v", p.name, p.major, p.minor, err)
			} else if err != nil && !errors.Is(err, link.ErrNotSupported) {
				t.Errorf("probe %s: %v", p.name, err)
			}
		}
		if err := xsk.ProbeNeedWakeup("xdproce-none"); err == nil || errors.Is(err, link.ErrNotSupported) {
			t.Errorf("probe of a missing interface = %v, want an inconclusive error", err)
		}
		// Forcing zero-copy on Open fails the same way.
		if _, err := xsk.OpenQueue(topo.A.Name, 0, &xsk.Config{Bind: xsk.BindZeroCopy}); !errors.Is(err, link.ErrNotSupported) {
			t.Errorf("OpenQueue(zero-copy) = %v, want ErrNotSupported", err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestPrivilegedOpenErrors(t *testing.T) {
	topo := netlab.Pair(t, netlab.LinkConfig{MTU: 1500, Queues: 2})
	err := topo.A.NS.Do(func() error {
		for _, c := range []struct {
			name string
			q    int
			cfg  *xsk.Config
		}{
			{"chunk 1000", 0, &xsk.Config{ChunkSize: 1000}},
			{"chunk 8192", 0, &xsk.Config{ChunkSize: 8192}},
			{"negative queue", -1, nil},
			{"queue 7 of 2", 7, nil},
		} {
			s, err := xsk.OpenQueue(topo.A.Name, c.q, c.cfg)
			if err == nil {
				s.Close()
				t.Errorf("%s: OpenQueue succeeded", c.name)
			} else {
				t.Logf("%s: %v", c.name, err)
			}
		}
		if _, err := xsk.Open("xdproce-none", nil); err == nil {
			t.Error("Open of a missing interface succeeded")
		}
		// Two queues: Open gives two sockets, FDs has both.
		n, err := xsk.QueueCount(topo.A.Name)
		if err != nil || n != 2 {
			t.Errorf("QueueCount = %d, %v; want 2", n, err)
		}
		d, err := xsk.Open(topo.A.Name, nil)
		if err != nil {
			return err
		}
		defer d.Close()
		fds := d.FDs()
		if len(d.Sockets) != 2 || len(fds) != 2 || fds[0] != d.Sockets[0].FD() || fds[1] != d.Sockets[1].FD() || d.Sockets[1].Queue() != 1 {
			t.Errorf("Open on two queues: %d sockets, FDs %v", len(d.Sockets), fds)
		}
		// The queue is taken: a second socket on it fails (after the EBUSY retries).
		if s, err := xsk.OpenQueue(topo.A.Name, 0, nil); err == nil {
			s.Close()
			t.Error("second socket on a busy queue succeeded")
		} else if !errors.Is(err, unix.EBUSY) {
			t.Errorf("second socket on a busy queue: %v, want EBUSY", err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// kernelAtLeast reports whether the running kernel is at least major.minor.
func kernelAtLeast(t *testing.T, major, minor int) bool {
	t.Helper()
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		t.Fatal(err)
	}
	rel := unix.ByteSliceToString(u.Release[:])
	var ma, mi int
	if _, err := fmt.Sscanf(rel, "%d.%d", &ma, &mi); err != nil {
		t.Fatalf("kernel release %q: %v", rel, err)
	}
	return ma > major || ma == major && mi >= minor
}

// The per-frame path allocates nothing, with multi-buffer frames too (PMTU
// 4096 at MTU 9000: two descriptors on TX, joined in place on RX), and the
// kernel features the package documents are in use on kernels that have them.
// The received frames are the ones sent, and joined in place (their chunks
// follow each other as the fill ring hands them out).
func TestPrivilegedNoAllocsMultiBuffer(t *testing.T) {
	topo := netlab.Pair(t, netlab.LinkConfig{MTU: 9000})
	a := openEnd(t, topo.A, bpf.ModeAuto, nil)
	b := openEnd(t, topo.B, bpf.ModeAuto, nil)
	if !a.Sock.MultiBuffer() {
		t.Fatal("no multi-buffer at MTU 9000")
	}
	if kernelAtLeast(t, 6, 17) && !a.Sock.TxBudgetRaised() {
		t.Error("XDP_MAX_TX_SKB_BUDGET not raised on a 6.17+ kernel")
	}
	if p := a.Sock.Props(); p.MaxFrame < 9018 || p.MTU != 9000 {
		t.Errorf("Props %+v", p)
	}
	bufs := make([][]byte, 4)
	rx := make([][]byte, 8)
	tmpl := putRoCE(make([]byte, pmtu4096Frame), topo.A, topo.B, 1, pmtu4096Frame)
	fails := 0
	round := func() {
		if a.Sock.Alloc(bufs[:2]) != 2 {
			fails++
			return
		}
		bufs[0] = bufs[0][:copy(bufs[0], tmpl)]
		bufs[1] = bufs[1][:copy(bufs[1], tmpl[:60])]
		if a.Sock.Send(bufs[:2]) != nil {
			fails++
			return
		}
		got := 0
		for range 1000 {
			n, err := b.Sock.Receive(rx)
			if err != nil {
				fails++
				return
			}
			for _, f := range rx[:n] {
				if len(f) == pmtu4096Frame && !bytes.Equal(f, tmpl) {
					fails++
				}
			}
			got += n
			if got >= 2 {
				break
			}
			b.Sock.Wait(10 * time.Millisecond)
		}
		if got != 2 {
			fails++
		}
	}
	for range 10 {
		round()
	}
	if allocs := testing.AllocsPerRun(200, round); allocs != 0 {
		t.Errorf("%v allocations per round of two frames, want 0", allocs)
	}
	if fails != 0 {
		t.Errorf("%d rounds lost or changed frames", fails)
	}
	st, err := b.Sock.Stats()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("multi-buffer frames joined in place %d, copied %d", st.RxJoined, st.RxCopied)
	if st.RxJoined == 0 {
		t.Error("no multi-buffer frame was joined in place")
	}
}
