package qp

import (
	"github.com/xdproce/xdproce/roce/mr"
	"github.com/xdproce/xdproce/roce/place"
	"github.com/xdproce/xdproce/roce/wire"
)

// The responder's half of direct placement (place.go): a placement
// indication runs the checks a request's frames would meet, in the same
// order and with the same outcomes (ACK, sequence NAK once, RNR NAK, class
// C NAK with the queue pair to Error), at message granularity, and answers
// the daemon with the memory the message lands in or comes from.

// maxPlacedRecvs bounds the receive completions waiting for the daemon's
// Done; an indication that would pass it is dropped (the requester resends).
const maxPlacedRecvs = 1024

// PlaceInd answers a placement indication (place.KindInd) for this queue
// pair. Engine goroutine only.
func (q *QP) PlaceInd(m *place.Msg, now int64, out Output) {
	p := &q.plc
	q.e.now = now
	if q.ctlGen.Load() != q.e.ctlSeen {
		q.applyCtl()
	}
	x := p.placer.Load()
	if x == nil || q.typ != RC || (q.e.state != RTR && q.e.state != RTS) || m.SrcQPN != q.e.attr.DestQPN ||
		p.rN == maxPlacedRecvs {
		q.placeCount(3, &p.st.Dropped)
		return
	}
	buf := out.TxBuffer()
	if buf == nil {
		q.placeCount(3, &p.st.Dropped) // nothing changed: the requester resends
		return
	}
	a := &x.msg
	*a = place.Msg{Kind: place.KindAns, Op: m.Op, Tag: m.Tag, SrcQPN: m.SrcQPN, DstQPN: q.qpn}
	send, fail := q.placeCheck(x, m, a)
	if !send {
		q.placeCount(3, &p.st.Dropped)
		return
	}
	if n := place.Encode(buf, a); n > 0 {
		out.TxCommit(buf[:n])
		q.placeCount(1, &p.st.Answers)
	}
	if fail {
		q.fail()
	}
}

// placeCheck fills the answer a to m. send false: answer nothing (drop);
// fail: the queue pair goes to Error after the answer (class C).
func (q *QP) placeCheck(x *placeScratch, m *place.Msg, a *place.Msg) (send, fail bool) {
	r, pl := &q.resp, x.pl
	answer := func(syndrome uint8, psn uint32) {
		a.Status, a.Syndrome, a.PSN, a.MSN = place.Answer, syndrome, psn, r.msn
	}
	classC := func(syndrome uint8, status WCStatus) (bool, bool) {
		q.stats.inc(CtrErrNAKsSent)
		answer(syndrome, m.PSN)
		if status != WCSuccess && m.Op.Consumes() && q.recvInUse() {
			if q.plc.rN == 0 {
				q.completeRecv(status)
			} else { // behind placed messages still landing: keep the order
				wc := WC{ID: q.recvHead().id, Status: status, Opcode: WCRecv, QPN: q.qpn}
				r.rqHead++
				q.placedRecv(&wc)
			}
		}
		return true, true
	}
	if m.NPkts == 0 || uint64(m.Len) > MaxMessage || m.NPkts != npkts(uint64(m.Len), q.e.pmtu) {
		return classC(wire.NAKInvalidRequest, WCSuccess)
	}
	last := wire.PSNAdd(m.PSN, m.NPkts-1)
	switch d := wire.PSNDiff(m.PSN, r.epsn); {
	case d < 0:
		q.stats.inc(CtrDuplicates)
		if m.Op.Reads() {
			// A repeated READ is answered again, from the memory as it is
			// now (as the responder replays a READ from the wire).
			if st := q.placeRKey(pl, m, a, mr.RemoteRead); st != placeOK {
				return st != placeDrop, false
			}
			a.Status, a.Syndrome, a.PSN, a.MSN = place.Place, wire.ACKSyndrome(wire.UnlimitedCredits), last, r.msn
			return true, false
		}
		answer(wire.ACKSyndrome(wire.UnlimitedCredits), last)
		return true, false
	case d > 0:
		if r.nakSent {
			return false, false
		}
		r.nakSent = true
		q.stats.inc(CtrSeqNAKsSent)
		answer(wire.NAKPSNSeqErr, r.epsn)
		return true, false
	}
	r.nakSent = false
	if r.seq != seqNone {
		return classC(wire.NAKInvalidRequest, WCSuccess) // a message under way by frames
	}
	acc := q.e.attr.Access
	switch m.Op {
	case place.OpWrite, place.OpWriteImm:
		if acc&mr.RemoteWrite == 0 {
			return classC(wire.NAKInvalidRequest, WCSuccess)
		}
	case place.OpRead:
		if acc&mr.RemoteRead == 0 {
			return classC(wire.NAKInvalidRequest, WCSuccess)
		}
	case place.OpSend, place.OpSendImm:
	default:
		return classC(wire.NAKInvalidRequest, WCSuccess)
	}
	if m.Op.Consumes() {
		if q.srqRecv.srq != nil {
			a.Status, a.PSN = place.Fallback, m.PSN
			return true, false
		}
		if q.recvEmpty() {
			r.nakSent = true
			q.stats.inc(CtrRNRNAKsSent)
			answer(wire.RNRSyndrome(q.e.attr.MinRNRTimer), m.PSN)
			return true, false
		}
	}
	switch m.Op {
	case place.OpWrite, place.OpWriteImm, place.OpRead:
		need := mr.RemoteWrite
		if m.Op.Reads() {
			need = mr.RemoteRead
		}
		switch q.placeRKey(pl, m, a, need) {
		case placeAccess:
			return classC(wire.NAKRemoteAccess, WCSuccess)
		case placeFallback:
			return true, false
		}
	default:
		switch st := q.placeRecvSGL(pl, m, a); st {
		case WCSuccess:
		case placeFallbackStatus:
			return true, false
		case WCLocLenErr:
			return classC(wire.NAKInvalidRequest, st)
		default:
			return classC(wire.NAKRemoteOp, st)
		}
	}
	// Execute: the message takes its PSNs and a message sequence number.
	r.epsn = wire.PSNAdd(r.epsn, m.NPkts)
	r.msn = (r.msn + 1) & wire.PSNMask
	if m.Op.Consumes() {
		rqe := q.recvHead()
		wc := WC{ID: rqe.id, Opcode: WCRecv, ByteLen: m.Len, QPN: q.qpn, SrcQPN: q.e.attr.DestQPN}
		if m.Op == place.OpWriteImm {
			wc.Opcode = WCRecvRDMAWithImm
		}
		if m.Op != place.OpSend {
			wc.ImmData, wc.WithImm = m.Imm, true
		}
		r.rqHead++ // its slot goes back to the poster with its completion (PlaceDone)
		q.placedRecv(&wc)
		a.Flags |= place.FlagDone
	}
	a.Status, a.Syndrome, a.PSN, a.MSN = place.Place, wire.ACKSyndrome(wire.UnlimitedCredits), last, r.msn
	q.grantAnswer(x, a) // place_grant.go
	return true, false
}

