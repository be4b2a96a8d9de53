package reliability

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/xdproce/xdproce/internal/netlab"
	"github.com/xdproce/xdproce/roce"
	"github.com/xdproce/xdproce/roce/qp"
)

const (
	deathQPs      = 4
	deathTimeout  = 14 // local ACK timeout exponent: 4.096 µs × 2^14 ≈ 67 ms
	deathRetryCnt = 3
)

// peerChild is the peer process: it opens ifname over AF_XDP, makes
// deathQPs RC queue pairs with a 1 MiB writable region each, prints
// "EP <gid> <qpn> <psn> <addr> <rkey>" lines and "READY", reads the
// survivor's "<gid> <qpn> <psn>" lines, connects, prints "CONNECTED" and
// waits to be killed.
func peerChild(ifname string) int {
	fail := func(err error) int {
		fmt.Fprintln(os.Stderr, "peer:", err)
		return 1
	}
	d, err := roce.Open(ifname, &roce.Options{Link: roce.LinkXSK})
	if err != nil {
		return fail(err)
	}
	gid, err := d.GID(1)
	if err != nil {
		return fail(err)
	}
	pd := d.AllocPD()
	cq, _ := d.CreateCQ(64)
	var qps []*roce.QP
	for i := range deathQPs {
		q, err := pd.CreateQP(roce.QPConfig{Type: roce.RC, SendCQ: cq, RecvCQ: cq})
		if err != nil {
			return fail(err)
		}
		m, err := pd.RegMR(make([]byte, 1<<20), roce.LocalWrite|roce.RemoteWrite)
		if err != nil {
			return fail(err)
		}
		qps = append(qps, q)
		fmt.Printf("EP %v %d %d %d %d\n", gid, q.QPN(), 0x1000+i, m.Addr(), m.RKey())
	}
	fmt.Println("READY")
	in := bufio.NewScanner(os.Stdin)
	o := deathConnectOptions()
	for _, q := range qps {
		if !in.Scan() {
			return fail(fmt.Errorf("survivor's endpoint: %v", in.Err()))
		}
		var g string
		var qpn, psn uint32
		if _, err := fmt.Sscan(in.Text(), &g, &qpn, &psn); err != nil {
			return fail(err)
		}
		ep := roce.Endpoint{QPN: qpn, PSN: psn, GID: netip.MustParseAddr(g)}
		if err := q.Connect(uint32(0x1000+len(qps)), ep, &o); err != nil {
			return fail(err)
		}
	}
	fmt.Println("CONNECTED")
	for in.Scan() { // until killed, or the survivor closes stdin
	}
	d.Close()
	return 0
}

func deathConnectOptions() roce.ConnectOptions {
	o := roce.DefaultConnectOptions()
	o.Timeout, o.RetryCnt = deathTimeout, deathRetryCnt
	return o
}

// procCounts is what a process holds: goroutines, open fds, memory mappings.
type procCounts struct {
	goroutines int
	fds        map[string]string // fd → what it refers to
	maps       map[string]bool
}

func countProc(t *testing.T) procCounts {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]bool{}
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		m[l] = true
	}
	fds := map[string]string{}
	for _, e := range ents {
		target, _ := os.Readlink("/proc/self/fd/" + e.Name())
		fds[e.Name()] = target
	}
	return procCounts{goroutines: runtime.NumGoroutine(), fds: fds, maps: m}
}

