package roce_test

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/xdproce/xdproce/link/pipe"
	"github.com/xdproce/xdproce/roce"
)

// fifoPipe is two connected OOO queue pairs over a pipe that reorders and
// duplicates (4096-byte segments).
func fifoPipe(t *testing.T, seed uint64) (x, y *side, cx, cy []roce.Ctx) {
	t.Helper()
	f := pipe.Faults{Reorder: 0.3, Duplicate: 0.1}
	p, _, _ := newPipeDevices(t, pipe.Config{MTU: 4200, Seed: seed, AtoB: f, BtoA: f})
	return connectOOO(t, p, connCfg{bufSize: 2 << 20}, 8)
}

// postRecvs posts n receive work requests of 4096 bytes at s's buffer from
// offset base; ID i is the one at base + i × 4096.
func postRecvs(t *testing.T, s *side, base, n int) {
	t.Helper()
	for i := range n {
		if err := s.qp.PostRecv(roce.RecvWR{ID: uint64(i), SGL: []roce.SGE{s.sge(base+i*4096, 4096)}}); err != nil {
			t.Fatal(err)
		}
	}
}

// gather takes the WCOOOFIFO completions of one operation of total bytes
// from cq and copies each packet from its receive buffer (at base) to its
// offset in the returned slice; it fails on any other completion.
func gather(t *testing.T, s *side, base, total int) ([]byte, []roce.WC) {
	t.Helper()
	out := make([]byte, total)
	var wcs []roce.WC
	for got := 0; got < total; {
		wc := waitWC(t, s.rcq)
		if wc.Status != roce.WCSuccess || wc.Opcode != roce.WCOOOFIFO {
			t.Fatalf("receive completion %+v, want WCOOOFIFO", wc)
		}
		b := s.buf[base+int(wc.ID)*4096:][:wc.ByteLen]
		copy(out[wc.Offset:], b)
		got += int(wc.ByteLen)
		wcs = append(wcs, wc)
	}
	return out, wcs
}

// TestOOOHalfSendWrite: a half send write (WROOOFIFOSend) of 10,000 bytes
// arrives in the target's receive queue as three WCOOOFIFO completions,
// one per packet, whose offsets put it back together; the target then
// gets its target completion and the initiator its delivered one. A
// duplicated packet consumes no second receive.
func TestOOOHalfSendWrite(t *testing.T) {
	x, y, cx, cy := fifoPipe(t, 3)
	const n = 10_000
	fill(x.buf[:n], 5)
	postRecvs(t, y, 0, 8)
	if err := x.qp.PostSend(roce.SendWR{ID: 1, Opcode: roce.WROOOFIFOSend, SGL: []roce.SGE{x.sge(0, n)},
		Ctx: cx[0], RemoteCtx: cy[0], TID: 1, Notify: roce.NotifyBoth, Tag: 9}); err != nil {
		t.Fatal(err)
	}
	got, wcs := gather(t, y, 0, n)
	if !bytes.Equal(got, x.buf[:n]) || len(wcs) != 3 {
		t.Fatalf("%d packets put together differ", len(wcs))
	}
	for _, wc := range wcs {
		if wc.Ctx != cy[0] || wc.TID != 1 || wc.Tag != 9 || wc.Offset%4096 != 0 {
			t.Fatalf("fifo completion %+v", wc)
		}
	}
	if wc := waitWC(t, y.rcq); wc.Opcode != roce.WCOOOTarget || wc.ByteLen != n || wc.Ctx != cy[0] {
		t.Fatalf("target completion %+v", wc)
	}
	if wc := waitWC(t, x.scq); wc.Opcode != roce.WCOOODelivered || wc.ID != 1 || wc.ByteLen != n {
		t.Fatalf("delivered completion %+v", wc)
	}
	if k := y.rcq.Len(); k != 0 {
		t.Fatalf("%d more receive completions (a duplicate consumed a receive)", k)
	}
}

