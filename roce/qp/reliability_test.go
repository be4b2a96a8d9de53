package qp

import (
	"bytes"
	"encoding/binary"
	"flag"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/xdproce/xdproce/roce/mr"
	"github.com/xdproce/xdproce/roce/wire"
)

// dropNth drops the nth (1-based) packet from `from` with opcode op, once.
func dropNth(from *end, op wire.Opcode, nth int) func(*end, *wire.Packet) bool {
	seen := 0
	return func(f *end, p *wire.Packet) bool {
		if f != from || p.BTH.Opcode != op {
			return false
		}
		seen++
		return seen == nth
	}
}

func TestGoBackN(t *testing.T) {
	p := newPair(t, defaultOpts())
	p.f.drop = dropNth(p.a, wire.RCWriteMiddle, 3)
	am, abuf := p.a.reg(t, 20*1024, allAcc)
	bm, bbuf := p.b.reg(t, 20*1024, allAcc)
	fill(abuf, 4)
	must(t, p.a.q.PostSend(&SendWR{ID: 1, Opcode: WRRDMAWrite, Flags: Signaled, SGL: []mr.SGE{sge(am, 0, 20*1024)},
		RemoteAddr: bm.Addr(), RKey: bm.RKey()}))
	wcs := p.poll(p.a, 1)
	if wcs[0].Status != WCSuccess {
		t.Fatalf("WC %+v", wcs[0])
	}
	if !bytes.Equal(abuf, bbuf) {
		t.Fatal("data differs")
	}
	sa, sb := p.a.q.Stats(), p.b.q.Stats()
	if sb.Get(CtrSeqNAKsSent) != 1 || sa.Get(CtrSeqNAKsRecv) != 1 {
		t.Errorf("seq NAKs sent %d, received %d; want 1, 1", sb.Get(CtrSeqNAKsSent), sa.Get(CtrSeqNAKsRecv))
	}
	if sa.Get(CtrTimeouts) != 0 {
		t.Errorf("%d timeouts; go-back-N should not need one", sa.Get(CtrTimeouts))
	}
	// Packets 4..20 (after the lost one, packet #4) were sent twice.
	if got := sa.Get(CtrRetransmits); got < 16 || got > 20 {
		t.Errorf("retransmits %d, want about 17", got)
	}
}

func TestTimeoutRetry(t *testing.T) {
	p := newPair(t, defaultOpts())
	p.f.drop = dropNth(p.b, wire.RCAck, 1)
	am, _ := p.a.reg(t, 100, allAcc)
	bm, _ := p.b.reg(t, 100, allAcc)
	start := p.now
	must(t, p.a.q.PostSend(&SendWR{ID: 1, Opcode: WRRDMAWrite, Flags: Signaled, SGL: []mr.SGE{sge(am, 0, 100)},
		RemoteAddr: bm.Addr(), RKey: bm.RKey()}))
	wcs := p.poll(p.a, 1)
	if wcs[0].Status != WCSuccess {
		t.Fatalf("WC %+v", wcs[0])
	}
	if got := p.a.q.Stats().Get(CtrTimeouts); got != 1 {
		t.Errorf("timeouts %d, want 1", got)
	}
	if got := p.b.q.Stats().Get(CtrDuplicates); got != 1 {
		t.Errorf("duplicates at the responder %d, want 1", got)
	}
	if el, to := p.now-start, timeoutNs(10); el < to || el > 2*to {
		t.Errorf("completed after %d ns, want one timeout (%d ns)", el, to)
	}
}

