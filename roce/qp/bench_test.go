package qp

import (
	"testing"

	"github.com/xdproce/xdproce/roce/mr"
	"github.com/xdproce/xdproce/roce/wire"
)

// xfer is one operation between two QPs in memory: post, run the engines
// and the in-test network until the completions arrive.
type xfer struct {
	p     *pair
	wr    SendWR
	recv  RecvWR
	wcs   []WC
	needB bool
}

func newXfer(tb testing.TB, op WROpcode, n int, mtu wire.MTU) *xfer {
	o := defaultOpts()
	o.mtu = mtu
	p := newPair(tb, o)
	am, _ := p.a.reg(tb, n+8, allAcc)
	bm, _ := p.b.reg(tb, n+8, allAcc)
	x := &xfer{p: p, wcs: make([]WC, 16)}
	x.wr = SendWR{ID: 1, Opcode: op, Flags: Signaled, SGL: []mr.SGE{sge(am, 0, n)}, RemoteAddr: bm.Addr(), RKey: bm.RKey()}
	if op == WRSend {
		x.needB = true
		x.recv = RecvWR{ID: 2, SGL: []mr.SGE{sge(bm, 0, n)}}
	}
	return x
}

// once runs one operation to completion.
func (x *xfer) once(tb testing.TB) {
	p := x.p
	if x.needB {
		if err := p.b.q.PostRecv(&x.recv); err != nil {
			tb.Fatal(err)
		}
	}
	if err := p.a.q.PostSend(&x.wr); err != nil {
		tb.Fatal(err)
	}
	gotA, gotB := false, !x.needB
	for range 10000 {
		p.step()
		if !gotA {
			n, err := p.a.cq.Poll(x.wcs)
			if err != nil || (n > 0 && x.wcs[0].Status != WCSuccess) {
				tb.Fatalf("poll: %v %+v", err, x.wcs[0])
			}
			gotA = n > 0
		}
		if !gotB {
			n, _ := p.b.cq.Poll(x.wcs)
			gotB = n > 0
		}
		if gotA && gotB {
			return
		}
	}
	tb.Fatal("operation did not complete")
}

// TestSteadyStateAllocs: posting, building, encoding, decoding, executing and
// completing allocate nothing once the rings are warm.
func TestSteadyStateAllocs(t *testing.T) {
	for _, c := range []struct {
		op WROpcode
		n  int
	}{{WRSend, 64}, {WRSend, 10000}, {WRRDMAWrite, 64 << 10}, {WRRDMARead, 64 << 10}, {WRAtomicFetchAdd, 8}, {WRRDMAWriteImm, 100}} {
		x := newXfer(t, c.op, c.n, wire.MTU1024)
		if c.op == WRRDMAWriteImm {
			x.needB = true
		}
		for range 4 {
			x.once(t)
		}
		if a := testing.AllocsPerRun(50, func() { x.once(t) }); a != 0 {
			t.Errorf("%v %d B: %v allocations per operation", c.op, c.n, a)
		}
	}
}

func benchXfer(b *testing.B, op WROpcode, n int) {
	x := newXfer(b, op, n, wire.MTU4096)
	for range 4 {
		x.once(b)
	}
	b.SetBytes(int64(n))
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		x.once(b)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
}

func BenchmarkQPSend64(b *testing.B)   { benchXfer(b, WRSend, 64) }
func BenchmarkQPWrite64K(b *testing.B) { benchXfer(b, WRRDMAWrite, 64<<10) }
func BenchmarkQPRead64K(b *testing.B)  { benchXfer(b, WRRDMARead, 64<<10) }
func BenchmarkQPFetchAdd(b *testing.B) { benchXfer(b, WRAtomicFetchAdd, 8) }
func BenchmarkQPWrite64KMTU1024(b *testing.B) {
	x := newXfer(b, WRRDMAWrite, 64<<10, wire.MTU1024)
	x.once(b)
	b.SetBytes(64 << 10)
	b.ReportAllocs()
	for b.Loop() {
		x.once(b)
	}
}
