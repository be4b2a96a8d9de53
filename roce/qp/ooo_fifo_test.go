package qp

import (
	"testing"

	"github.com/xdproce/xdproce/roce/mr"
	"github.com/xdproce/xdproce/roce/wire"
)

// TestOOOFIFOEmptyQueue: an OOO_FIFO_SEND packet that finds the receive
// queue empty is dropped unmarked (qp_dropped): the operation waits, and a
// copy of the packet arriving once a receive is posted fills the gap and
// completes it. A packet already taken is a duplicate and takes no
// receive.
func TestOOOFIFOEmptyQueue(t *testing.T) {
	p := newOOOPair(t)
	fill(p.bufA[:3000], 9)
	for i := range 2 {
		must(t, p.b.q.PostRecv(&RecvWR{ID: uint64(i), SGL: []mr.SGE{sge(p.mb, 8192+i*1024, 1024)}}))
	}
	must(t, p.a.q.PostSend(&SendWR{ID: 1, Opcode: WROOOFIFOSend, SGL: []mr.SGE{sge(p.ma, 0, 3000)},
		Ctx: p.ca[0], RemoteCtx: p.cb[0], TID: 1, Notify: wire.NotifyInitiator}))
	w := sent(p.a, p.now)
	if len(w) != 3 {
		t.Fatalf("%d frames", len(w))
	}
	if out := hand(t, p.b, p.now, w...); len(out) != 0 {
		t.Fatalf("%d frames back with a packet missing", len(out))
	}
	if got := len(pollAll(p.b.cq)); got != 2 || p.b.q.Stats().Get(CtrDropped) != 1 {
		t.Fatalf("%d receive completions, qp_dropped %d; want 2 and 1", got, p.b.q.Stats().Get(CtrDropped))
	}
	must(t, p.b.q.PostRecv(&RecvWR{ID: 2, SGL: []mr.SGE{sge(p.mb, 8192+2*1024, 1024)}}))
	if out := hand(t, p.b, p.now, w[0]); len(out) != 0 || p.b.q.Stats().Get(CtrDupIndex) != 1 {
		t.Fatalf("a duplicate: %d frames back, dup_index %d", len(out), p.b.q.Stats().Get(CtrDupIndex))
	}
	out := hand(t, p.b, p.now, w[2])
	wcs := pollAll(p.b.cq)
	if len(out) != 1 || len(wcs) != 1 || wcs[0].ID != 2 || wcs[0].Offset != 2048 || wcs[0].ByteLen != 952 {
		t.Fatalf("the missing packet: %d frames back, completions %+v", len(out), wcs)
	}
}

// TestOOOFIFOReadRequestRetry: a half receive read left unanswered is
// replaced by the reader's retry (a larger tid): a second request
// completion, and the answer to the first fails (WCLocQPOpErr) while the
// answer to the second goes out.
func TestOOOFIFOReadRequestRetry(t *testing.T) {
	p := newOOOPair(t)
	must(t, p.b.q.PostRecv(&RecvWR{ID: 1}))
	must(t, p.b.q.PostRecv(&RecvWR{ID: 2}))
	var reqs [][]byte
	for tid := uint32(1); tid <= 2; tid++ {
		must(t, p.a.q.PostSend(&SendWR{ID: uint64(tid), Opcode: WROOOReadFromFIFO, SGL: []mr.SGE{sge(p.ma, 0, 100)},
			SinkRKey: p.ma.RKey(), Ctx: p.ca[0], RemoteCtx: p.cb[0], TID: tid, Notify: wire.NotifyInitiator}))
		reqs = append(reqs, sent(p.a, p.now)...)
	}
	hand(t, p.b, p.now, reqs...)
	wcs := pollAll(p.b.cq)
	if len(wcs) != 2 || wcs[0].TID != 1 || wcs[1].TID != 2 || wcs[1].Opcode != WCOOOReadRequest {
		t.Fatalf("request completions %+v", wcs)
	}
	for tid := uint32(1); tid <= 2; tid++ {
		must(t, p.b.q.PostSend(&SendWR{ID: 10 + uint64(tid), Opcode: WROOOReadReply, Flags: Signaled,
			SGL: []mr.SGE{sge(p.mb, 0, 100)}, Ctx: p.cb[0], TID: tid}))
	}
	out := sent(p.b, p.now)
	wcs = pollAll(p.b.cq)
	if len(out) != 1 || len(wcs) != 2 || wcs[0].Status != WCLocQPOpErr || wcs[1].Status != WCSuccess {
		t.Fatalf("%d frames; completions %+v", len(out), wcs)
	}
}
