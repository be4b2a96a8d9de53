package qp

import (
	"bytes"
	"testing"

	"github.com/xdproce/xdproce/roce/mr"
	"github.com/xdproce/xdproce/roce/wire"
)

// ccWire is what the CE marker of a ccStream saw on the wire.
type ccWire struct {
	requests, ect, marked int // requests arriving at b; of them ECT(0); marked CE by the test
	cnps                  int // CNPs arriving at a
	badCNP                string
	maxQueue, sumQueue    int64 // the deepest a→b queue (ns of frames waiting) a request arrived behind; the sum
}

// meanQueue is the mean a→b queue a request arrived behind (ns).
func (w *ccWire) meanQueue() int64 { return w.sumQueue / int64(max(w.requests, 1)) }

// ccStream WRITEs total bytes in 64 KiB messages from a to b over the timed
// network at cfg, 16 outstanding, with DCQCN on both ends if dcqcn. mark
// says, per request arriving at b at a time and a→b queue depth (ns),
// whether the network marks it CE (only ECN-capable frames are marked, as
// a switch does). It checks the bytes that landed and returns the run and
// what the wire carried.
func ccStream(t *testing.T, dcqcn bool, total int, cfg netCfg, mark func(now, queue int64) bool) (*netRun, *ccWire) {
	t.Helper()
	o := defaultOpts()
	o.mtu, o.maxWR, o.dcqcn = wire.MTU4096, 64, dcqcn
	r := newNetRun(t, o, cfg, 1)
	a, b := r.a, r.b
	w := &ccWire{}
	r.drop = func(to *netEnd, p *wire.Packet) bool {
		info, _ := p.BTH.Opcode.Info()
		switch {
		case to == b && info.Request:
			w.requests++
			q := max(b.in.free-r.now, 0)
			w.maxQueue = max(w.maxQueue, q)
			w.sumQueue += q
			if p.TOS&ecnMask == ecnECT0 {
				w.ect++
				if mark != nil && mark(r.now, q) {
					p.TOS |= ecnCE // what the engine sees: the frame's TOS
					w.marked++
				}
			}
		case to == a && p.BTH.Opcode == wire.CNP:
			w.cnps++
			if !p.BTH.BECN || p.TOS != DefaultDCQCN.CNPDSCP<<2 || p.BTH.DestQPN != a.q.QPN() || len(p.Payload) != cnpLen {
				w.badCNP = "CNP with BECN " + map[bool]string{true: "set", false: "clear"}[p.BTH.BECN]
			}
		}
		return false
	}
	const msg, depth = 64 << 10, 16
	src, srcBuf := a.reg(t, total, allAcc)
	dst, dstBuf := b.reg(t, total, allAcc)
	fill(srcBuf, 3)
	posted, done, n := 0, 0, total/msg
	wcs := make([]WC, 32)
	start := r.now
	for done < n {
		for posted < n && posted-done < depth {
			must(t, a.q.PostSend(&SendWR{ID: uint64(posted), Opcode: WRRDMAWrite, Flags: Signaled,
				SGL: []mr.SGE{sge(src, posted*msg, msg)}, RemoteAddr: dst.Addr() + uint64(posted*msg), RKey: dst.RKey()}))
			posted++
		}
		r.step()
		if r.now-start > 20e9 {
			t.Fatalf("dcqcn=%v: %d of %d messages after 20 s\n%s\n%s", dcqcn, done, n, a.q.dump(), b.q.dump())
		}
		k, _ := a.cq.Poll(wcs)
		for _, wc := range wcs[:k] {
			if wc.Status != WCSuccess || wc.ID != uint64(done) {
				t.Fatalf("dcqcn=%v: WC %+v, want ID %d", dcqcn, wc, done)
			}
			done++
		}
	}
	if !bytes.Equal(srcBuf, dstBuf) {
		t.Fatalf("dcqcn=%v: the bytes that landed differ", dcqcn)
	}
	return r, w
}

// A fast path: 4 KiB frames at 10 µs each (≈ 3.3 Gb/s), 20 µs one way,
// 10 µs ticks.
var ccNet = netCfg{delay: 20_000, perFrame: 10_000, tick: 10_000}

// TestCCMarkedFramesCNP marks every request for 2 ms in the middle of a
// transfer: the receiver answers with CNPs, at most one per CNPInterval,
// the sender handles each, and its rate drops below what it sent before.
func TestCCMarkedFramesCNP(t *testing.T) {
	var from, to int64
	r, w := ccStream(t, true, 16<<20, ccNet, func(now, _ int64) bool {
		if from == 0 {
			from, to = now+5_000_000, now+7_000_000
		}
		return now >= from && now < to
	})
	a, b := r.a.q.Stats(), r.b.q.Stats()
	if w.ect != w.requests || w.requests == 0 {
		t.Fatalf("%d of %d requests ECT(0), want all", w.ect, w.requests)
	}
	if w.marked == 0 || b.Get(CtrECNMarked) != uint64(w.marked) {
		t.Fatalf("marked %d, receiver counted np_ecn_marked_roce_packets %d", w.marked, b.Get(CtrECNMarked))
	}
	sent := b.Get(CtrCNPSent)
	maxCNPs := uint64((to-from)/DefaultDCQCN.CNPInterval + 1)
	if sent == 0 || sent > maxCNPs {
		t.Fatalf("np_cnp_sent %d, want 1..%d (one per %d ns over %d ns of marking)", sent, maxCNPs, DefaultDCQCN.CNPInterval, to-from)
	}
	if w.badCNP != "" {
		t.Fatal(w.badCNP)
	}
	if uint64(w.cnps) != sent || a.Get(CtrCNPHandled) != sent || a.Get(CtrCNPIgnored) != 0 {
		t.Fatalf("CNPs: %d sent, %d on the wire, rp_cnp_handled %d, rp_cnp_ignored %d",
			sent, w.cnps, a.Get(CtrCNPHandled), a.Get(CtrCNPIgnored))
	}
	if a.Get(CtrCNPSent) != 0 || b.Get(CtrCNPHandled) != 0 {
		t.Fatal("CNPs the other way")
	}
	d := r.a.q.win.pace.cc
	if d.cutAt == 0 || d.peak == 0 {
		t.Fatalf("the sender's rate was never cut (peak %.3g B/s)", d.peak)
	}
	if d.alpha <= 0 || d.alpha > 1 {
		t.Fatalf("α %v", d.alpha)
	}
}