// xdpAttached reports whether the interface has an XDP program.
func xdpAttached(t *testing.T, e *netlab.Iface) bool {
	t.Helper()
	var on bool
	if err := e.NS.Do(func() error {
		l, err := netlink.LinkByName(e.Name)
		if err != nil {
			return err
		}
		on = l.Attrs().Xdp != nil && l.Attrs().Xdp.Attached
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return on
}

// TestPrivilegedPeerDeath: the peer process (this test binary re-executed in
// namespace B) is killed with SIGKILL while the survivor in A RDMA-WRITEs to
// it on 4 queue pairs over AF_XDP. On every queue pair the oldest WR
// completes with RETRY_EXC_ERR within (retry_cnt + 1) × timeout of the kill
// (and not before retry_cnt timeouts), the rest flush with WR_FLUSH_ERR, and
// the queue pair is in ERROR. Closing the survivor's device returns its
// goroutines, file descriptors and memory mappings (UMEM, rings) and removes
// its XDP program; the kernel removed the dead peer's too.
func TestPrivilegedPeerDeath(t *testing.T) {
	netlab.Privileged(t)
	topo := netlab.Pair(t, netlab.LinkConfig{})
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := topo.B.NS.Command(ctx, exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+topo.B.Name)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })

	runtime.GC()
	before := countProc(t)
	if xdpAttached(t, topo.A) {
		t.Fatal("A has an XDP program before the test")
	}
	var d *roce.Device
	if err := topo.A.NS.Do(func() error {
		var err error
		d, err = roce.Open(topo.A.Name, &roce.Options{Link: roce.LinkXSK})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	closed := false
	defer func() {
		if !closed {
			d.Close()
		}
	}()
	opened := countProc(t)
	if !xdpAttached(t, topo.A) {
		t.Fatal("no XDP program on A after Open")
	}

	// Exchange endpoints with the peer.
	out := bufio.NewScanner(stdout)
	type remote struct {
		gid        netip.Addr
		qpn, psn   uint32
		addr, rkey uint64
	}
	var rem []remote
	for out.Scan() && out.Text() != "READY" {
		var r remote
		var g string
		if _, err := fmt.Sscanf(out.Text(), "EP %s %d %d %d %d", &g, &r.qpn, &r.psn, &r.addr, &r.rkey); err != nil {
			t.Fatalf("peer said %q: %v", out.Text(), err)
		}
		r.gid = netip.MustParseAddr(g)
		rem = append(rem, r)
	}
	if len(rem) != deathQPs {
		t.Fatalf("peer gave %d endpoints (stderr: %s)", len(rem), stderr.String())
	}
	pd := d.AllocPD()
	gid, _ := d.GID(1)
	buf := make([]byte, 64<<10)
	m, err := pd.RegMR(buf, roce.LocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	o := deathConnectOptions()
	type conn struct {
		q  *roce.QP
		cq *roce.CQ
	}
	var conns []conn
	for i, r := range rem {
		cq, _ := d.CreateCQ(256)
		q, err := pd.CreateQP(roce.QPConfig{Type: roce.RC, SendCQ: cq, RecvCQ: cq, MaxSendWR: 64})
		if err != nil {
			t.Fatal(err)
		}
		if err := q.Connect(uint32(0x2000+i), roce.Endpoint{QPN: r.qpn, PSN: r.psn, GID: r.gid}, &o); err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(stdin, "%v %d %d\n", gid, q.QPN(), 0x2000+i)
		conns = append(conns, conn{q, cq})
	}
	if !out.Scan() || out.Text() != "CONNECTED" {
		t.Fatalf("peer did not connect (stderr: %s)", stderr.String())
	}

	// Traffic: keep 16 WRITEs of 16 KiB outstanding per queue pair; after
	// 300 ms of completions, kill the peer.
	const depth = 16
	post := func(c conn, r remote, id uint64) {
		if err := c.q.PostSend(roce.SendWR{ID: id, Opcode: qp.WRRDMAWrite, Flags: qp.Signaled,
			SGL: sgeOf(m, 0, 16<<10), RemoteAddr: r.addr + (id%64)*(16<<10), RKey: uint32(r.rkey)}); err != nil {
			t.Fatal(err)
		}
	}
	next := make([]uint64, len(conns))
	for i, c := range conns {
		for range depth {
			post(c, rem[i], next[i])
			next[i]++
		}
	}
	var wcs [64]roce.WC
	ok := 0
	for start := time.Now(); time.Since(start) < 300*time.Millisecond; {
		for i, c := range conns {
			n, err := c.cq.Poll(wcs[:])
			if err != nil {
				t.Fatal(err)
			}
			for _, wc := range wcs[:n] {
				if wc.Status != qp.WCSuccess {
					t.Fatalf("before the kill: %+v", wc)
				}
				ok++
				post(c, rem[i], next[i])
				next[i]++
			}
		}
		time.Sleep(time.Millisecond)
	}
	if ok == 0 {
		t.Fatal("no WRITE completed before the kill")
	}
	killed := time.Now()
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()

	// Every queue pair keeps posting after the kill (16 WRITEs outstanding)
	// until a WR fails: exactly one RETRY_EXC_ERR, then WR_FLUSH_ERR for the
	// rest.
	tmo := time.Duration(4096<<deathTimeout) * time.Nanosecond
	bound := time.Duration(deathRetryCnt+1)*tmo + 250*time.Millisecond
	type result struct {
		succ, flushed, outstanding int
		retryAt                    time.Duration
	}
	res := make([]result, len(conns))
	for i := range res {
		res[i].outstanding = depth
	}
	for deadline := time.Now().Add(10 * time.Second); ; {
		busy := false
		for i, c := range conns {
			r := &res[i]
			if r.outstanding == 0 {
				continue
			}
			busy = true
			n, err := c.cq.Poll(wcs[:])
			if err != nil {
				t.Fatal(err)
			}
			for _, wc := range wcs[:n] {
				r.outstanding--
				switch wc.Status {
				case qp.WCSuccess:
					if r.retryAt != 0 {
						t.Errorf("queue pair %d: success after RETRY_EXC_ERR", i)
					}
					r.succ++
					post(c, rem[i], next[i]) // keep the traffic going
					next[i]++
					r.outstanding++
				case qp.WCRetryExcErr:
					if r.retryAt != 0 {
						t.Errorf("queue pair %d: two RETRY_EXC_ERR completions", i)
					}
					r.retryAt = time.Since(killed)
				case qp.WCWRFlushErr:
					if r.retryAt == 0 {
						t.Errorf("queue pair %d: WR_FLUSH_ERR before RETRY_EXC_ERR", i)
					}
					r.flushed++
				default:
					t.Errorf("queue pair %d: unexpected %+v", i, wc)
				}
			}
		}
		if !busy {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("WRs still outstanding 10 s after the kill: %+v", res)
		}
		time.Sleep(time.Millisecond)
	}
	for i, c := range conns {
		r := res[i]
		t.Logf("queue pair %d: after the kill %d WRITEs succeeded, RETRY_EXC_ERR after %v, %d flushed (bound %v)",
			i, r.succ, r.retryAt.Round(time.Millisecond), r.flushed, bound)
		if r.retryAt == 0 {
			t.Errorf("queue pair %d: no RETRY_EXC_ERR", i)
		} else if r.retryAt > bound || r.retryAt < time.Duration(deathRetryCnt)*tmo {
			t.Errorf("queue pair %d: RETRY_EXC_ERR after %v, want between %v and %v", i, r.retryAt, time.Duration(deathRetryCnt)*tmo, bound)
		}
		if st := c.q.State(); st != qp.Error {
			t.Errorf("queue pair %d in %v, want ERROR", i, st)
		}
		// A WR posted now flushes at once (or is refused).
		perr := c.q.PostSend(roce.SendWR{ID: 999, Opcode: qp.WRRDMAWrite, Flags: qp.Signaled, SGL: sgeOf(m, 0, 8),
			RemoteAddr: rem[i].addr, RKey: uint32(rem[i].rkey)})
		if perr == nil {
			if wc := wait1(t, c.cq, 2*time.Second); wc.Status != qp.WCWRFlushErr {
				t.Errorf("queue pair %d: WR posted in ERROR completed with %v", i, wc.Status)
			}
		} else {
			t.Logf("queue pair %d: post in ERROR: %v", i, perr)
		}
	}
	st := d.Stats()
	t.Logf("survivor: %+v", st)
	if xdpAttached(t, topo.B) {
		t.Error("the dead peer's XDP program is still on B")
	}

	if err := d.Close(); err != nil {
		t.Errorf("close: %v", err)
	}
	closed = true
	if xdpAttached(t, topo.A) {
		t.Error("XDP program still on A after Close")
	}
	waitGoroutines(t, before.goroutines)
	after := countProc(t)
	var added, left []string
	for l := range opened.maps {
		if !before.maps[l] {
			added = append(added, l)
			if after.maps[l] {
				left = append(left, l)
			}
		}
	}
	var newFDs []string
	for fd, target := range after.fds {
		if before.fds[fd] != target && !strings.Contains(target, "/proc/") {
			newFDs = append(newFDs, fd+" → "+target)
		}
	}
	t.Logf("open: %d goroutines, %d fds, %d new mappings; closed: %d goroutines (%d before), %d fds (%d before; the peer's pipes closed since)",
		opened.goroutines, len(opened.fds), len(added), after.goroutines, before.goroutines, len(after.fds), len(before.fds))
	if len(newFDs) > 0 {
		t.Errorf("fds left after Close: %v", newFDs)
	}
	// The rings (shared mappings of the AF_XDP sockets) and the UMEM (16 MiB
	// of anonymous memory) must be unmapped; smaller anonymous mappings
	// (thread stacks, allocator arenas) belong to the runtime.
	for _, l := range left {
		f := strings.Fields(l)
		var lo, hi uint64
		fmt.Sscanf(f[0], "%x-%x", &lo, &hi)
		if strings.Contains(l, "socket:") || f[1] == "rw-s" || (f[1] == "rw-p" && hi-lo >= 16<<20) {
			t.Errorf("mapping left after Close: %s", l)
		}
	}
	t.Logf("mappings added by Open: %q; left after Close: %q", added, left)
}
