package qp

import (
	"github.com/xdproce/xdproce/roce/wire"
)

// Half-RDMA / half-FIFO operations of an OOO queue pair (docs/ooo.md,
// "Half-RDMA / half-FIFO"; seed 002's four variants): one side addresses
// memory directly, the other side's data goes through its receive queue,
// one ordinary receive WQE per packet, so that its user can scatter the
// packets into buffers that are not contiguous, or reduce them as they
// arrive.
//
//   - half send write (WROOOFIFOSend): this side's memory → OOO_FIFO_SEND
//     packets → the peer's receive queue (WCOOOFIFO per packet);
//   - half receive write (WROOOWrite pieces, OpTotal/OpOffset): several
//     work requests, each gathering its own buffers, make one OOO WRITE
//     that the peer places in its memory as any other;
//   - half send read (WROOOReadToFIFO): OOO_READ_REQ_TO_FIFO; the peer's
//     engine streams its memory back as OOO_FIFO_SEND into this side's
//     receive queue;
//   - half receive read (WROOOReadFromFIFO): OOO_READ_REQ_FROM_FIFO lands
//     in the peer's receive queue (WCOOOReadRequest); its user answers with
//     WROOOReadReply, from any pieces, and the answer is placed in this
//     side's memory as an OOO READ response.
//
// The receive rules of the context (stale_ctx, stale_tid, a new tid resets
// it, the duplicate bitmap) hold as for OOO_WRITE, so a packet consumes a
// receive WQE at most once per tid whatever the network duplicates. A
// packet that finds the receive queue empty is dropped unmarked (counted
// qp_dropped): the operation does not complete and the sender's retry (a
// larger tid) or a duplicate fills the gap.

// checkPiece checks a WRITE piece (OpTotal set) against the segment: it
// starts on a segment boundary, lies inside the operation and is whole
// segments unless it ends the operation.
func (q *QP) checkPiece(w *sendWQE) WCStatus {
	o := w.ooo
	if o.opTotal == 0 {
		return WCSuccess
	}
	seg := uint64(q.e.pmtu)
	end := o.opOff + w.length
	if o.opOff%seg != 0 || end > uint64(o.opTotal) || w.length%seg != 0 && end != uint64(o.opTotal) {
		return WCLocLenErr
	}
	return WCSuccess
}

// fifoReplyStart starts a WROOOReadReply: its context must hold the peer's
// OOO_READ_REQ_FROM_FIFO with the request's tid, not yet answered, for as
// many bytes; the packets go where the request said (its XRR, context and
// segment).
func (q *QP) fifoReplyStart(w *sendWQE) WCStatus {
	o := w.ooo
	s := q.ooo.pool.state(q.qpn, o.ctx)
	if s == nil || s.role != roleReadSource || !s.fifoReq || s.tid != o.tid {
		return WCLocQPOpErr
	}
	if w.length != uint64(s.total) {
		return WCLocLenErr
	}
	if w.inline == nil && !q.checkSGL(w.sgl, 0) {
		return WCLocProtErr
	}
	s.fifoReq = false
	o.remoteCtx, o.notify, o.tag, o.seg = s.peer, s.notify, s.tag, s.seg
	w.remoteAddr, w.rkey = s.base, s.rkey
	return WCSuccess
}

// oooFIFOSend takes one OOO_FIFO_SEND packet: a peer's half send write, or
// the response to this side's half send read. It goes into the next
// receive WQE, with a WCOOOFIFO completion saying where it lies in the
// operation.
func (q *QP) oooFIFOSend(p *wire.Packet, out Output) {
	x := &p.XRH
	s := q.oooState(x.Ctx)
	if s == nil {
		return
	}
	idx := p.BTH.PSN
	fresh, ok := q.oooDataTID(s, x, x.Initiator, true)
	if !ok {
		return
	}
	if fresh {
		s.start(roleTarget, x.TID, x.Total, uint32(x.Seg.Bytes()))
		s.fifo = true
		s.notify, s.peer, s.tag = x.Notify, x.Initiator, x.Tag
	}
	if idx >= s.npkts {
		q.stats.inc(CtrDropped)
		return
	}
	if s.bitmap[idx/64]&(1<<(idx%64)) != 0 {
		q.stats.inc(CtrDupIndex)
		return
	}
	if q.recvEmpty() {
		q.stats.inc(CtrDropped) // no receive WQE: lost, unmarked
		return
	}
	rqe := q.recvHead()
	n := uint64(len(p.Payload))
	if n > rqe.length {
		q.completeRecv(WCLocLenErr)
		return
	}
	if st := q.sglCopy(rqe.sgl(), 0, p.Payload, true); st != WCSuccess {
		q.completeRecv(st)
		return
	}
	s.mark(idx)
	s.placed++
	q.pushRecv(&WC{ID: rqe.id, Opcode: WCOOOFIFO, ByteLen: uint32(n), QPN: q.qpn, SrcQPN: q.e.attr.DestQPN,
		Ctx: x.Ctx, TID: x.TID, Tag: x.Tag, Offset: x.Offset(idx)})
	if s.placed == s.npkts {
		s.done = true
		q.oooPlaced(s, x.Ctx, out)
	}
}

// oooReadFromFIFO takes an OOO_READ_REQ_FROM_FIFO: a peer's half receive
// read. Ignored as an OOO_READ_REQ would be (context not held, tid not
// newer, busy, segment above the path MTU); otherwise (also when an older
// request on the context is still unanswered) it consumes a
// receive WQE (WCOOOReadRequest: Ctx, TID, ByteLen the bytes asked) and
// the context waits for this side's WROOOReadReply. With the receive queue
// empty it is dropped and the context left as it was.
func (q *QP) oooReadFromFIFO(p *wire.Packet) {
	x := &p.XRH
	s := q.oooState(x.Ctx)
	if s == nil {
		return
	}
	if int32(x.TID-s.tid) <= 0 {
		q.stats.inc(CtrStaleTID)
		return
	}
	// A request still waiting for this side's answer does not make the
	// context busy: a newer tid means the reader gave up on it, and the
	// answer to it will find the tid moved on (WCLocQPOpErr).
	if s.busy || (s.role == roleTarget || s.role == roleReadSink) && !s.done && !s.poisoned {
		q.stats.inc(CtrOOOReadBusy)
		return
	}
	seg := uint32(x.Seg.Bytes())
	if seg > q.e.pmtu || q.recvEmpty() {
		q.stats.inc(CtrDropped)
		return
	}
	rqe := q.recvHead()
	s.start(roleReadSource, x.TID, x.Total, seg)
	s.notify, s.peer, s.tag = x.Notify, x.Initiator, x.Tag
	s.base, s.rkey = p.XRR.VA, p.XRR.RKey
	s.fifoReq = true
	q.pushRecv(&WC{ID: rqe.id, Opcode: WCOOOReadRequest, ByteLen: x.Total, QPN: q.qpn, SrcQPN: q.e.attr.DestQPN,
		Ctx: x.Ctx, TID: x.TID, Tag: x.Tag})
}
