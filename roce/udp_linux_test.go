package roce_test

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/xdproce/xdproce/link/udp"
	"github.com/xdproce/xdproce/roce"
	"github.com/xdproce/xdproce/roce/qp"
)

var (
	loA = netip.MustParseAddr("127.0.0.1")
	loB = netip.MustParseAddr("127.0.0.2")
	loC = netip.MustParseAddr("127.0.0.3")
)

// openUDPPair binds link/udp on two loopback addresses at one free port.
func openUDPPair(tb testing.TB, ipA, ipB netip.Addr) (*udp.Link, *udp.Link, int) {
	tb.Helper()
	var lastErr error
	for attempt := 0; attempt < 50; attempt++ {
		port := 20000 + rand.IntN(30000)
		la, err := udp.Open(udp.Config{Addr: ipA, Port: port, MTU: 1500})
		if err != nil {
			lastErr = err
			continue
		}
		lb, err := udp.Open(udp.Config{Addr: ipB, Port: port, MTU: 1500})
		if err != nil {
			la.Close()
			lastErr = err
			continue
		}
		return la, lb, port
	}
	tb.Fatalf("no free UDP port on %v and %v: %v", ipA, ipB, lastErr)
	return nil, nil, 0
}

func newUDPDevices(tb testing.TB) *devPair {
	skipRace(tb)
	la, lb, _ := openUDPPair(tb, loA, loB)
	return newDevicesAt(tb, la, lb, loA, loB)
}

func TestOperationsUDP(t *testing.T) {
	p := newUDPDevices(t)
	if p.a.LinkName() != "UDP" || p.a.Props().SrcPort == 0 {
		t.Fatalf("link %q with source port %d, want UDP with a fixed source port", p.a.LinkName(), p.a.Props().SrcPort)
	}
	runOperations(t, p)
	st := p.b.Stats()
	if st.DropBadICRC != 0 || st.DropMalformed != 0 {
		t.Errorf("frames dropped over loopback: %+v", st)
	}
}

func TestUDUDP(t *testing.T) {
	runUD(t, newUDPDevices(t))
}

func TestErrorPathsUDP(t *testing.T) {
	runErrorPaths(t, func(t *testing.T) *devPair { return newUDPDevices(t) })
}

// Two processes: the test binary re-executed as a child that serves one RC
// QP over link/udp on 127.0.0.3, echoing every SEND back.

const childEnv = "XDPROCE_ROCE_CHILD_PORT"