func TestRetryExceeded(t *testing.T) {
	o := defaultOpts()
	o.retry = 3
	o.timeout = 14
	p := newPair(t, o)
	p.f.drop = func(from *end, _ *wire.Packet) bool { return from == p.a } // the peer is gone
	am, _ := p.a.reg(t, 100, allAcc)
	bm, _ := p.b.reg(t, 100, allAcc)
	start := p.now
	for i := range 3 {
		must(t, p.a.q.PostSend(&SendWR{ID: uint64(i + 1), Opcode: WRRDMAWrite, SGL: []mr.SGE{sge(am, 0, 100)},
			RemoteAddr: bm.Addr(), RKey: bm.RKey()}))
	}
	must(t, p.a.q.PostRecv(&RecvWR{ID: 9, SGL: []mr.SGE{sge(am, 0, 10)}}))
	wcs := p.poll(p.a, 4)
	want := []WC{
		{ID: 1, Status: WCRetryExcErr, Opcode: WCRDMAWrite, QPN: 0x11},
		{ID: 2, Status: WCWRFlushErr, Opcode: WCRDMAWrite, QPN: 0x11},
		{ID: 3, Status: WCWRFlushErr, Opcode: WCRDMAWrite, QPN: 0x11},
		{ID: 9, Status: WCWRFlushErr, Opcode: WCRecv, QPN: 0x11},
	}
	if d := cmp.Diff(want, wcs); d != "" {
		t.Fatalf("WCs (-want +got):\n%s", d)
	}
	if s := p.a.q.State(); s != Error {
		t.Fatalf("state %v, want ERR", s)
	}
	el := p.now - start
	to := timeoutNs(14)
	if el < 4*to || el > 5*to {
		t.Errorf("RETRY_EXC_ERR after %.1f ms, want (retry_cnt+1) × %.1f ms", float64(el)/1e6, float64(to)/1e6)
	}
	if got := p.a.q.Stats().Get(CtrTimeouts); got != 4 {
		t.Errorf("timeouts %d, want 4", got)
	}
	// Posting in Error flushes at once.
	must(t, p.a.q.PostSend(&SendWR{ID: 10, Opcode: WRSend, Flags: Signaled}))
	if w := p.poll(p.a, 1); w[0].Status != WCWRFlushErr || w[0].ID != 10 {
		t.Fatalf("post in Error: %+v", w)
	}
}

func TestRNR(t *testing.T) {
	p := newPair(t, defaultOpts())
	am, abuf := p.a.reg(t, 3000, allAcc)
	bm, bbuf := p.b.reg(t, 3000, allAcc)
	fill(abuf, 1)
	must(t, p.a.q.PostSend(&SendWR{ID: 1, Opcode: WRSend, Flags: Signaled, SGL: []mr.SGE{sge(am, 0, 3000)}}))
	// Let a few RNR NAKs happen.
	p.run(func() bool { return p.a.q.Stats().Get(CtrRNRNAKsRecv) >= 3 }, 10000)
	if p.a.q.Stats().Get(CtrRNRNAKsRecv) < 3 {
		t.Fatal("no RNR NAKs")
	}
	must(t, p.b.q.PostRecv(&RecvWR{ID: 2, SGL: []mr.SGE{sge(bm, 0, 3000)}}))
	if w := p.poll(p.a, 1); w[0].Status != WCSuccess {
		t.Fatalf("WC %+v", w)
	}
	if w := p.poll(p.b, 1); w[0].ByteLen != 3000 || !bytes.Equal(abuf, bbuf) {
		t.Fatalf("recv %+v or data differs", w)
	}
}

func TestRNRRetryExceeded(t *testing.T) {
	o := defaultOpts()
	o.rnrRetry = 2
	o.minRNR = 14 // 1.28 ms
	p := newPair(t, o)
	am, _ := p.a.reg(t, 100, allAcc)
	start := p.now
	must(t, p.a.q.PostSend(&SendWR{ID: 1, Opcode: WRSend, SGL: []mr.SGE{sge(am, 0, 100)}}))
	must(t, p.a.q.PostSend(&SendWR{ID: 2, Opcode: WRSend, SGL: []mr.SGE{sge(am, 0, 100)}}))
	w := p.poll(p.a, 2)
	want := []WC{{ID: 1, Status: WCRNRRetryExcErr, Opcode: WCSend, QPN: 0x11}, {ID: 2, Status: WCWRFlushErr, Opcode: WCSend, QPN: 0x11}}
	if d := cmp.Diff(want, w); d != "" {
		t.Fatalf("WCs (-want +got):\n%s", d)
	}
	if got := p.a.q.Stats().Get(CtrRNRNAKsRecv); got != 3 {
		t.Errorf("RNR NAKs %d, want rnr_retry+1 = 3", got)
	}
	if el := p.now - start; el < 2*rnrTimerNs[14] {
		t.Errorf("gave up after %d ns, before two RNR waits", el)
	}
	if p.b.q.State() != RTS {
		t.Errorf("responder state %v, want RTS (RNR is no error there)", p.b.q.State())
	}
}

