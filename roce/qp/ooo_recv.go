package qp

import (
	"github.com/xdproce/xdproce/roce/mr"
	"github.com/xdproce/xdproce/roce/wire"
)

// The receive rules of an OOO queue pair (docs/ooo.md), for one packet at a
// time in any order: a context the QP does not hold with the packet's key
// drops it (stale_ctx); a tid older than the context's drops it
// (stale_tid); a newer one starts a new operation on the context; the
// current one is placed unless its index already was (dup_index).

// oooReceive handles one OOO packet (Receive, in RTR or RTS). Completions
// it produces go out at once when a transmit buffer is free, else from the
// next Progress.
func (q *QP) oooReceive(p *wire.Packet, out Output) {
	switch p.BTH.Opcode {
	case wire.OOOWrite:
		q.oooPlace(p, out)
	case wire.OOOReadReq:
		q.oooReadRequest(p)
	case wire.OOOCompletion:
		q.oooCompletion(p)
	case wire.OOO3PReadReq:
		q.ooo3PReadRequest(p)
	case wire.OOO3PWrite:
		q.ooo3PPlace(p, out)
	case wire.OOOReadReqToFIFO:
		q.oooReadRequest(p)
	case wire.OOOFIFOSend:
		q.oooFIFOSend(p, out)
	case wire.OOOReadReqFromFIFO:
		q.oooReadFromFIFO(p)
	default:
		q.stats.inc(CtrDropped)
	}
}

// oooState returns the state of the context x names, counting stale_ctx when
// the QP does not hold it with x's key.
func (q *QP) oooState(x wire.Ctx) *ctxState {
	s := q.ooo.pool.state(q.qpn, x)
	if s == nil {
		q.stats.inc(CtrStaleCtx)
	}
	return s
}

// oooPlace places one OOO_WRITE packet: a peer's WRITE, or the response to
// this side's READ.
func (q *QP) oooPlace(p *wire.Packet, out Output) { q.oooPlaceFor(p, p.XRH.Initiator, out) }

// oooPlaceFor places one data packet whose completion goes to the context
// peer: the initiator's (OOO_WRITE) or the controller's (OOO_3P_WRITE).
func (q *QP) oooPlaceFor(p *wire.Packet, peer wire.Ctx, out Output) {
	x := &p.XRH
	s, g := q.oooPlaceState(x.Ctx)
	if s == nil {
		return
	}
	idx := p.BTH.PSN
	off := x.Offset(idx)
	fresh, ok := q.oooDataTID(s, x, peer, false)
	if !ok {
		return
	}
	if fresh {
		// The first packet of a new operation: the context is reset, the
		// operation's place fixed by this packet (every later one must
		// agree).
		if p.RETH.VA < off {
			q.stats.inc(CtrDropped)
			return
		}
		s.start(roleTarget, x.TID, x.Total, uint32(x.Seg.Bytes()))
		s.base, s.rkey = p.RETH.VA-off, p.RETH.RKey
		s.notify, s.peer, s.tag = x.Notify, peer, x.Tag
	}
	if idx >= s.npkts {
		q.stats.inc(CtrDropped)
		return
	}
	if p.RETH.VA != s.base+off || p.RETH.RKey != s.rkey {
		// Outside the operation's place, which its first packet fixed:
		// as good as a bad rkey.
		q.oooProtection(s, x.Ctx)
		return
	}
	if s.bitmap[idx/64]&(1<<(idx%64)) != 0 {
		q.stats.inc(CtrDupIndex)
		return
	}
	m, err := q.oooDest(g, p)
	if err != nil {
		q.oooProtection(s, x.Ctx)
		return
	}
	copy(m, p.Payload)
	s.mark(idx)
	s.placed++
	if s.placed == s.npkts {
		s.done = true
		q.oooPlaced(s, x.Ctx, out)
	}
}

// oooDataTID applies the transaction id rules to a data packet (OOO_WRITE,
// or OOO_FIFO_SEND with fifo) for context s from peer (the context its
// completion goes to): an older tid is stale; a newer one starts a new
// operation (fresh: the caller resets s); the current one must be an
// operation placing data here the same way (memory or receive queue), not
// yet whole or poisoned, that the packet agrees with. ok is false when the
// packet is dropped (and counted).
func (q *QP) oooDataTID(s *ctxState, x *wire.XRH, peer wire.Ctx, fifo bool) (fresh, ok bool) {
	switch d := int32(x.TID - s.tid); {
	case d < 0:
		q.stats.inc(CtrStaleTID)
		return false, false
	case d > 0:
		return true, true
	}
	switch {
	case s.fifo != fifo || s.role != roleTarget && s.role != roleReadSink:
		q.stats.inc(CtrDropped)
	case s.done:
		q.stats.inc(CtrDupIndex)
	case s.poisoned || x.Total != s.total || uint32(x.Seg.Bytes()) != s.seg || peer != s.peer:
		q.stats.inc(CtrDropped)
	default:
		return false, true
	}
	return false, false
}

// oooProtection handles a protection error on s's current operation: the
// packet is dropped, the tid never completes, the target's user learns it
// from a WCRemAccessErr completion on the receive CQ (once per tid), and
// the QP stays as it was.
func (q *QP) oooProtection(s *ctxState, x wire.Ctx) {
	q.stats.inc(CtrOOOProtErrors)
	if s.poisoned {
		return
	}
	s.poisoned = true
	q.rcq.push(&WC{Status: WCRemAccessErr, Opcode: WCOOOTarget, QPN: q.qpn, SrcQPN: q.e.attr.DestQPN,
		Ctx: x, TID: s.tid, Tag: s.tag})
}