// TestCCRateDrops: a CNP cuts the sender's rate below the rate it reached
// unpaced, and paces it.
func TestCCRateDrops(t *testing.T) {
	o := defaultOpts()
	o.mtu, o.maxWR, o.dcqcn = wire.MTU4096, 64, true
	r := newNetRun(t, o, ccNet, 1)
	r.step() // the queue pairs apply their attributes: DCQCN starts
	d := &r.a.q.win.pace
	d.charge(1<<20, r.now+1_000_000) // 1 MiB in 1 ms, measured
	r.a.q.e.now = r.now + 1_000_000
	r.a.q.cnpReceived()
	rc, limited := d.cc.rate()
	if !limited || rc >= d.cc.peak || r.a.q.Stats().Get(CtrCNPHandled) != 1 {
		t.Fatalf("after a CNP: rate %.3g limited %v, peak %.3g, rp_cnp_handled %d", rc, limited, d.cc.peak,
			r.a.q.Stats().Get(CtrCNPHandled))
	}
}

// TestCCCleanRun: with DCQCN on and nothing marked, no CNP, no pacing.
func TestCCCleanRun(t *testing.T) {
	r, w := ccStream(t, true, 4<<20, ccNet, nil)
	a, b := r.a.q.Stats(), r.b.q.Stats()
	if w.ect != w.requests || w.cnps != 0 || b.Get(CtrCNPSent) != 0 || b.Get(CtrECNMarked) != 0 || a.Get(CtrCNPHandled) != 0 {
		t.Fatalf("clean run: %d/%d ECT, %d CNPs on the wire, np_cnp_sent %d, marked %d, rp_cnp_handled %d",
			w.ect, w.requests, w.cnps, b.Get(CtrCNPSent), b.Get(CtrECNMarked), a.Get(CtrCNPHandled))
	}
	if _, limited := r.a.q.win.pace.cc.rate(); limited {
		t.Fatal("paced without a CNP")
	}
}

// TestCCOff: without DCQCN the frames carry TOS 0 (nothing to mark), and a
// CNP that arrives anyway is counted and ignored.
func TestCCOff(t *testing.T) {
	r, w := ccStream(t, false, 1<<20, ccNet, func(int64, int64) bool { return true })
	if w.ect != 0 || w.marked != 0 || w.cnps != 0 {
		t.Fatalf("without DCQCN: %d ECT frames, %d marked, %d CNPs", w.ect, w.marked, w.cnps)
	}
	// A CNP all the same (from a peer whose notification point is on):
	// counted as ignored, nothing paced.
	a := r.a.q
	p := wire.Packet{BTH: wire.BTH{Opcode: wire.CNP, BECN: true, DestQPN: a.QPN()}, TOS: 48 << 2}
	a.Receive(&p, r.now, netOut{r.a.out, &r.now})
	if got := a.Stats().Get(CtrCNPIgnored); got != 1 || a.Stats().Get(CtrCNPHandled) != 0 {
		t.Fatalf("rp_cnp_ignored %d, rp_cnp_handled %d, want 1 and 0", got, a.Stats().Get(CtrCNPHandled))
	}
	if a.win.pace.on || a.win.pace.cc != nil {
		t.Fatal("DCQCN's pacer on (or its state allocated) without DCQCN")
	}
}

// TestCCBottleneck: a 1 Gb/s bottleneck (4 KiB frames at 33 µs) marking
// above 20 queued frames: with DCQCN the queue the requests wait in stays
// far below the one without, which fills to the send window.
func TestCCBottleneck(t *testing.T) {
	cfg := netCfg{delay: 20_000, perFrame: 33_000, tick: 10_000}
	const k = 20 * 33_000
	mark := func(_, q int64) bool { return q > k }
	_, none := ccStream(t, false, 8<<20, cfg, mark)
	_, dc := ccStream(t, true, 8<<20, cfg, mark)
	t.Logf("queue (deepest, mean): none %d, %d µs; dcqcn %d, %d µs; dcqcn marked %d of %d, %d CNPs",
		none.maxQueue/1000, none.meanQueue()/1000, dc.maxQueue/1000, dc.meanQueue()/1000, dc.marked, dc.requests, dc.cnps)
	if dc.cnps == 0 || dc.meanQueue()*2 > none.meanQueue() {
		t.Fatalf("mean queue with DCQCN %d ns, without %d ns (%d CNPs): want at most half", dc.meanQueue(), none.meanQueue(), dc.cnps)
	}
}