func TestDuplicateReadReplay(t *testing.T) {
	p := newPair(t, defaultOpts())
	// Lose the 2nd READ response MIDDLE once: the requester resends the rest
	// of the READ; the responder regenerates it from memory.
	p.f.drop = dropNth(p.b, wire.RCReadResponseMiddle, 2)
	am, abuf := p.a.reg(t, 10000, allAcc)
	bm, bbuf := p.b.reg(t, 10000, allAcc)
	fill(bbuf, 77)
	must(t, p.a.q.PostSend(&SendWR{ID: 1, Opcode: WRRDMARead, Flags: Signaled, SGL: []mr.SGE{sge(am, 0, 10000)},
		RemoteAddr: bm.Addr(), RKey: bm.RKey()}))
	if w := p.poll(p.a, 1); w[0].Status != WCSuccess || w[0].ByteLen != 10000 {
		t.Fatalf("WC %+v", w)
	}
	if !bytes.Equal(abuf, bbuf) {
		t.Fatal("READ data differs")
	}
	if got := p.b.q.Stats().Get(CtrReplays); got != 1 {
		t.Errorf("replays %d, want 1", got)
	}
	// And a READ whose only response is lost: timeout, whole replay.
	p.f.drop = dropNth(p.b, wire.RCReadResponseOnly, 1)
	fill(bbuf[:100], 5)
	must(t, p.a.q.PostSend(&SendWR{ID: 2, Opcode: WRRDMARead, Flags: Signaled, SGL: []mr.SGE{sge(am, 0, 100)},
		RemoteAddr: bm.Addr(), RKey: bm.RKey()}))
	if w := p.poll(p.a, 1); w[0].Status != WCSuccess {
		t.Fatalf("WC %+v", w)
	}
	if !bytes.Equal(abuf[:100], bbuf[:100]) || p.b.q.Stats().Get(CtrReplays) != 2 {
		t.Fatalf("second READ: data equal %v, replays %d", bytes.Equal(abuf[:100], bbuf[:100]), p.b.q.Stats().Get(CtrReplays))
	}
}

func TestAtomicExactlyOnceUnderDuplication(t *testing.T) {
	o := defaultOpts()
	o.f = faults{dup: 0.3, loss: 0.1, reorder: 0.1, seed: 42}
	p := newPair(t, o)
	// Also drop a third of the atomic ACKs: the requester resends, the
	// responder must replay, not add again.
	r := rand.New(rand.NewPCG(1, 2))
	p.f.drop = func(from *end, pk *wire.Packet) bool {
		return pk.BTH.Opcode == wire.RCAtomicAck && r.IntN(3) == 0
	}
	am, abuf := p.a.reg(t, 8*200, allAcc)
	bm, bbuf := p.b.reg(t, 8, allAcc)
	var want uint64
	for i := range 200 {
		add := uint64(i*i + 1)
		must(t, p.a.q.PostSend(&SendWR{ID: uint64(i), Opcode: WRAtomicFetchAdd, Flags: Signaled,
			SGL: []mr.SGE{sge(am, i*8, 8)}, RemoteAddr: bm.Addr(), RKey: bm.RKey(), CompareAdd: add}))
		want += add
		if i%16 == 15 {
			for _, w := range p.poll(p.a, 16) {
				if w.Status != WCSuccess {
					t.Fatalf("WC %+v", w)
				}
			}
		}
	}
	for _, w := range p.poll(p.a, 200%16) {
		if w.Status != WCSuccess {
			t.Fatalf("WC %+v", w)
		}
	}
	if got := binary.NativeEndian.Uint64(bbuf); got != want {
		t.Fatalf("counter = %d, want %d (an atomic ran twice or not at all)", got, want)
	}
	// Each fetched value is the running sum before that add.
	var sum uint64
	for i := range 200 {
		if got := binary.NativeEndian.Uint64(abuf[i*8:]); got != sum {
			t.Fatalf("fetch %d returned %d, want %d", i, got, sum)
		}
		sum += uint64(i*i + 1)
	}
	if p.b.q.Stats().Get(CtrReplays) == 0 {
		t.Error("no atomic replay happened: the test did not exercise duplicates")
	}
}

var faultSeeds = flag.Int("fault-seeds", 0, "run TestFaults with this many seeds (from 100)")

// TestFaults runs mixed traffic through loss, reorder, duplication and
// corruption and checks every byte and the atomic counter.
func TestFaults(t *testing.T) {
	seeds := []uint64{1, 2, 3, 4, 5, 6}
	rounds := 40
	if *long {
		seeds = []uint64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}
		rounds = 400
	}
	if *faultSeeds > 0 {
		seeds = seeds[:0]
		for i := range *faultSeeds {
			seeds = append(seeds, uint64(100+i))
		}
	}
	for _, seed := range seeds {
		for _, mtu := range []wire.MTU{wire.MTU256, wire.MTU1024, wire.MTU4096} {
			t.Run(fmt.Sprintf("seed%d/%v", seed, mtu), func(t *testing.T) {
				o := defaultOpts()
				o.mtu = mtu
				o.timeout = 8
				o.f = faults{loss: 0.05, reorder: 0.02, dup: 0.01, corrupt: 0.001, seed: seed}
				p := newPair(t, o)
				mixedTraffic(t, p, rounds, seed)
				t.Logf("A: retransmits %d timeouts %d seqNAKs %d; B: dups %d replays %d",
					p.a.q.Stats().Get(CtrRetransmits), p.a.q.Stats().Get(CtrTimeouts), p.a.q.Stats().Get(CtrSeqNAKsRecv),
					p.b.q.Stats().Get(CtrDuplicates), p.b.q.Stats().Get(CtrReplays))
			})
		}
	}
}