// oooPlaced produces the completions of an operation placed whole on this
// side: a peer's WRITE (target completion, completion packet to the
// initiator) or this side's READ (delivered completion, completion packet
// to the source), as its notify asks.
func (q *QP) oooPlaced(s *ctxState, x wire.Ctx, out Output) {
	who := s.notify.Who()
	if s.role == roleReadSink {
		if who&wire.NotifyInitiator != 0 {
			q.oooDelivered(s, x)
		}
		if who&wire.NotifyTarget != 0 {
			q.oooSendCompletion(s, x, out)
		}
		return
	}
	if who&wire.NotifyTarget != 0 {
		q.oooTargetWC(s, x)
	}
	if who&wire.NotifyInitiator != 0 {
		q.oooSendCompletion(s, x, out)
	}
}

// oooTargetWC tells this side's user that a peer's operation on context x
// completed: a WCOOOTarget completion on the receive CQ (no receive work
// request is used).
func (q *QP) oooTargetWC(s *ctxState, x wire.Ctx) {
	q.rcq.push(&WC{Opcode: WCOOOTarget, ByteLen: s.total, QPN: q.qpn, SrcQPN: q.e.attr.DestQPN,
		Ctx: x, TID: s.tid, Tag: s.tag})
}

// oooDelivered completes this side's operation on context x: a
// WCOOODelivered completion on the send CQ with the work request's id.
func (q *QP) oooDelivered(s *ctxState, x wire.Ctx) {
	q.condComponentDone(s)
	q.scq.push(&WC{ID: s.wrID, Opcode: WCOOODelivered, ByteLen: s.total, QPN: q.qpn, Ctx: x, TID: s.tid, Tag: s.tag})
}

// oooReadRequest serves an OOO_READ_REQ (or OOO_READ_REQ_TO_FIFO, answered
// with OOO_FIFO_SEND packets): the response goes to the initiator's
// context.
func (q *QP) oooReadRequest(p *wire.Packet) { q.oooServeRead(p, p.XRH.Initiator, nil, nil) }

// oooServeRead serves a READ request whose response goes to the context
// peer, at the connected peer (k nil) or at the admitted sink k with the
// controller ctl (third party): ignored (no answer at all) for a context
// not held, a tid not newer than the context's or a busy context; refused
// with a protection error for a source the rkey does not cover; otherwise
// queued, the response streaming from Progress.
func (q *QP) oooServeRead(p *wire.Packet, peer wire.Ctx, k *sink, ctl *wire.XTP) {
	x := &p.XRH
	s := q.oooState(x.Ctx)
	if s == nil {
		return
	}
	if int32(x.TID-s.tid) <= 0 {
		q.stats.inc(CtrStaleTID)
		return
	}
	if s.busy || (s.role == roleTarget || s.role == roleReadSink) && !s.done && !s.poisoned {
		q.stats.inc(CtrOOOReadBusy)
		return
	}
	seg := uint32(x.Seg.Bytes())
	if seg > q.e.pmtu {
		q.stats.inc(CtrDropped) // the response would not fit the path
		return
	}
	s.start(roleReadSource, x.TID, x.Total, seg)
	s.notify, s.peer, s.tag = x.Notify, peer, x.Tag
	if k != nil {
		s.sink, s.ctl = k, *ctl
	}
	s.srcVA, s.srcKey = p.RETH.VA, p.RETH.RKey
	s.base, s.rkey = p.XRR.VA, p.XRR.RKey
	s.fifo = p.BTH.Opcode == wire.OOOReadReqToFIFO // the response goes to the reader's receive queue
	if q.e.attr.Access&mr.RemoteRead == 0 {
		q.oooProtection(s, x.Ctx)
		return
	}
	if _, err := q.tbl.Remote(q.pd, q, s.srcKey, s.srcVA, uint64(s.total), mr.RemoteRead); err != nil {
		q.oooProtection(s, x.Ctx)
		return
	}
	if !q.ooo.queue(oooWork{from: x.Ctx, tid: x.TID}) {
		q.stats.inc(CtrOOOWorkOverflow) // not busy: a request with a larger tid may try again
		return
	}
	s.busy = true
}

// oooCompletion takes an OOO_COMPLETION: the proof that this side's WRITE
// (or the response of a READ it served) was placed whole.
func (q *QP) oooCompletion(p *wire.Packet) {
	x := &p.XRH
	if IsGroupCtx(x.Initiator) {
		q.oooGroupAck(p)
		return
	}
	s := q.oooState(x.Ctx)
	if s == nil {
		return
	}
	if s.role != roleWriteInit && s.role != roleReadSource || x.TID != s.tid {
		q.stats.inc(CtrStaleTID)
		return
	}
	if x.Initiator != s.peer {
		q.stats.inc(CtrStaleCtx)
		return
	}
	if s.acked {
		q.stats.inc(CtrDupIndex)
		return
	}
	s.acked = true
	q.stats.inc(CtrOOOCompletionsRecv)
	if s.role == roleWriteInit {
		q.oooDelivered(s, x.Ctx)
	} else {
		q.oooTargetWC(s, x.Ctx)
	}
}
