package qp

import (
	"github.com/xdproce/xdproce/roce/mr"
	"github.com/xdproce/xdproce/roce/wire"
)

// The responder executes incoming requests (IBA 9.7; rxe_resp.c):
// a validation pipeline (PSN, opcode sequence, operation allowed, resources,
// lengths, rkey), then execution, completion and acknowledgement. Errors map
// to the responder classes of IBA 9.9.3: class B (PSN sequence error: NAK,
// no state change), class C (invalid request, remote access, remote
// operational error: NAK, receive WQE in error, QP to Error), class D (drop
// silently), class J (SEND with Invalidate of an rkey the responder may not
// withdraw: the receive WQE completes in error, QP to Error, no NAK), and RNR
// (no receive WQE: RNR NAK, the requester retries). This file holds the
// pipeline; responder_replay.go the READ/atomic ring and duplicates,
// responder_tx.go the transmit half (READ responses, atomic ACKs, ACK/NAK),
// responder_ud.go UD receives.

// ACK at least every this many packets without AckReq: ackEvery as rxe's
// requester asks (RXE_MAX_PKT_PER_ACK), srAckEvery with selective repeat,
// whose requester (an xdproce) asks at least that often (wantAckReq).
const (
	ackEvery   = 64
	srAckEvery = srAckReqEvery
)

type seqKind uint8

const (
	seqNone  seqKind = iota // between messages
	seqSend                 // inside a multi-packet SEND
	seqWrite                // inside a multi-packet RDMA WRITE
)

type responder struct {
	epsn    uint32 // expected PSN
	msn     uint32 // message sequence number (24 bits)
	nakSent bool   // a PSN/RNR NAK went out: drop out-of-order packets until epsn comes
	lastWQE bool   // on an SRQ: last WQE reached counted since the last reset
	seq     seqKind
	rqHead  uint32 // next receive WQE (free-running)
	recvOff uint64 // bytes of the current SEND placed in rq[rqHead]
	wVA     uint64 // current RDMA WRITE
	wRKey   uint32
	wLen    uint64
	wOff    uint64
	unacked uint32
	ack     pendingAck

	// The last max_dest_rd_atomic READ/atomic requests, a ring (nil until
	// the first such request).
	res     []resource
	resNext int
	// tooMany: a request arrived beyond max_dest_rd_atomic (at PSN
	// tooManyPSN); requests are dropped until the responses queued before
	// it are out, then the QP fails with a NAK (class C).
	tooMany    bool
	tooManyPSN uint32
	txq        [resSlots]uint8 // resources waiting to transmit, FIFO
	txHead     int
	txN        int

	sr srHold // selective repeat: requests held past a hole (sr_resp.go)
}

func (r *responder) reset(rqMark uint32) {
	res, sr := r.res, r.sr
	*r = responder{rqHead: rqMark, res: res, sr: sr}
	clear(r.res)
	r.sr.reset()
}

// start readies the responder for RTR: the first request expected is psn.
func (r *responder) start(psn uint32) { r.epsn = psn }

// respState is a stage of the responder.
type respState uint8

const (
	respCheckPSN      respState = iota // expected, duplicate or ahead
	respCheckOpSeq                     // FIRST/MIDDLE/LAST order
	respCheckOpValid                   // the QP allows the operation
	respCheckResource                  // receive WQE (SEND, WRITE with immediate), READ/atomic slot
	respCheckLength                    // payload length against the path MTU and the RETH
	respCheckRKey                      // the memory a WRITE/READ/atomic names
	respExecute                        // place data, run the atomic, queue READ responses
	respAcknowledge                    // coalesced ACK
	respDuplicate                      // a request already executed
	respUD                             // a UD SEND: Q_Key, receive WQE, GRH area
	respErrPSN                         // class B: PSN sequence error NAK, once
	respErrRNR                         // no receive WQE: RNR NAK
	respErrInvalid                     // class C: invalid request NAK
	respErrAccess                      // class C: remote access error NAK
	respErrOp                          // class C: remote operational error NAK
	respErrInvalidate                  // class J: SEND with Invalidate of a key it may not withdraw
	respErrTooMany                     // class C: more READ/atomic requests than max_dest_rd_atomic
	respDrop                           // class D: drop silently
	respDone
)