func mixedTraffic(t *testing.T, p *pair, rounds int, seed uint64) {
	const size = 256 << 10
	am, abuf := p.a.reg(t, size, allAcc)
	bm, bbuf := p.b.reg(t, size+8, allAcc)
	r := rand.New(rand.NewPCG(seed, 99))
	var counter uint64
	var trace []string // the last frames, for failures
	p.tap = func(from *end, f []byte) {
		var pk wire.Packet
		if pk.Decode(f) != nil {
			return
		}
		if len(trace) == 80 {
			trace = trace[1:]
		}
		trace = append(trace, fmt.Sprintf("%d %s %v psn %#x ackreq %v %v orig %d", p.now, from.name, pk.BTH.Opcode, pk.BTH.PSN, pk.BTH.AckReq, pk.AETH, pk.AtomicAck.Orig))
	}
	for round := range rounds {
		n := 1 + r.IntN(64<<10)
		off := r.IntN(size - 8 - (64 << 10) - n) // below the READ destination
		rd := size - 8 - n                       // READ destination
		fill(abuf[off:off+n], byte(round))
		fill(bbuf[size-n:size], byte(round+100))
		// WRITE a→b, READ b→a into another place, SEND, FETCH_ADD.
		must(t, p.b.q.PostRecv(&RecvWR{ID: uint64(round), SGL: []mr.SGE{sge(bm, 0, n)}}))
		wrs := []SendWR{
			{ID: 1, Opcode: WRRDMAWriteImm, Imm: uint32(round), SGL: splitSGL(am, off, n), RemoteAddr: bm.Addr() + uint64(size/2), RKey: bm.RKey()},
			{ID: 2, Opcode: WRRDMARead, SGL: []mr.SGE{sge(am, rd, n)}, RemoteAddr: bm.Addr() + uint64(size-n), RKey: bm.RKey()},
			{ID: 3, Opcode: WRAtomicFetchAdd, SGL: []mr.SGE{sge(am, size-8, 8)}, RemoteAddr: bm.Addr() + size, RKey: bm.RKey(), CompareAdd: uint64(round + 1)},
			{ID: 4, Opcode: WRSend, Flags: Signaled, SGL: splitSGL(am, off, n)},
		}
		counter += uint64(round + 1)
		// The WRITE target overlaps nothing else; the SEND lands after the WRITE_IMM's receive.
		must(t, p.b.q.PostRecv(&RecvWR{ID: uint64(round + 1<<20), SGL: []mr.SGE{sge(bm, size/4, n)}}))
		wantB := append([]byte(nil), abuf[off:off+n]...)
		wantA := append([]byte(nil), bbuf[size-n:size]...)
		for i := range wrs {
			if i == 3 {
				wrs[i].Flags |= Signaled
			}
			must(t, p.a.q.PostSend(&wrs[i]))
		}
		w := p.poll(p.a, 1)
		if w[0].Status != WCSuccess || w[0].ID != 4 {
			t.Fatalf("round %d: WC %+v\n%s\n%s\n%s", round, w, p.a.q.dump(), p.b.q.dump(), strings.Join(trace, "\n"))
		}
		wb := p.poll(p.b, 2)
		if wb[0].Status != WCSuccess || wb[0].Opcode != WCRecvRDMAWithImm || wb[0].ImmData != uint32(round) ||
			wb[1].Status != WCSuccess || wb[1].ByteLen != uint32(n) {
			t.Fatalf("round %d: recv WCs %+v", round, wb)
		}
		if !bytes.Equal(bbuf[size/2:size/2+n], wantB) || !bytes.Equal(bbuf[size/4:size/4+n], wantB) {
			t.Fatalf("round %d: WRITE or SEND data differs", round)
		}
		if !bytes.Equal(abuf[rd:rd+n], wantA) {
			t.Fatalf("round %d: READ data differs", round)
		}
		if got := binary.NativeEndian.Uint64(bbuf[size:]); got != counter {
			t.Fatalf("round %d: counter %d, want %d", round, got, counter)
		}
	}
}