func TestMain(m *testing.M) {
	if ifname := os.Getenv(openChildEnv); ifname != "" {
		// Hold an AF_XDP device until killed (TestPrivilegedOpenAfterKill).
		d, err := roce.Open(ifname, &roce.Options{Link: roce.LinkXSK})
		if err != nil {
			fmt.Fprintln(os.Stderr, "child:", err)
			os.Exit(1)
		}
		fmt.Printf("ready %s\n", d.LinkName())
		select {}
	}
	if p := os.Getenv(childEnv); p != "" {
		port, _ := strconv.Atoi(p)
		if err := runChild(port); err != nil {
			fmt.Fprintln(os.Stderr, "child:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// endpointLine is "qpn psn rkey addr".
func endpointLine(s *side) string {
	return fmt.Sprintf("%d %d %d %d\n", s.qp.QPN(), s.psn, s.mr.RKey(), s.mr.Addr())
}

func parseEndpoint(line string) (qpn, psn, rkey uint32, addr uint64, err error) {
	_, err = fmt.Sscanf(strings.TrimSpace(line), "%d %d %d %d", &qpn, &psn, &rkey, &addr)
	return
}

func runChild(port int) error {
	l, err := udp.Open(udp.Config{Addr: loC, Port: port, MTU: 1500})
	if err != nil {
		return err
	}
	dev, err := roce.NewDevice(l, &roce.Options{Addrs: []netip.Addr{loC}})
	if err != nil {
		return err
	}
	defer dev.Close()
	pd := dev.AllocPD()
	cq, err := dev.CreateCQ(256)
	if err != nil {
		return err
	}
	buf := make([]byte, 1<<20)
	fill(buf, 200)
	m, err := pd.RegMR(buf, roce.LocalWrite|roce.RemoteWrite|roce.RemoteRead|roce.RemoteAtomic)
	if err != nil {
		return err
	}
	q, err := pd.CreateQP(roce.QPConfig{Type: roce.RC, SendCQ: cq, RecvCQ: cq, MaxSendWR: 64, MaxRecvWR: 64})
	if err != nil {
		return err
	}
	s := &side{dev: dev, pd: pd, qp: q, buf: buf, mr: m, psn: 0x777}
	fmt.Print(endpointLine(s))
	in := bufio.NewReader(os.Stdin)
	line, err := in.ReadString('\n')
	if err != nil {
		return err
	}
	qpn, psn, _, _, err := parseEndpoint(line)
	if err != nil {
		return err
	}
	o := roce.DefaultConnectOptions()
	o.Timeout = 14 // ≈ 67 ms: the child process may be descheduled on a loaded machine
	if err := q.Connect(s.psn, roce.Endpoint{QPN: qpn, PSN: psn, GID: roce.GIDFromIP(loA)}, &o); err != nil {
		return err
	}
	const slot = 64 << 10
	for i := 0; i < 8; i++ {
		if err := q.PostRecv(roce.RecvWR{ID: uint64(i), SGL: []roce.SGE{{Addr: m.Addr() + uint64(512<<10+i*slot), Length: slot, LKey: m.LKey()}}}); err != nil {
			return err
		}
	}
	deadline := time.Now().Add(time.Minute)
	var wcs [1]roce.WC
	for time.Now().Before(deadline) {
		n, err := cq.Poll(wcs[:])
		if err != nil {
			return err
		}
		if n == 0 {
			time.Sleep(100 * time.Microsecond)
			continue
		}
		wc := wcs[0]
		if wc.Status != qp.WCSuccess {
			return fmt.Errorf("completion %+v (%v)", wc, wc.Status)
		}
		if wc.Opcode == qp.WCSend {
			continue
		}
		off := 512<<10 + int(wc.ID)*slot
		msg := buf[off : off+int(wc.ByteLen)]
		if wc.Opcode == qp.WCRecvRDMAWithImm {
			// Echo the immediate value as a 4-byte SEND.
			binary.BigEndian.PutUint32(buf[off:], wc.ImmData)
			msg = buf[off : off+4]
		} else if string(msg) == "bye" {
			return nil
		}
		if err := q.PostSend(roce.SendWR{ID: 1000 + wc.ID, Opcode: qp.WRSend, Flags: qp.Signaled,
			SGL: []roce.SGE{{Addr: m.Addr() + uint64(off), Length: uint32(len(msg)), LKey: m.LKey()}}}); err != nil {
			return err
		}
		// Wait for the echo to complete before reusing the slot.
		for {
			n, err := cq.Poll(wcs[:])
			if err != nil {
				return err
			}
			if n == 1 {
				if wcs[0].Status != qp.WCSuccess || wcs[0].ID != 1000+wc.ID {
					return fmt.Errorf("echo completion %+v (%v)", wcs[0], wcs[0].Status)
				}
				break
			}
			time.Sleep(50 * time.Microsecond)
		}
		if err := q.PostRecv(roce.RecvWR{ID: wc.ID, SGL: []roce.SGE{{Addr: m.Addr() + uint64(off), Length: slot, LKey: m.LKey()}}}); err != nil {
			return err
		}
	}
	return fmt.Errorf("no bye within a minute")
}

func TestTwoProcessesUDP(t *testing.T) {
	skipRace(t)
	la, lc, port := openUDPPair(t, loA, loC)
	lc.Close() // the child binds 127.0.0.3 at this port
	dev, err := roce.NewDevice(la, &roce.Options{Addrs: []netip.Addr{loA}})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+strconv.Itoa(port))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			cmd.Process.Kill()
		}
	})
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatalf("reading the child's endpoint: %v (stderr: %s)", err, stderr.String())
	}
	cqpn, cpsn, crkey, caddr, err := parseEndpoint(line)
	if err != nil {
		t.Fatal(err)
	}
	x := newSide(t, dev, roce.RC, connCfg{}, 0x4242)
	o := roce.DefaultConnectOptions()
	o.Timeout = 14 // ≈ 67 ms: the child process may be descheduled on a loaded machine
	if err := x.qp.Connect(x.psn, roce.Endpoint{QPN: cqpn, PSN: cpsn, GID: roce.GIDFromIP(loC)}, &o); err != nil {
		t.Fatal(err)
	}
	fmt.Fprint(stdin, endpointLine(x))

	// WRITE 100 KB into the child, READ it back elsewhere.
	fill(x.buf[:100000], 99)
	if err := x.qp.PostSend(roce.SendWR{ID: 1, Opcode: qp.WRRDMAWrite, Flags: qp.Signaled,
		SGL: []roce.SGE{x.sge(0, 100000)}, RemoteAddr: caddr, RKey: crkey}); err != nil {
		t.Fatal(err)
	}
	expectStatus(t, x.scq, 1, qp.WCSuccess)
	if err := x.qp.PostSend(roce.SendWR{ID: 2, Opcode: qp.WRRDMARead, Flags: qp.Signaled,
		SGL: []roce.SGE{x.sge(dstOff, 100000)}, RemoteAddr: caddr, RKey: crkey}); err != nil {
		t.Fatal(err)
	}
	expectStatus(t, x.scq, 2, qp.WCSuccess)
	if !bytes.Equal(x.buf[dstOff:dstOff+100000], x.buf[:100000]) {
		t.Fatal("READ of the WRITTEN data differs")
	}
	// READ memory the child filled itself.
	if err := x.qp.PostSend(roce.SendWR{ID: 3, Opcode: qp.WRRDMARead, Flags: qp.Signaled,
		SGL: []roce.SGE{x.sge(dstOff, 3000)}, RemoteAddr: caddr + 200000, RKey: crkey}); err != nil {
		t.Fatal(err)
	}
	expectStatus(t, x.scq, 3, qp.WCSuccess)
	full := make([]byte, 1<<20)
	fill(full, 200)
	if !bytes.Equal(x.buf[dstOff:dstOff+3000], full[200000:203000]) {
		t.Fatal("READ of the child's memory differs")
	}
	// Atomics on the child's memory: FETCH_ADD ×5, then CMP_SWP.
	ne := binary.NativeEndian
	orig := ne.Uint64(full[300000:])
	sum := orig
	for i := 0; i < 5; i++ {
		if err := x.qp.PostSend(roce.SendWR{ID: uint64(10 + i), Opcode: qp.WRAtomicFetchAdd, Flags: qp.Signaled,
			SGL: []roce.SGE{x.sge(dstOff, 8)}, RemoteAddr: caddr + 300000, RKey: crkey, CompareAdd: uint64(i + 1)}); err != nil {
			t.Fatal(err)
		}
		expectStatus(t, x.scq, uint64(10+i), qp.WCSuccess)
		if got := ne.Uint64(x.buf[dstOff:]); got != sum {
			t.Fatalf("FETCH_ADD %d returned %d, want %d", i, got, sum)
		}
		sum += uint64(i + 1)
	}
	if err := x.qp.PostSend(roce.SendWR{ID: 20, Opcode: qp.WRAtomicCmpSwp, Flags: qp.Signaled,
		SGL: []roce.SGE{x.sge(dstOff, 8)}, RemoteAddr: caddr + 300000, RKey: crkey, CompareAdd: sum, Swap: 7}); err != nil {
		t.Fatal(err)
	}
	expectStatus(t, x.scq, 20, qp.WCSuccess)
	if got := ne.Uint64(x.buf[dstOff:]); got != sum {
		t.Fatalf("CMP_SWP returned %d, want %d", got, sum)
	}
	// SEND and WRITE_WITH_IMM, echoed back by the child.
	for i, msg := range []int{1, 1024, 5000, 60000} {
		fill(x.buf[:msg], byte(i))
		if err := x.qp.PostRecv(roce.RecvWR{ID: 100, SGL: []roce.SGE{x.sge(dstOff, 65536)}}); err != nil {
			t.Fatal(err)
		}
		if err := x.qp.PostSend(roce.SendWR{ID: 101, Opcode: qp.WRSend, Flags: qp.Signaled, SGL: []roce.SGE{x.sge(0, msg)}}); err != nil {
			t.Fatal(err)
		}
		expectStatus(t, x.scq, 101, qp.WCSuccess)
		wc := expectStatus(t, x.rcq, 100, qp.WCSuccess)
		if int(wc.ByteLen) != msg || !bytes.Equal(x.buf[dstOff:dstOff+msg], x.buf[:msg]) {
			t.Fatalf("echo of %d bytes: got %d bytes, equal=%v", msg, wc.ByteLen, bytes.Equal(x.buf[dstOff:dstOff+msg], x.buf[:msg]))
		}
	}
	if err := x.qp.PostRecv(roce.RecvWR{ID: 200, SGL: []roce.SGE{x.sge(dstOff, 65536)}}); err != nil {
		t.Fatal(err)
	}
	if err := x.qp.PostSend(roce.SendWR{ID: 201, Opcode: qp.WRRDMAWriteImm, Imm: 0xC0FFEE, Flags: qp.Signaled,
		SGL: []roce.SGE{x.sge(0, 10)}, RemoteAddr: caddr + 400000, RKey: crkey}); err != nil {
		t.Fatal(err)
	}
	expectStatus(t, x.scq, 201, qp.WCSuccess)
	expectStatus(t, x.rcq, 200, qp.WCSuccess)
	if got := binary.BigEndian.Uint32(x.buf[dstOff:]); got != 0xC0FFEE {
		t.Fatalf("child saw immediate %#x, want 0xc0ffee", got)
	}
	// Bye.
	copy(x.buf, "bye")
	if err := x.qp.PostSend(roce.SendWR{ID: 300, Opcode: qp.WRSend, Flags: qp.Signaled, SGL: []roce.SGE{x.sge(0, 3)}}); err != nil {
		t.Fatal(err)
	}
	expectStatus(t, x.scq, 300, qp.WCSuccess)
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("child: %v; stderr:\n%s", err, stderr.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("child did not exit; stderr:\n%s", stderr.String())
	}
}