var respStateNames = [...]string{"CHECK_PSN", "CHECK_OP_SEQ", "CHECK_OP_VALID", "CHECK_RESOURCE",
	"CHECK_LENGTH", "CHECK_RKEY", "EXECUTE", "ACKNOWLEDGE", "DUPLICATE", "UD", "ERR_PSN", "ERR_RNR",
	"ERR_INVALID_REQUEST", "ERR_REMOTE_ACCESS", "ERR_REMOTE_OP", "ERR_INVALIDATE_RKEY", "ERR_TOO_MANY_RDMA_ATM_REQ", "DROP", "DONE"}

func (s respState) String() string { return enumName(respStateNames[:], int(s), "respState") }

// respAction is what the responder loop does after a stage.
type respAction uint8

const (
	respActNone respAction = iota
	respActAck             // queue an ACK of k.p's PSN
	respActNAK             // queue k.syndrome at k.nakPSN
	respActFail            // class C: NAK, receive WQE in error, QP to Error
)

// respPkt is the scratch of one responder run.
type respPkt struct {
	p        *wire.Packet
	info     *wire.OpInfo
	syndrome uint8
	nakPSN   uint32
	status   WCStatus // receive WQE status on a class C error
}

func (q *QP) respond(p *wire.Packet, info *wire.OpInfo) {
	q.respondOne(p, info)
	if q.resp.sr.n > 0 {
		q.srDrain()
	}
}

// respondOne runs one request through the pipeline.
func (q *QP) respondOne(p *wire.Packet, info *wire.OpInfo) {
	if q.resp.tooMany {
		q.stats.inc(CtrDropped) // the QP fails once the responses before it are out
		return
	}
	k := respPkt{p: p, info: info}
	st := respCheckPSN
	if q.typ == UD {
		st = respUD
	}
	for st != respDone {
		var act respAction
		switch st {
		case respCheckPSN:
			st = q.respCheckPSN(&k)
		case respCheckOpSeq:
			st = q.respCheckOpSeq(&k)
		case respCheckOpValid:
			st = q.respCheckOpValid(&k)
		case respCheckResource:
			st = q.respCheckResource(&k)
		case respCheckLength:
			st = q.respCheckLength(&k)
		case respCheckRKey:
			st = q.respCheckRKey(&k)
		case respExecute:
			st = q.respExecute(&k)
		case respAcknowledge:
			st, act = q.respAcknowledge(&k)
		case respDuplicate:
			st, act = q.respDuplicate(&k)
		case respUD:
			st = q.respUD(&k)
		case respErrPSN:
			q.resp.nakSent = true
			q.stats.inc(CtrSeqNAKsSent)
			k.syndrome, k.nakPSN = wire.NAKPSNSeqErr, q.resp.epsn
			st, act = respDone, respActNAK
		case respErrRNR:
			if q.typ != RC {
				st = respDrop // UC: no receive WQE loses the message
				break
			}
			q.resp.nakSent = true
			q.stats.inc(CtrRNRNAKsSent)
			k.syndrome, k.nakPSN = wire.RNRSyndrome(q.e.attr.MinRNRTimer), p.BTH.PSN
			st, act = respDone, respActNAK
		case respErrInvalid, respErrAccess, respErrOp:
			if q.typ != RC {
				st = respDrop // UC: errors drop the message (IBA 9.9.3, class D)
				break
			}
			k.syndrome = wire.NAKInvalidRequest
			if st == respErrAccess {
				k.syndrome = wire.NAKRemoteAccess
			} else if st == respErrOp {
				k.syndrome = wire.NAKRemoteOp
			}
			k.nakPSN = p.BTH.PSN
			st, act = respDone, respActFail
		case respErrInvalidate:
			// Class J (IBA 9.9.3, Base Memory Management Extensions), as
			// rxe does it: no NAK; the request's data is in the receive
			// buffer, whose WQE completes with REM_INV_REQ_ERR; the SEND is
			// acknowledged if it asks to be (the requester's WC is
			// SUCCESS), the MSN not advanced; then the QP goes to Error.
			if p.BTH.AckReq {
				q.queueAck(wire.ACKSyndrome(wire.UnlimitedCredits), p.BTH.PSN)
				q.e.finalNAK = true
			}
			q.completeRecv(WCRemInvReqErr)
			q.fail()
			return
		case respErrTooMany:
			// IBA class C (invalid request: too many RDMA READ or ATOMIC
			// requests; rxe's ERR_TOO_MANY_RDMA_ATM_REQ: NAK Invalid
			// Request, QP to Error). The responses queued before this
			// request go out first, as they would have from a responder
			// that answers each request before the next; respProgress
			// then sends the NAK and fails the QP.
			q.resp.tooMany, q.resp.tooManyPSN = true, p.BTH.PSN
			st = respDone
		case respDrop:
			q.stats.inc(CtrDropped)
			if q.typ == UC {
				q.resp.seq = seqNone // drop the rest of the message
				q.resp.recvOff = 0
			}
			st = respDone
		}
		switch act {
		case respActAck:
			q.queueAck(wire.ACKSyndrome(wire.UnlimitedCredits), p.BTH.PSN)
		case respActNAK:
			q.queueAck(k.syndrome, k.nakPSN)
		case respActFail:
			q.stats.inc(CtrErrNAKsSent)
			q.queueAck(k.syndrome, k.nakPSN)
			q.e.finalNAK = true
			// A receive WQE in use completes in error (class C).
			if q.recvInUse() && (q.resp.seq == seqSend || k.status != WCSuccess) {
				st := k.status
				if st == WCSuccess {
					st = nakStatus(k.syndrome)
				}
				q.completeRecv(st)
			}
			q.fail()
			return
		}
	}
}