// TestOOOHalfReceiveWrite: three work requests, gathering from pieces
// that are not contiguous (one of them inline), make one OOO WRITE: the
// target places it in its memory as any other and completes it once; the
// initiator gets one delivered completion.
func TestOOOHalfReceiveWrite(t *testing.T) {
	x, y, cx, cy := fifoPipe(t, 4)
	fill(x.buf[:1<<20], 7)
	const total = 3*4096 + 100
	pieces := []struct {
		off   uint64
		sgl   []roce.SGE
		flags roce.SendFlags
	}{
		{4096, []roce.SGE{x.sge(100_000, 3000), x.sge(300_000, 4096+1096)}, 0},
		{0, []roce.SGE{x.sge(500_000, 4096)}, 0},
		{3 * 4096, []roce.SGE{x.sge(700_000, 100)}, roce.Inline},
	}
	want := make([]byte, total)
	for i, pc := range pieces {
		at := pc.off
		for _, g := range pc.sgl {
			at += uint64(copy(want[at:], x.buf[g.Addr-x.mr.Addr():][:g.Length]))
		}
		if err := x.qp.PostSend(roce.SendWR{ID: uint64(i + 1), Opcode: roce.WROOOWrite, Flags: pc.flags, SGL: pc.sgl,
			RemoteAddr: y.mr.Addr() + 1000 + pc.off, RKey: y.mr.RKey(), Ctx: cx[1], RemoteCtx: cy[1], TID: 1,
			Notify: roce.NotifyBoth, OpTotal: total, OpOffset: pc.off}); err != nil {
			t.Fatal(err)
		}
	}
	if wc := waitWC(t, y.rcq); wc.Opcode != roce.WCOOOTarget || wc.ByteLen != total || wc.Ctx != cy[1] {
		t.Fatalf("target completion %+v", wc)
	}
	if !bytes.Equal(y.buf[1000:1000+total], want) {
		t.Fatal("the pieces placed differ")
	}
	if wc := waitWC(t, x.scq); wc.Opcode != roce.WCOOODelivered || wc.ByteLen != total {
		t.Fatalf("delivered completion %+v", wc)
	}
	// A piece off the segment grid fails at the initiator.
	if err := x.qp.PostSend(roce.SendWR{ID: 9, Opcode: roce.WROOOWrite, SGL: []roce.SGE{x.sge(0, 10)},
		RemoteAddr: y.mr.Addr(), RKey: y.mr.RKey(), RemoteCtx: cy[1], TID: 2, OpTotal: 100, OpOffset: 7}); err != nil {
		t.Fatal(err)
	}
	if wc := waitWC(t, x.scq); wc.Status != roce.WCLocLenErr || wc.ID != 9 {
		t.Fatalf("misaligned piece: %+v", wc)
	}
}

// TestOOOHalfSendRead: a half send read (WROOOReadToFIFO) of 9,000 bytes:
// the source streams them from its memory as OOO_FIFO_SEND into the
// reader's receive queue; then the delivered completion, and the source's
// target completion (NotifyBoth).
func TestOOOHalfSendRead(t *testing.T) {
	x, y, cx, cy := fifoPipe(t, 5)
	const n = 9000
	fill(y.buf[50_000:50_000+n], 11)
	postRecvs(t, x, 1<<20, 8)
	if err := x.qp.PostSend(roce.SendWR{ID: 3, Opcode: roce.WROOOReadToFIFO, RemoteAddr: y.mr.Addr() + 50_000,
		RKey: y.mr.RKey(), OpTotal: n, Ctx: cx[2], RemoteCtx: cy[2], TID: 1, Notify: roce.NotifyBoth}); err != nil {
		t.Fatal(err)
	}
	got, wcs := gather(t, x, 1<<20, n)
	if !bytes.Equal(got, y.buf[50_000:50_000+n]) || len(wcs) != 3 {
		t.Fatalf("%d packets put together differ", len(wcs))
	}
	if wc := waitWC(t, x.scq); wc.Opcode != roce.WCOOODelivered || wc.ID != 3 || wc.ByteLen != n {
		t.Fatalf("delivered completion %+v", wc)
	}
	if wc := waitWC(t, y.rcq); wc.Opcode != roce.WCOOOTarget || wc.Ctx != cy[2] {
		t.Fatalf("source's completion %+v", wc)
	}
}

