package roce_test

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/xdproce/xdproce/link/pipe"
	"github.com/xdproce/xdproce/roce"
)

// ccWrites WRITEs n messages of size bytes from x to y, one at a time,
// checking each landed.
func ccWrites(t *testing.T, x, y *side, n, size int) {
	t.Helper()
	for i := range n {
		fill(x.buf[:size], byte(i))
		if err := x.qp.PostSend(roce.SendWR{ID: uint64(i), Opcode: roce.WRRDMAWrite, Flags: roce.Signaled,
			SGL: []roce.SGE{x.sge(0, size)}, RemoteAddr: y.mr.Addr(), RKey: y.mr.RKey()}); err != nil {
			t.Fatal(err)
		}
		if wc := waitWC(t, x.scq); wc.Status != roce.WCSuccess {
			t.Fatalf("WRITE %d: %v", i, wc.Status)
		}
		if !bytes.Equal(x.buf[:size], y.buf[:size]) {
			t.Fatalf("WRITE %d: the bytes that landed differ", i)
		}
	}
}

// TestCCPipeMarked: two devices over link/pipe with DCQCN on both queue
// pairs, every frame a→b marked CE by the pipe: b's queue pair answers
// with CNPs, at most one per CNP interval, a's handles them; b→a frames
// stay unmarked. Then a clean run: no more CNPs.
func TestCCPipeMarked(t *testing.T) {
	p, la, _ := newPipeDevices(t, pipe.Config{MTU: 4200})
	o := roce.DefaultConnectOptions()
	o.CC = roce.DCQCN
	x, y := connectRC(t, p, connCfg{opts: &o, bufSize: 1 << 20})

	if err := la.SetFaults(pipe.Faults{ECNMark: 1}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	ccWrites(t, x, y, 20, 1<<20)
	el := time.Since(start)
	marked := la.Stats().Marked
	xs, ys := x.qp.Stats().CC, y.qp.Stats().CC
	if marked == 0 || ys.ECNMarked != marked {
		t.Fatalf("the pipe marked %d frames, b counted %d", marked, ys.ECNMarked)
	}
	maxCNPs := uint64(el/time.Duration(roce.DefaultDCQCN.CNPInterval)) + 1
	if ys.CNPSent == 0 || ys.CNPSent > maxCNPs {
		t.Fatalf("np_cnp_sent %d in %v, want 1..%d", ys.CNPSent, el, maxCNPs)
	}
	if xs.CNPHandled != ys.CNPSent || xs.CNPIgnored != 0 || xs.ECNMarked != 0 || xs.CNPSent != 0 {
		t.Fatalf("a: %+v, b: %+v: want every CNP b sent handled by a, none the other way", xs, ys)
	}
	if st := p.a.Stats().CC; st.CNPHandled != xs.CNPHandled {
		t.Fatalf("device totals %+v, queue pair %+v", st, xs)
	}

	// Clean: nothing marked, no CNP.
	if err := la.SetFaults(pipe.Faults{}); err != nil {
		t.Fatal(err)
	}
	ccWrites(t, x, y, 5, 1<<20)
	if got := y.qp.Stats().CC; got.CNPSent != ys.CNPSent || got.ECNMarked != ys.ECNMarked {
		t.Fatalf("clean run: b %+v, before %+v", got, ys)
	}
}

// TestCCPipeOff: without DCQCN the frames are not ECN-capable: the pipe
// marks nothing and no CNP is sent.
func TestCCPipeOff(t *testing.T) {
	p, la, _ := newPipeDevices(t, pipe.Config{MTU: 4200, AtoB: pipe.Faults{ECNMark: 1}})
	x, y := connectRC(t, p, connCfg{bufSize: 1 << 20})
	ccWrites(t, x, y, 3, 1<<20)
	if m, ys := la.Stats().Marked, y.qp.Stats().CC; m != 0 || ys != (roce.CCStats{}) {
		t.Fatalf("without DCQCN: %d marked, b %+v", m, ys)
	}
}

// TestConnectBDP: ConnectOptions.BDP caps an RC queue pair's send window
// at BDP / path MTU PSNs (Attr.SendWindow, at least one), leaves it unset
// at 0, and is refused when negative; data still moves with a small cap.
func TestConnectBDP(t *testing.T) {
	for _, c := range []struct {
		bdp  int
		want uint32
	}{{0, 0}, {1, 1}, {16 << 10, 16}, {16<<10 + 1, 17}} {
		p, _, _ := newPipeDevices(t, pipe.Config{MTU: 4200})
		o := roce.DefaultConnectOptions()
		o.PathMTU, o.BDP = roce.MTU1024, c.bdp
		x, y := connectRC(t, p, connCfg{opts: &o, bufSize: 1 << 20})
		for _, s := range []*side{x, y} {
			if _, a := s.qp.Query(); a.SendWindow != c.want {
				t.Errorf("BDP %d: Attr.SendWindow %d, want %d", c.bdp, a.SendWindow, c.want)
			}
		}
		ccWrites(t, x, y, 4, 256<<10)
	}
	p, _, _ := newPipeDevices(t, pipe.Config{MTU: 4200})
	s := newSide(t, p.a, roce.RC, connCfg{}, 1)
	o := roce.DefaultConnectOptions()
	o.BDP = -1
	if err := s.qp.Connect(1, roce.Endpoint{GID: roce.GIDFromIP(addrB), QPN: 0x11}, &o); err == nil || !strings.Contains(err.Error(), "BDP -1") {
		t.Errorf("Connect with BDP -1: %v", err)
	}
}