func (q *QP) queueAck(syndrome uint8, psn uint32) {
	r := &q.resp
	r.ack = pendingAck{want: true, syndrome: syndrome, psn: psn, msn: r.msn}
	r.unacked = 0
}

func (q *QP) respCheckPSN(k *respPkt) respState {
	r := &q.resp
	psn := k.p.BTH.PSN
	d := wire.PSNDiff(psn, r.epsn)
	if q.typ == UC {
		if d != 0 { // UC: a gap loses the message under way (IBA 9.8)
			r.seq, r.recvOff = seqNone, 0
			r.epsn = psn
		}
		return respCheckOpSeq
	}
	switch {
	case d == 0:
		r.nakSent = false
		return respCheckOpSeq
	case d < 0:
		return respDuplicate
	case r.nakSent:
		return respDrop
	case r.sr.on:
		q.srHoldPacket(k.p, d)
		return respDone
	}
	return respErrPSN
}

func (q *QP) respCheckOpSeq(k *respPkt) respState {
	pos := k.info.Pos
	cont := pos == wire.PosMiddle || pos == wire.PosLast
	switch q.resp.seq {
	case seqSend:
		if !cont || k.info.Kind != wire.KindSend {
			return respErrInvalid // missing LAST (class C)
		}
	case seqWrite:
		if !cont || k.info.Kind != wire.KindWrite {
			return respErrInvalid
		}
	default:
		if cont {
			if q.typ == UC {
				q.resp.epsn = wire.PSNAdd(k.p.BTH.PSN, 1)
				return respDrop // UC: wait for the next FIRST/ONLY
			}
			return respErrInvalid // missing FIRST (class C)
		}
	}
	return respCheckOpValid
}