// Outcomes of placeRKey.
const (
	placeOK = iota
	placeAccess
	placeFallback
	placeDrop
)

// placeFallbackStatus is placeRecvSGL's "not shared memory".
const placeFallbackStatus = WCStatus(255)

// placeRKey checks m's rkey for need over its range, as the responder does
// for a WRITE or READ, and names the memory in a.
func (q *QP) placeRKey(pl Placer, m *place.Msg, a *place.Msg, need mr.Access) int {
	a.NSegs = 0
	if m.Len == 0 {
		return placeOK
	}
	b, err := q.tbl.Remote(q.pd, q, m.RKey, m.VA, uint64(m.Len), need)
	if err != nil {
		return placeAccess
	}
	id, off, ok := pl.Region(b)
	if !ok {
		a.Status, a.PSN = place.Fallback, m.PSN
		return placeFallback
	}
	a.SegsBuf[0] = place.Seg{Region: id, Len: m.Len, Off: off}
	a.NSegs = 1
	return placeOK
}

// placeRecvSGL names the memory of the receive WQE at the head for m's
// bytes, checking each SGE as the responder's copy would.
func (q *QP) placeRecvSGL(pl Placer, m *place.Msg, a *place.Msg) WCStatus {
	a.NSegs = 0
	rest := uint64(m.Len)
	sgl := q.recvHead().sgl()
	for i := range sgl {
		if rest == 0 {
			break
		}
		s := &sgl[i]
		n := min(uint64(s.Length), rest)
		if n == 0 {
			continue
		}
		b, err := q.tbl.LocalCached(&q.lkeyCache, q.pd, s.LKey, s.Addr, n, mr.LocalWrite)
		if err != nil {
			return WCLocProtErr
		}
		id, off, ok := pl.Region(b)
		if !ok || a.NSegs == place.MaxSegs {
			a.Status, a.PSN = place.Fallback, m.PSN
			return placeFallbackStatus
		}
		a.SegsBuf[a.NSegs] = place.Seg{Region: id, Len: uint32(n), Off: off}
		a.NSegs++
		rest -= n
	}
	if rest != 0 {
		return WCLocLenErr // longer than the receive buffer
	}
	return WCSuccess
}

// placedRecv queues a receive completion until the daemon says the data
// has landed.
func (q *QP) placedRecv(wc *WC) {
	p := &q.plc
	if p.recv == nil {
		p.recv = make([]WC, 16)
	}
	if p.rN == len(p.recv) {
		grown := make([]WC, 2*len(p.recv))
		for i := range p.rN {
			grown[i] = p.recv[(p.rHead+i)%len(p.recv)]
		}
		p.recv, p.rHead = grown, 0
	}
	p.recv[(p.rHead+p.rN)%len(p.recv)] = *wc
	p.rN++
}

// PlaceDone takes the daemon's word that the oldest placed message waiting
// for it has landed (place.KindDone): its receive completion is pushed. A
// copy that failed completes it with a local protection error and fails
// the queue pair. Engine goroutine only.
func (q *QP) PlaceDone(m *place.Msg) {
	p := &q.plc
	if p.rN == 0 || q.e.state == Error {
		q.placeCount(3, &p.st.Dropped)
		return
	}
	wc := p.recv[p.rHead]
	p.rHead = (p.rHead + 1) % len(p.recv)
	p.rN--
	if m.Status == place.Failed {
		wc.Status, wc.ByteLen = WCLocProtErr, 0
	}
	q.rqDone.Add(1) // the slot is free before the WC shows
	if wc.Status == WCSuccess {
		q.stats.inc(CtrRecvsDone)
	}
	q.rcq.push(&wc)
	if m.Status == place.Failed {
		q.fail()
	}
}

// flushPlaced completes the receive WQEs still waiting for a Done with a
// flush error (the queue pair is in Error).
func (q *QP) flushPlaced() {
	p := &q.plc
	for ; p.rN > 0; p.rN-- {
		wc := p.recv[p.rHead]
		p.rHead = (p.rHead + 1) % len(p.recv)
		if wc.Status == WCSuccess {
			wc = WC{ID: wc.ID, Status: WCWRFlushErr, Opcode: WCRecv, QPN: q.qpn}
		}
		q.rqDone.Add(1)
		q.rcq.push(&wc)
	}
}
