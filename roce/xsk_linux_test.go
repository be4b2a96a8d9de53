package roce_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/xdproce/xdproce/internal/netlab"
	"github.com/xdproce/xdproce/link/xsk"
	"github.com/xdproce/xdproce/roce"
	"github.com/xdproce/xdproce/roce/qp"
)

// openIn opens a device on the interface inside its namespace; it is closed
// when the test ends.
func openIn(t *testing.T, e *netlab.Iface, o roce.Options) *roce.Device {
	t.Helper()
	skipRace(t)
	var d *roce.Device
	if err := e.NS.Do(func() error {
		var err error
		d, err = roce.Open(e.Name, &o)
		return err
	}); err != nil {
		t.Fatalf("open %s in %s: %v", e.Name, e.NS.Short, err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// TestPrivilegedXSKOperations: every RC operation (and UD) between two
// namespaces over veth with AF_XDP on both ends, in native and generic XDP
// mode, at MTU 1500 (PMTU 1024) and 9000 (PMTU 4096); then the error paths.
func TestPrivilegedXSKOperations(t *testing.T) {
	netlab.Privileged(t)
	for _, mtu := range []int{1500, 9000} {
		for _, mode := range []string{"native", "generic"} {
			t.Run("mtu="+itoa(mtu)+"/"+mode, func(t *testing.T) {
				topo := netlab.Pair(t, netlab.LinkConfig{MTU: mtu})
				o := roce.Options{Link: roce.LinkXSK, XDPMode: mode}
				a := openIn(t, topo.A, o)
				b := openIn(t, topo.B, o)
				for _, d := range []*roce.Device{a, b} {
					if want := "AF_XDP (" + mode + ")"; d.LinkName() != want {
						t.Fatalf("link %q (%s), want %q", d.LinkName(), d.LinkReason(), want)
					}
				}
				if want := map[int]int{1500: 1024, 9000: 4096}[mtu]; a.PathMTU().Bytes() != want {
					t.Fatalf("path MTU %d, want %d", a.PathMTU().Bytes(), want)
				}
				p := &devPair{a: a, b: b}
				runOperations(t, p)
				runUD(t, p)
				sa, sb := a.Stats(), b.Stats()
				if sa.RxFrames == 0 || sb.RxFrames == 0 || sa.DropBadICRC+sb.DropBadICRC+sa.DropMalformed+sb.DropMalformed != 0 {
					t.Errorf("stats a %+v b %+v", sa, sb)
				}
			})
		}
	}
}

func TestPrivilegedXSKErrorPaths(t *testing.T) {
	netlab.Privileged(t)
	runErrorPaths(t, func(t *testing.T) *devPair {
		topo := netlab.Pair(t, netlab.LinkConfig{})
		o := roce.Options{Link: roce.LinkXSK}
		return &devPair{a: openIn(t, topo.A, o), b: openIn(t, topo.B, o)}
	})
}

// TestPrivilegedXSKMixedUDP: one end on AF_XDP, the other on kernel UDP
// sockets: the same wire format, so they interoperate.
func TestPrivilegedXSKMixedUDP(t *testing.T) {
	netlab.Privileged(t)
	topo := netlab.Pair(t, netlab.LinkConfig{})
	a := openIn(t, topo.A, roce.Options{Link: roce.LinkXSK})
	b := openIn(t, topo.B, roce.Options{Link: roce.LinkUDP})
	if !strings.HasPrefix(a.LinkName(), "AF_XDP") || b.LinkName() != "UDP" {
		t.Fatalf("links %q and %q", a.LinkName(), b.LinkName())
	}
	p := &devPair{a: a, b: b}
	runOperations(t, p)
	runUD(t, p)
	t.Logf("a %+v", a.Stats())
	t.Logf("b %+v", b.Stats())
}

// TestPrivilegedOpenAuto: as root on veth, LinkAuto picks UDP (GSO/GRO) and
// says why, as LinkFacts.Choose does on the probed facts, and so does a
// daemon's uplink (OpenUplink); the GID table follows rxe's order.
func TestPrivilegedOpenAuto(t *testing.T) {
	netlab.Privileged(t)
	topo := netlab.Pair(t, netlab.LinkConfig{})
	d := openIn(t, topo.A, roce.Options{})
	var f roce.LinkFacts
	if err := topo.A.NS.Do(func() (err error) { f, err = roce.ProbeLinkFacts(topo.A.Name); return err }); err != nil {
		t.Fatal(err)
	}
	kind, why := f.Choose()
	if d.LinkName() != "UDP" || kind != roce.LinkUDP || d.LinkReason() != why ||
		!strings.Contains(why, "virtual device veth") || !f.Privileged || f.ZeroCopy || !f.GSO || !f.Virtual || f.Kind != "veth" {
		t.Fatalf("auto chose %q (%s); the rule on %+v: %v (%s)", d.LinkName(), d.LinkReason(), f, kind, why)
	}
	t.Logf("link %s: %s", d.LinkName(), d.LinkReason())
	gids := d.GIDs()
	if len(gids) < 3 || gids[0] != roce.LinkLocalGID([6]byte(topo.A.HWAddr)) ||
		gids[1] != roce.GIDFromIP(topo.A.IPv4) {
		t.Fatalf("GID table %v (MAC %v, IPv4 %v)", gids, topo.A.HWAddr, topo.A.IPv4)
	}
	found := false
	for _, g := range gids[2:] {
		found = found || g == topo.A.IPv6
	}
	if !found {
		t.Errorf("GID table %v lacks %v", gids, topo.A.IPv6)
	}
	d.Close()

	// The daemon's uplink follows the same rule.
	if err := topo.A.NS.Do(func() error {
		up, err := roce.OpenUplink(topo.A.Name, t.TempDir()+"/d.sock", &roce.Options{})
		if err != nil {
			return err
		}
		defer up.Close()
		if up.Link.Props().Name != "UDP" || up.Reason != why {
			t.Errorf("uplink on %s: %s (%s), want UDP (%s)", topo.A.Name, up.Link.Props().Name, up.Reason, why)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// TestPrivilegedXSKRelay: through the impairment relay (2 % loss, 1 %
// reorder, 0.5 % duplicate, 0.1 % corrupt) the RC operation set and a mixed
// transfer complete byte-exact over AF_XDP; the relay's counters prove the
// faults happened.
func TestPrivilegedXSKRelay(t *testing.T) {
	netlab.Privileged(t)
	topo := netlab.Relayed(t, netlab.LinkConfig{}, netlab.RelayConfig{
		Seed: 7, Loss: 0.02, Reorder: 0.01, Duplicate: 0.005, Corrupt: 0.001,
	})
	o := roce.Options{Link: roce.LinkXSK}
	p := &devPair{a: openIn(t, topo.A, o), b: openIn(t, topo.B, o)}
	runOperations(t, p)
	total := int64(16 << 20)
	if testing.Short() {
		total = 4 << 20
	}
	runMixed(t, p, total, 2)
	rs := topo.Relay.Stats()
	t.Logf("relay %+v", rs)
	t.Logf("a %+v", p.a.Stats())
	t.Logf("b %+v", p.b.Stats())
	if rs.Lost == 0 || rs.Reordered == 0 || rs.Duplicated == 0 || rs.Corrupted == 0 {
		t.Errorf("the relay did not apply every fault: %+v", rs)
	}
	if p.a.Stats().Retransmits == 0 {
		t.Error("no retransmissions through a lossy relay")
	}
}

const openChildEnv = "XDPROCE_ROCE_OPEN_CHILD_IF"

// TestPrivilegedOpenAfterKill: a process holding an AF_XDP device is killed
// with SIGKILL; afterwards no XDP program is left on the interface and a new
// device opens on it at once and works.
func TestPrivilegedOpenAfterKill(t *testing.T) {
	netlab.Privileged(t)
	topo := netlab.Pair(t, netlab.LinkConfig{})
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := topo.A.NS.Command(ctx, exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), openChildEnv+"="+topo.A.Name)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "ready AF_XDP") {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("child: %q, %v; stderr: %s", line, err, stderr.String())
	}
	// The child is `ip netns exec` which exec'd the test binary: same pid.
	if !xdpAttached(t, topo.A) {
		t.Fatal("no XDP program on the interface while the child holds the device")
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	killed := time.Now()
	if xdpAttached(t, topo.A) {
		t.Fatal("an XDP program is still attached after the holder was killed")
	}
	a := openIn(t, topo.A, roce.Options{Link: roce.LinkXSK})
	t.Logf("reopened %s %v after the kill", a.LinkName(), time.Since(killed).Round(time.Millisecond))
	b := openIn(t, topo.B, roce.Options{Link: roce.LinkXSK})
	x, y := connectRC(t, &devPair{a: a, b: b}, connCfg{})
	fill(x.buf[:5000], 3)
	if err := x.qp.PostSend(roce.SendWR{ID: 1, Opcode: qp.WRRDMAWrite, Flags: qp.Signaled,
		SGL: []roce.SGE{x.sge(0, 5000)}, RemoteAddr: y.mr.Addr(), RKey: y.mr.RKey()}); err != nil {
		t.Fatal(err)
	}
	expectStatus(t, x.scq, 1, qp.WCSuccess)
	if !bytes.Equal(y.buf[:5000], x.buf[:5000]) {
		t.Fatal("data differs")
	}
}

// xdpAttached reports whether `ip link` shows an XDP program on e.
func xdpAttached(t *testing.T, e *netlab.Iface) bool {
	t.Helper()
	out, err := exec.Command("ip", "-n", e.NS.Name, "-d", "link", "show", "dev", e.Name).CombinedOutput()
	if err != nil {
		t.Fatalf("ip link show: %v: %s", err, out)
	}
	return strings.Contains(string(out), "prog/xdp")
}

// TestPrivilegedXSKMultiQueue: on veth with 4 queues the device opens a
// socket per queue behind one link; traffic from a kernel UDP peer spread
// over the queues (several QPs, so several source ports) all arrives.
func TestPrivilegedXSKMultiQueue(t *testing.T) {
	netlab.Privileged(t)
	topo := netlab.Pair(t, netlab.LinkConfig{Queues: 4})
	if err := topo.A.NS.Do(func() error {
		n, err := xsk.QueueCount(topo.A.Name)
		if err == nil && n != 4 {
			err = fmt.Errorf("%d rx queues, want 4", n)
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	a := openIn(t, topo.A, roce.Options{Link: roce.LinkXSK})
	b := openIn(t, topo.B, roce.Options{Link: roce.LinkUDP})
	p := &devPair{a: a, b: b}
	runOperations(t, p)
	total := int64(16 << 20)
	if testing.Short() {
		total = 4 << 20
	}
	runMixed(t, p, total, 8)
	// And the reverse roles: requests from the AF_XDP side.
	p2 := &devPair{a: b, b: a}
	runMixed(t, p2, total, 8)
	t.Logf("a %+v", a.Stats())
}

// TestPrivilegedXSKIPv6: the RC operation set between the IPv6 GIDs over
// AF_XDP (IPv6 frames, neighbour discovery, steering on IPv6 addresses), and
// between AF_XDP and a kernel UDP peer.
func TestPrivilegedXSKIPv6(t *testing.T) {
	netlab.Privileged(t)
	for _, kb := range []roce.LinkKind{roce.LinkXSK, roce.LinkUDP} {
		t.Run("peer="+kb.String(), func(t *testing.T) {
			// Our frames (like rxe's) carry UDP checksum 0, which IPv6
			// forbids: the UDP peer only sees them because link/udp sets
			// UDP_NO_CHECK6_RX.
			topo := netlab.Pair(t, netlab.LinkConfig{})
			p := &devPair{a: openIn(t, topo.A, roce.Options{Link: roce.LinkXSK}), b: openIn(t, topo.B, roce.Options{Link: kb})}
			runOperationsCfg(t, p, connCfg{ipv6: true})
			if st := p.b.Stats(); st.RxFrames == 0 || st.DropBadICRC != 0 {
				t.Errorf("peer stats %+v", st)
			}
		})
	}
}

// TestPrivilegedXSKDestroyIdle: destroying queue pairs on an idle AF_XDP
// device returns promptly. Device.sync used to ring the engine once and then
// wait for two rounds; when the round already running consumed the bell, an
// idle engine slept for good and Destroy never returned.
func TestPrivilegedXSKDestroyIdle(t *testing.T) {
	netlab.Privileged(t)
	topo := netlab.Pair(t, netlab.LinkConfig{MTU: 1500})
	o := roce.Options{Link: roce.LinkXSK}
	a := openIn(t, topo.A, o)
	b := openIn(t, topo.B, o)
	p := &devPair{a: a, b: b}
	for i := range 20 {
		x, y := connectRC(t, p, connCfg{})
		time.Sleep(time.Duration(i%3) * time.Millisecond) // let the engines go idle
		for _, s := range []*side{x, y} {
			done := make(chan error, 1)
			go func() { done <- s.qp.Destroy() }()
			select {
			case err := <-done:
				if err != nil {
					t.Fatalf("round %d: destroy: %v", i, err)
				}
			case <-time.After(5 * time.Second):
				t.Fatalf("round %d: QP.Destroy on an idle device did not return within 5s", i)
			}
		}
	}
}

// TestPrivilegedXSKRxCoalesce: the receiving device of a stream of WRITEs
// naps (Options.RxCoalesce) and the data lands intact; turned off, neither
// device naps.
func TestPrivilegedXSKRxCoalesce(t *testing.T) {
	netlab.Privileged(t)
	for _, c := range []struct {
		name     string
		coalesce time.Duration
	}{{"default", 0}, {"off", -1}} {
		t.Run(c.name, func(t *testing.T) {
			topo := netlab.Pair(t, netlab.LinkConfig{MTU: 1500})
			o := roce.Options{Link: roce.LinkXSK, RxCoalesce: c.coalesce}
			p := &devPair{a: openIn(t, topo.A, o), b: openIn(t, topo.B, o)}
			const size, msgs = 256 << 10, 32
			x, y := connectRC(t, p, connCfg{bufSize: 2 * size, cqDepth: 64, maxWR: 64})
			// Whether a round ends in a nap depends on how the two CPUs are
			// shared (a loaded machine gives full batches or expired timers,
			// which are no reason to nap): with coalescing on, stream up to
			// ten times (each about 8 MiB, well under a second) until the
			// receiver has napped. Three were not enough at load 9 (675
			// rounds, none ending in a partial batch that could nap).
			for attempt := 0; attempt < 10 && (attempt == 0 || c.coalesce == 0 && p.b.Stats().Naps == 0); attempt++ {
				streamWrites(t, x, y, size, msgs)
			}
			sa, sb := p.a.Stats(), p.b.Stats()
			t.Logf("receiver: %d frames, %d rounds, %d naps; sender: %d naps", sb.RxFrames, sb.Rounds, sb.Naps, sa.Naps)
			if c.coalesce < 0 && sa.Naps+sb.Naps != 0 {
				t.Errorf("receive coalescing off, yet %d + %d naps", sa.Naps, sb.Naps)
			}
			if c.coalesce == 0 && sb.Naps == 0 {
				t.Errorf("no naps while receiving %d frames in %d rounds", sb.RxFrames, sb.Rounds)
			}
		})
	}
}

// streamWrites posts msgs signaled WRITEs of size bytes from x into the
// second half of y's buffer, one at a time, checking each lands.
func streamWrites(t *testing.T, x, y *side, size, msgs int) {
	t.Helper()
	for i := range msgs {
		fill(x.buf[:size], byte(i))
		if err := x.qp.PostSend(roce.SendWR{ID: uint64(i), Opcode: qp.WRRDMAWrite, Flags: qp.Signaled,
			SGL: []roce.SGE{x.sge(0, size)}, RemoteAddr: y.mr.Addr() + uint64(size), RKey: y.mr.RKey()}); err != nil {
			t.Fatal(err)
		}
		if wc := waitWC(t, x.scq); wc.Status != qp.WCSuccess {
			t.Fatalf("WRITE %d: %+v", i, wc)
		}
		if !bytes.Equal(y.buf[size:], x.buf[:size]) {
			t.Fatalf("WRITE %d: data differs", i)
		}
	}
}