func (q *QP) respCheckOpValid(k *respPkt) respState {
	acc := q.e.attr.Access
	switch k.info.Kind {
	case wire.KindWrite:
		if acc&mr.RemoteWrite == 0 {
			return respErrInvalid
		}
	case wire.KindReadRequest:
		if acc&mr.RemoteRead == 0 {
			return respErrInvalid
		}
	case wire.KindCompareSwap, wire.KindFetchAdd:
		if acc&mr.RemoteAtomic == 0 {
			return respErrInvalid
		}
	case wire.KindSend:
	default:
		return respDrop
	}
	return respCheckResource
}

func (q *QP) respCheckResource(k *respPkt) respState {
	r := &q.resp
	pos := k.info.Pos
	first := pos == wire.PosFirst || pos == wire.PosOnly
	last := pos == wire.PosLast || pos == wire.PosOnly
	switch k.info.Kind {
	case wire.KindSend:
		if first && q.recvEmpty() {
			return respErrRNR
		}
	case wire.KindWrite:
		if last && k.info.Headers&wire.HasImmDt != 0 && q.recvEmpty() {
			return respErrRNR
		}
	case wire.KindReadRequest, wire.KindCompareSwap, wire.KindFetchAdd:
		n := min(int(q.e.attr.MaxDestRdAtomic), resSlots)
		if n == 0 {
			return respErrInvalid // rxe: class C, as for too many
		}
		if r.res == nil {
			r.res = make([]resource, resSlots) // the first READ/atomic request: kept for the QP's life
		}
		if r.resNext >= n {
			r.resNext = 0 // max_dest_rd_atomic changed
		}
		// The ring holds the last n requests. A requester that keeps to
		// n outstanding (max_rd_atomic <= our max_dest_rd_atomic) has
		// completed the oldest of them before it sends another (READs and
		// atomics complete in order), so the slot is free: if its
		// response has not gone out yet, the requester exceeds
		// max_dest_rd_atomic, an invalid request of class C (IBA 9.9.3;
		// rxe names the case ERR_TOO_MANY_RDMA_ATM_REQ and NAKs it as
		// invalid, but meets it only when max_dest_rd_atomic is 0). A
		// replay queued for a duplicate of that oldest request is stale:
		// drop it. rxe, which sends a READ's responses before it looks at
		// the next request, never finds the slot busy and recycles it: it
		// answers excess requests and keeps no replay state for the
		// overwritten ones.
		if x := &r.res[r.resNext]; x.queued {
			if !x.sent {
				return respErrTooMany
			}
			r.dequeue(r.resNext)
		}
	}
	return respCheckLength
}

func (q *QP) respCheckLength(k *respPkt) respState {
	r := &q.resp
	n := uint64(len(k.p.Payload))
	pmtu := uint64(q.e.pmtu)
	switch k.info.Pos {
	case wire.PosFirst, wire.PosMiddle:
		if n != pmtu {
			return respErrInvalid
		}
	case wire.PosLast, wire.PosOnly:
		if n > pmtu {
			return respErrInvalid
		}
	}
	switch k.info.Kind {
	case wire.KindWrite:
		switch k.info.Pos {
		case wire.PosOnly:
			if n != uint64(k.p.RETH.DMALen) {
				return respErrInvalid
			}
		case wire.PosFirst:
			if uint64(k.p.RETH.DMALen) <= pmtu {
				return respErrInvalid
			}
		case wire.PosMiddle:
			if r.wOff+n >= r.wLen {
				return respErrInvalid
			}
		case wire.PosLast:
			if r.wOff+n != r.wLen {
				return respErrInvalid
			}
		}
	case wire.KindReadRequest:
		if uint64(k.p.RETH.DMALen) > MaxMessage {
			return respErrInvalid
		}
	case wire.KindCompareSwap, wire.KindFetchAdd:
		if k.p.Atomic.VA%8 != 0 {
			return respErrInvalid // misaligned atomic (class C)
		}
	}
	return respCheckRKey
}