// TestOOOHalfReceiveRead: a half receive read (WROOOReadFromFIFO): the
// request lands in the source's receive queue (WCOOOReadRequest, the bytes
// asked); the source's user answers with WROOOReadReply from three pieces
// that are not contiguous; the answer is placed in the reader's sink. An
// answer of the wrong length, or to a context without a request, fails.
func TestOOOHalfReceiveRead(t *testing.T) {
	x, y, cx, cy := fifoPipe(t, 6)
	const n = 9000
	postRecvs(t, y, 1<<20, 2)
	if err := x.qp.PostSend(roce.SendWR{ID: 4, Opcode: roce.WROOOReadFromFIFO, SGL: []roce.SGE{x.sge(20_000, n)},
		SinkRKey: x.mr.RKey(), Ctx: cx[3], RemoteCtx: cy[3], TID: 1, Notify: roce.NotifyBoth}); err != nil {
		t.Fatal(err)
	}
	req := waitWC(t, y.rcq)
	if req.Opcode != roce.WCOOOReadRequest || req.Ctx != cy[3] || req.TID != 1 || req.ByteLen != n || req.ID != 0 {
		t.Fatalf("request completion %+v", req)
	}
	fill(y.buf[:200_000], 13)
	sgl := []roce.SGE{y.sge(150_000, 5000), y.sge(10, 1), y.sge(60_000, n-5001)}
	var want []byte
	for _, g := range sgl {
		want = append(want, y.buf[g.Addr-y.mr.Addr():][:g.Length]...)
	}
	if err := y.qp.PostSend(roce.SendWR{ID: 5, Opcode: roce.WROOOReadReply, SGL: sgl[:2], Ctx: req.Ctx, TID: req.TID}); err != nil {
		t.Fatal(err)
	}
	if wc := waitWC(t, y.scq); wc.Status != roce.WCLocLenErr || wc.ID != 5 {
		t.Fatalf("a reply of the wrong length: %+v", wc)
	}
	if err := y.qp.PostSend(roce.SendWR{ID: 6, Opcode: roce.WROOOReadReply, SGL: sgl, Ctx: req.Ctx, TID: req.TID,
		Flags: roce.Signaled}); err != nil {
		t.Fatal(err)
	}
	if wc := waitWC(t, x.scq); wc.Opcode != roce.WCOOODelivered || wc.ID != 4 || wc.ByteLen != n {
		t.Fatalf("delivered completion %+v", wc)
	}
	if !bytes.Equal(x.buf[20_000:20_000+n], want) {
		t.Fatal("the reply placed differs")
	}
	if wc := waitWC(t, y.scq); wc.Status != roce.WCSuccess || wc.ID != 6 {
		t.Fatalf("reply's local completion %+v", wc)
	}
	if wc := waitWC(t, y.rcq); wc.Opcode != roce.WCOOOTarget || wc.Ctx != cy[3] {
		t.Fatalf("source's completion %+v", wc)
	}
	if err := y.qp.PostSend(roce.SendWR{ID: 7, Opcode: roce.WROOOReadReply, SGL: sgl, Ctx: cy[4], TID: 1}); err != nil {
		t.Fatal(err)
	}
	if wc := waitWC(t, y.scq); wc.Status != roce.WCLocQPOpErr || wc.ID != 7 {
		t.Fatalf("a reply without a request: %+v", wc)
	}
}

// TestOOOHalfReduce: three senders' vectors of 20,000 uint64s (three
// contexts), sent by half send write through a pipe that reorders 30 %
// and duplicates 10 % of the frames, are summed on arrival from the
// receive queue (AddUint64): the sum equals the one computed locally, and
// every packet is applied exactly once.
func TestOOOHalfReduce(t *testing.T) {
	for seed := range uint64(4) {
		x, y, cx, cy := fifoPipe(t, 20+seed)
		const words, senders = 20_000, 3
		const n = words * 8
		want := make([]uint64, words)
		for s := range senders {
			v := x.buf[s*n : (s+1)*n]
			for i := range words {
				e := uint64(i)*0x9E3779B97F4A7C15 + uint64(s)<<60 + seed
				binary.LittleEndian.PutUint64(v[8*i:], e)
				want[i] += e
			}
		}
		const rbase, nrecv = 1 << 20, 128 // room for every packet: one that finds the queue empty is lost
		postRecvs(t, y, rbase, nrecv)
		for s := range senders {
			if err := x.qp.PostSend(roce.SendWR{ID: uint64(s), Opcode: roce.WROOOFIFOSend, SGL: []roce.SGE{x.sge(s*n, n)},
				Ctx: cx[s], RemoteCtx: cy[s], TID: 1, Notify: roce.NotifyBoth}); err != nil {
				t.Fatal(err)
			}
		}
		acc := make([]uint64, words)
		pkts, done := 0, 0
		for done < senders {
			wc := waitWC(t, y.rcq)
			switch {
			case wc.Status != roce.WCSuccess:
				t.Fatalf("completion %+v", wc)
			case wc.Opcode == roce.WCOOOTarget:
				done++
				continue
			case wc.Opcode != roce.WCOOOFIFO:
				t.Fatalf("completion %+v", wc)
			}
			b := y.buf[rbase+int(wc.ID)*4096:][:wc.ByteLen]
			if err := roce.AddUint64(acc, wc.Offset, b); err != nil {
				t.Fatal(err)
			}
			pkts++
			if err := y.qp.PostRecv(roce.RecvWR{ID: wc.ID, SGL: []roce.SGE{y.sge(rbase+int(wc.ID)*4096, 4096)}}); err != nil {
				t.Fatal(err)
			}
		}
		for i := range want {
			if acc[i] != want[i] {
				t.Fatalf("seed %d: element %d: %#x, want %#x", seed, i, acc[i], want[i])
			}
		}
		per := (n + 4095) / 4096
		if st := y.qp.Stats().OOO; pkts != senders*per || st.DupIndex == 0 {
			t.Fatalf("seed %d: %d packets applied (want %d), %d duplicates dropped", seed, pkts, senders*per, st.DupIndex)
		}
	}
	if err := roce.AddUint64(make([]uint64, 2), 8, make([]byte, 16)); err == nil {
		t.Error("a run past the vector's end was added")
	}
	if err := roce.AddUint64(make([]uint64, 2), 4, make([]byte, 8)); err == nil {
		t.Error("a misaligned offset was accepted")
	}
}