func (q *QP) respCheckRKey(k *respPkt) respState {
	p := k.p
	var err error
	switch k.info.Kind {
	case wire.KindWrite:
		if (k.info.Pos == wire.PosFirst || k.info.Pos == wire.PosOnly) && p.RETH.DMALen > 0 {
			_, err = q.tbl.Remote(q.pd, q, p.RETH.RKey, p.RETH.VA, uint64(p.RETH.DMALen), mr.RemoteWrite)
		}
	case wire.KindReadRequest:
		if p.RETH.DMALen > 0 {
			_, err = q.tbl.Remote(q.pd, q, p.RETH.RKey, p.RETH.VA, uint64(p.RETH.DMALen), mr.RemoteRead)
		}
	case wire.KindCompareSwap, wire.KindFetchAdd:
		_, err = q.tbl.Remote(q.pd, q, p.Atomic.RKey, p.Atomic.VA, 8, mr.RemoteAtomic)
	}
	if err != nil {
		return respErrAccess
	}
	return respExecute
}

func (q *QP) respExecute(k *respPkt) respState {
	r := &q.resp
	p := k.p
	pos := k.info.Pos
	last := pos == wire.PosLast || pos == wire.PosOnly
	switch k.info.Kind {
	case wire.KindSend:
		if pos == wire.PosFirst || pos == wire.PosOnly {
			r.recvOff = 0
		}
		rqe := q.recvHead()
		if st := q.sglCopy(rqe.sgl(), r.recvOff, p.Payload, true); st != WCSuccess {
			k.status = st
			if st == WCLocLenErr {
				return respErrInvalid // message longer than the receive buffer
			}
			return respErrOp
		}
		r.recvOff += uint64(len(p.Payload))
		if k.info.Headers&wire.HasIETH != 0 && q.tbl.InvalidateRKey(q.pd, q, p.IETH) != nil {
			// Unknown key, another PD's, a region not registered with
			// mr.RemoteInvalidate (rxe_invalidate_mr refuses all but
			// fast-registration regions), a type 1 window, or a type 2B
			// window not bound to this queue pair.
			return respErrInvalidate
		}
		r.epsn = wire.PSNAdd(r.epsn, 1)
		r.seq = seqSend
		if last {
			r.seq = seqNone
			r.msn = (r.msn + 1) & wire.PSNMask
			wc := WC{ID: rqe.id, Opcode: WCRecv, ByteLen: uint32(r.recvOff), QPN: q.qpn, SrcQPN: q.e.attr.DestQPN}
			if k.info.Headers&wire.HasImmDt != 0 {
				wc.ImmData, wc.WithImm = p.ImmDt, true
			}
			if k.info.Headers&wire.HasIETH != 0 {
				wc.ImmData, wc.WithInv = p.IETH, true
			}
			q.pushRecv(&wc)
		}
	case wire.KindWrite:
		if pos == wire.PosFirst || pos == wire.PosOnly {
			r.wVA, r.wRKey, r.wLen, r.wOff = p.RETH.VA, p.RETH.RKey, uint64(p.RETH.DMALen), 0
		}
		if n := uint64(len(p.Payload)); n > 0 {
			b, err := q.tbl.RemoteCached(&q.rkeyCache, q.pd, q, r.wRKey, r.wVA+r.wOff, n, mr.RemoteWrite)
			if err != nil {
				return respErrAccess // deregistered since the first packet
			}
			copy(b, p.Payload)
			r.wOff += n
		}
		r.epsn = wire.PSNAdd(r.epsn, 1)
		r.seq = seqWrite
		if last {
			r.seq = seqNone
			r.msn = (r.msn + 1) & wire.PSNMask
			if k.info.Headers&wire.HasImmDt != 0 {
				rqe := q.recvHead()
				wc := WC{ID: rqe.id, Opcode: WCRecvRDMAWithImm, ByteLen: uint32(r.wLen), ImmData: p.ImmDt,
					WithImm: true, QPN: q.qpn, SrcQPN: q.e.attr.DestQPN}
				q.pushRecv(&wc)
			}
		}
	case wire.KindReadRequest:
		n := npkts(uint64(p.RETH.DMALen), q.e.pmtu)
		r.msn = (r.msn + 1) & wire.PSNMask
		i := r.newResource(min(int(q.e.attr.MaxDestRdAtomic), resSlots), resRead, p.BTH.PSN, wire.PSNAdd(p.BTH.PSN, n-1))
		x := &r.res[i]
		x.va, x.rkey, x.length, x.txPSN, x.txOff = p.RETH.VA, p.RETH.RKey, uint64(p.RETH.DMALen), p.BTH.PSN, 0
		r.enqueue(i)
		r.epsn = wire.PSNAdd(r.epsn, n)
		r.ack.want = false // the responses acknowledge what came before
	case wire.KindCompareSwap, wire.KindFetchAdd:
		b, err := q.tbl.Remote(q.pd, q, p.Atomic.RKey, p.Atomic.VA, 8, mr.RemoteAtomic)
		if err != nil {
			return respErrAccess
		}
		orig := atomicRMW(b, k.info.Kind == wire.KindCompareSwap, p.Atomic.Compare, p.Atomic.SwapAdd) // atomic_mem.go
		r.msn = (r.msn + 1) & wire.PSNMask
		i := r.newResource(min(int(q.e.attr.MaxDestRdAtomic), resSlots), resAtomic, p.BTH.PSN, p.BTH.PSN)
		r.res[i].orig = orig
		r.enqueue(i)
		r.epsn = wire.PSNAdd(r.epsn, 1)
		r.ack.want = false
	}
	return respAcknowledge
}

// pushRecv completes the receive WQE at the head of the receive queue. Its
// slot is released (rqDone) before the WC is pushed, so an application that
// reposts as soon as it polls the WC finds room.
func (q *QP) pushRecv(wc *WC) {
	r := &q.resp
	r.recvOff = 0
	if q.srqRecv.srq != nil {
		q.srqRecv.held = false
	} else {
		r.rqHead++
		q.rqDone.Store(r.rqHead)
	}
	if wc.Status == WCSuccess {
		q.stats.inc(CtrRecvsDone)
	}
	q.rcq.push(wc)
}

// flushRecv completes every posted receive WQE with a flush error (the QP
// is in Error).
func (q *QP) flushRecv() {
	if q.srqRecv.srq != nil {
		q.flushSRQRecv()
		return
	}
	q.flushPlaced() // place_resp.go
	r := &q.resp
	rposted := q.rqPosted.Load()
	rq := q.rq.Load() // after rposted: it covers every index below
	for r.rqHead != rposted {
		rqe := rq.at(r.rqHead)
		wc := WC{ID: rqe.id, Status: WCWRFlushErr, Opcode: WCRecv, QPN: q.qpn}
		r.rqHead++
		q.rqDone.Store(r.rqHead) // the slot is free before the WC shows
		q.rcq.push(&wc)
	}
}

// completeRecv completes the receive WQE at the head in error.
func (q *QP) completeRecv(st WCStatus) {
	wc := WC{ID: q.recvHead().id, Status: st, Opcode: WCRecv, QPN: q.qpn}
	q.pushRecv(&wc)
}

// respAcknowledge coalesces ACKs: one when the requester asks (AckReq) or
// every ackEvery packets (srAckEvery with selective repeat); READ and
// atomic requests are answered by their responses.
func (q *QP) respAcknowledge(k *respPkt) (respState, respAction) {
	if q.typ != RC {
		return respDone, respActNone
	}
	switch k.info.Kind {
	case wire.KindReadRequest, wire.KindCompareSwap, wire.KindFetchAdd:
		return respDone, respActNone
	}
	r := &q.resp
	r.unacked++
	every := uint32(ackEvery)
	if r.sr.on {
		every = srAckEvery
	}
	if k.p.BTH.AckReq || r.unacked >= every {
		return respDone, respActAck
	}
	return respDone, respActNone
}
